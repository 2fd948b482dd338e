"""Fleet metrics for Prometheus: the fleet's figures on ``/metrics`` and HTTP service discovery."""
