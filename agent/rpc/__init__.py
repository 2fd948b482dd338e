"""One llama.cpp model across nodes: the agent's side of llama.cpp's RPC (``agent.api.rpc``).

``peers``: who is calling (the daemon, or another agent) and what each may reach; ``servers``:
the helper's rpc-servers on loopback and their grants; ``tunnel``: the helper's WebSocket route
to them; ``forwards``: the main node's loopback listeners that carry llama-server's RPC
connections through a helper's tunnel.
"""
