"""Verified updates: the signed release feed, its checker, and the per-OS installer seam.

It lives under ``daemon/api`` because that is the one place both the app (which may import only
the daemon's contracts) and the daemon may import; it is Qt-free and touches no daemon internals.

- ``feed.py``: the feed's shape (``ReleaseFeed``), ``make_feed`` and ``sha256sums_text`` (pure).
- ``signing.py``: Ed25519 keys, ``sign_bytes``, ``verify_feed_signature`` and the built-in
  ``RELEASE_PUBLIC_KEYS``.
- ``checker.py``: ``UpdateChecker`` fetches the feed, checks its signature before anything else,
  refuses a downgrade, and downloads, verifies and stages the artefact for this platform.
- ``installer.py``: the ``Installer`` protocol, the Linux AppImage installer, and the not-yet
  supported ones.

The release side (keygen, sign, make-feed) is ``python -m mirbadllm.updates``.
"""

from daemon.api.updates.checker import UpdateChecker
from daemon.api.updates.feed import (
    PLATFORMS,
    ReleaseArtefact,
    ReleaseFeed,
    make_feed,
    sha256sums_text,
)
from daemon.api.updates.installer import (
    AppImageInstaller,
    Installer,
    UnsupportedInstaller,
    installer_for_this_os,
)
from daemon.api.updates.signing import (
    RELEASE_PUBLIC_KEYS,
    sign_bytes,
    verify_feed_signature,
)
from daemon.api.updates.staging import (
    StagedUpdate,
    UpdateError,
    UpdateReady,
    UpdateResult,
    UpToDate,
)

__all__ = [
    "PLATFORMS", "RELEASE_PUBLIC_KEYS", "AppImageInstaller", "Installer", "ReleaseArtefact", "ReleaseFeed",
    "StagedUpdate", "UnsupportedInstaller", "UpToDate", "UpdateChecker", "UpdateError", "UpdateReady", "UpdateResult",
    "installer_for_this_os", "make_feed", "sha256sums_text", "sign_bytes", "verify_feed_signature",
]
