"""The bottom layer every program shares (app, daemon, agent, launcher): atomic files and JSON
stores, file hashing, the HTTP plumbing and the relay, key storage, safe names, and the signed
release feed. It imports nothing of ours (``tests/unit/test_import_boundaries.py``)."""
