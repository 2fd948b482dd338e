"""Wire contracts of the daemon's admin API (``/api``) and its typed client ``DaemonClient``.

The app, the ``mirbadllm ctl`` CLI and the tests use this package; nothing else of the daemon.
"""
