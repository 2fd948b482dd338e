"""The Settings page's updates: check the signed release feed, stage the new build, restart into it.

The checking, verifying and staging are ``app.updates`` (Qt-free, shared with the daemon);
this holds the page's state. The feed URL is an app preference (the project's releases by
default; empty means updates are off), checked daily while ``check_updates_daily`` is on.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from app.updates import (
    Installer,
    StagedUpdate,
    UpdateChecker,
    UpdateError,
    UpdateReady,
    UpdateResult,
    installer_for_this_os,
)
from app.viewmodels.observable import Observable
from daemon.api.program import program_version

_LOGGER = logging.getLogger(__name__)

_VERSION = program_version()

UPDATES_OFF = "Updates are off: no release feed URL is set."


class Checker(Protocol):
    async def check(self) -> UpdateResult: ...


@dataclass(frozen=True)
class UpdatesState:
    feed_url: str
    line: str = UPDATES_OFF  # the result line under the button
    error: bool = False  # the line is a refusal or a failure
    checking: bool = False
    ready: StagedUpdate | None = None  # verified and staged: "Restart to update" is offered
    latest: str | None = None  # the feed's version at the last check that read it (the Releases page)

    @property
    def enabled(self) -> bool:
        return bool(self.feed_url)


class UpdatesViewModel:
    def __init__(self, feed_url: str, staging_dir: Path, *, installer: Installer | None = None,
                 checker_factory: Callable[[str], Checker] | None = None, current_version: str = _VERSION) -> None:
        self.installer = installer or installer_for_this_os()
        self.current_version = current_version
        self._staging_dir = staging_dir
        self._factory = checker_factory or self._real_checker
        self.state: Observable[UpdatesState] = Observable(self._idle(feed_url))

    def _real_checker(self, feed_url: str) -> Checker:
        return UpdateChecker(feed_url, current_version=self.current_version, installer=self.installer,
                             staging_dir=self._staging_dir)

    @staticmethod
    def _idle(feed_url: str) -> UpdatesState:
        return UpdatesState(feed_url, line="" if feed_url else UPDATES_OFF)

    def set_feed_url(self, feed_url: str) -> None:
        if feed_url != self.state.value.feed_url:
            self.state.set(self._idle(feed_url))

    async def check(self) -> None:
        s = self.state.value
        if not s.enabled or s.checking:
            return
        self.state.set(replace(s, line="Checking for updates…", error=False, checking=True, ready=None))
        try:
            result = await self._factory(s.feed_url).check()
        except UpdateError as exc:
            self.state.set(replace(self.state.value, line=exc.message, error=True, checking=False))
            return
        except Exception as exc:  # a bug must not leave the button spinning
            _LOGGER.exception("update check failed")
            self.state.set(replace(self.state.value, line=f"Could not check for updates: {exc}", error=True,
                                   checking=False))
            return
        ready = result.staged if isinstance(result, UpdateReady) else None
        latest = result.version if isinstance(result, UpdateReady) else result.latest
        self.state.set(replace(self.state.value, line=result.message, checking=False, ready=ready, latest=latest))

    async def check_daily(self, *, first_after_s: float = 60.0, every_s: float = 86_400.0,
                          sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Check a while after the app starts, then once a day, until cancelled. A failure only
        says so on the Settings page (an offline machine is normal); a staged update offers
        "Restart to update" there and in the tray's notice."""
        await sleep(first_after_s)
        while True:
            if self.state.value.enabled and self.state.value.ready is None:
                await self.check()
            await sleep(every_s)

    async def restart_command(self) -> list[str] | None:
        """Install the staged update; the command that starts the new program once this app quits."""
        staged = self.state.value.ready
        if staged is None:
            return None
        try:
            program = await asyncio.get_running_loop().run_in_executor(None, self.installer.apply, staged)
            return self.installer.restart_command(program, os.getpid())
        except UpdateError as exc:
            self.state.set(replace(self.state.value, line=exc.message, error=True, ready=None))
            return None
