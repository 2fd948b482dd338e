"""Jobs of the daemon: benchmarks and tuning runs of one model at a time per node.

``manager`` owns the jobs (maintenance windows, draining, persistence, events); ``benchmark``
runs the suite against a runtime; ``tuning`` searches settings; ``scoring``, ``presets`` and
``planner`` are pure functions tested with exact values.
"""
