"""llama.cpp builds rolled out to the paired agents, one node at a time (``/api/nodes/runtime-upgrade``).

- ``build.py``: the build folder ``make runtime`` writes, every file checked against its
  ``runtime.json``, packed as one tar.gz for the agents.
- ``rollout.py``: ``RuntimeRollout``, the agent rollout's walk (``daemon.upgrades.rollout``) with
  another step per node: push the build (``AgentClient.runtime_build``: the agent verifies,
  unpacks beside, smoke-tests, then prefers it) and see the node offer it.
- ``manager.py``: ``RuntimeUpgradeManager`` (one rollout at a time, the build each node should run
  in ``runtime-builds.json``); ``api.py``: its handlers.
"""
