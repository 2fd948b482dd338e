"""Wire contracts of the agent (``/agent/v1``) and its typed client.

The daemon, the tests and nothing else import this package from outside ``agent/``.
"""
