"""The MirbadLLM daemon: registry, keys, the /v1 router, the admin API and the fleet."""
