"""The MirbadLLM node agent: runtimes, admission, telemetry and the proxy on one machine."""
