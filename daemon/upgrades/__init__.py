"""Rolling upgrades of the paired agents, one node at a time (``/api/nodes/upgrade``).

- ``release.py``: the staged agent release: the signed feed (checked with
  ``core.releases.signing``) and each platform's build beside it, sizes and SHA-256 checked.
- ``feed.py``: the same release fetched from the signed feed the app updated from (its version must
  be the daemon's own), each build the nodes need downloaded against the feed's size and SHA-256.
- ``rollout.py``: ``Rollout`` walks the nodes in order: push the build (``AgentClient.upgrade``),
  wait until the node is back with the new version and the same runtime PIDs, then the next; the
  first node that refuses or does not come back stops it.
- ``manager.py``: ``UpgradeManager`` (one rollout at a time, its view and events) and ``routes``.
"""
