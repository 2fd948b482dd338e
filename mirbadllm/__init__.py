"""The ``mirbadllm`` launcher: one command that dispatches to the app, the daemon, the agent or ctl."""

__version__ = "0.1.0"
