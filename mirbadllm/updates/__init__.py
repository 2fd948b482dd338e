"""The release side of verified updates: ``python -m mirbadllm.updates keygen|sign|make-feed|sums|verify``.

The feed, signing and checking code is in ``core.releases`` (shared with the app and the daemon); this
package is only the release pipeline's command line (``cli.py``).
"""
