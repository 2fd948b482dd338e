"""The app's verified self-update: the checker that stages a new build and the per-OS installer seam.

- ``checker.py``: ``UpdateChecker`` fetches the feed (``core.releases.fetch``: its signature checked
  before anything else), refuses a downgrade, and downloads, verifies and stages the artefact for
  this platform.
- ``installer.py``: the ``Installer`` protocol, the Linux AppImage installer, and the not-yet
  supported ones.
- ``staging.py``: the staging folder and the outcome types.

The feed's shape and signing are ``core.releases`` (shared with the daemon's GPU runtime packs and
the release side, ``python -m mirbadllm.updates``); they are re-exported here for the app.
"""

from app.updates.checker import UpdateChecker
from app.updates.installer import (
    AppImageInstaller,
    Installer,
    UnsupportedInstaller,
    installer_for_this_os,
)
from app.updates.staging import (
    StagedUpdate,
    UpdateReady,
    UpdateResult,
    UpToDate,
)
from core.releases.feed import (
    PLATFORMS,
    ReleaseArtefact,
    ReleaseFeed,
    make_feed,
    sha256sums_text,
)
from core.releases.fetch import UpdateError
from core.releases.signing import (
    RELEASE_PUBLIC_KEYS,
    sign_bytes,
    verify_feed_signature,
)

__all__ = [
    "PLATFORMS", "RELEASE_PUBLIC_KEYS", "AppImageInstaller", "Installer", "ReleaseArtefact", "ReleaseFeed",
    "StagedUpdate", "UnsupportedInstaller", "UpToDate", "UpdateChecker", "UpdateError", "UpdateReady", "UpdateResult",
    "installer_for_this_os", "make_feed", "sha256sums_text", "sign_bytes", "verify_feed_signature",
]
