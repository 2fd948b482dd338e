"""Signed releases: the feed's shape (``feed``), Ed25519 signing (``signing``) and fetching the feed
and its artefacts with every check (``fetch``)."""
