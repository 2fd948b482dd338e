"""Host services of the nodes: the admin API that forwards to each node's agent (``api``), with
the daemon's own whitelist (``policy``). The agent decides; the daemon adds its names and audits."""
