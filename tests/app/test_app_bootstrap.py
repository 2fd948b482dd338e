"""Start-up without Qt: finding or starting the daemon, start at login, and the app's preferences."""

from __future__ import annotations

import asyncio
import json
import plistlib
import sys
from pathlib import Path

import pytest

from app import autostart
from app.bootstrap import BootstrapError, connect_daemon, daemon_command, log_tail
from app.preferences import AppPreferences, load_preferences, save_preferences


class FakeProcess:
    def __init__(self, code: int | None = None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


class World:
    """A home directory and a daemon that comes up when spawned (or exits, or never answers)."""

    def __init__(self, home: Path, *, comes_up: bool = True, exit_code: int | None = None) -> None:
        self.home = home
        self.spawned: list[list[str]] = []
        self.comes_up = comes_up
        self.exit_code = exit_code
        self.up = False

    async def health(self, url: str) -> bool:
        await asyncio.sleep(0)
        return self.up and url == "http://127.0.0.1:9999"

    def spawn(self, argv: list[str], log_path: Path) -> FakeProcess:
        self.spawned.append(argv)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("daemon: starting\nERROR: port 8484 is in use\n")
        if self.comes_up:
            (self.home / "daemon.json").write_text(json.dumps({"admin_url": "http://127.0.0.1:9999"}))
            (self.home / "admin-token").write_text("secret-token\n")
            self.up = True
        return FakeProcess(self.exit_code)


async def test_a_running_daemon_is_used_as_it_is(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.spawn(["already"], tmp_path / "x.log")
    world.spawned.clear()
    conn = await connect_daemon(tmp_path, health=world.health, spawn=world.spawn, poll_s=0.001)
    assert (conn.url, conn.token, conn.started_by_us) == ("http://127.0.0.1:9999", "secret-token", False)
    assert world.spawned == []


async def test_two_apps_starting_together_start_one_daemon(tmp_path: Path) -> None:
    world = World(tmp_path)
    first, second = await asyncio.gather(
        connect_daemon(tmp_path, health=world.health, spawn=world.spawn, poll_s=0.001),
        connect_daemon(tmp_path, health=world.health, spawn=world.spawn, poll_s=0.001))
    assert world.spawned == [daemon_command(tmp_path)]
    assert sorted([first.started_by_us, second.started_by_us]) == [False, True]
    assert daemon_command(tmp_path) == [sys.executable, "-m", "mirbadllm", "daemon", "--home", str(tmp_path)]


async def test_a_daemon_that_exits_is_reported_with_its_last_lines(tmp_path: Path) -> None:
    world = World(tmp_path, comes_up=False, exit_code=1)
    with pytest.raises(BootstrapError) as info:
        await connect_daemon(tmp_path, health=world.health, spawn=world.spawn, poll_s=0.001)
    assert "exited with code 1" in info.value.message
    assert "port 8484 is in use" in info.value.log_tail
    assert "daemon-launch.log" in info.value.advice


async def test_a_daemon_that_never_answers_times_out(tmp_path: Path) -> None:
    world = World(tmp_path, comes_up=False)
    with pytest.raises(BootstrapError, match="did not answer"):
        await connect_daemon(tmp_path, health=world.health, spawn=world.spawn, timeout_s=0.05, poll_s=0.001)


async def test_no_daemon_start_and_missing_token_say_what_to_do(tmp_path: Path) -> None:
    world = World(tmp_path)
    with pytest.raises(BootstrapError) as info:
        await connect_daemon(tmp_path, allow_start=False, health=world.health, spawn=world.spawn)
    assert "--no-daemon-start" in info.value.advice and world.spawned == []
    world.up = True
    (tmp_path / "daemon.json").write_text(json.dumps({"admin_url": "http://127.0.0.1:9999"}))
    with pytest.raises(BootstrapError, match="no admin token"):
        await connect_daemon(tmp_path, allow_start=False, health=world.health, spawn=world.spawn)


def test_log_tail_keeps_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "d.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert log_tail(log, 3) == "line 97\nline 98\nline 99"
    assert log_tail(tmp_path / "missing.log") == ""


def test_linux_autostart_writes_an_xdg_desktop_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert not autostart.is_enabled("linux")
    autostart.set_enabled(True, ["/opt/py", "-m", "mirbadllm", "--minimized"], platform="linux")
    entry = (tmp_path / "autostart" / "mirbadllm.desktop").read_text()
    assert "Exec=/opt/py -m mirbadllm --minimized" in entry and "Type=Application" in entry
    assert autostart.is_enabled("linux")
    autostart.set_enabled(False, platform="linux")
    assert not autostart.is_enabled("linux")


def test_macos_autostart_writes_a_launch_agent(tmp_path: Path) -> None:
    autostart.set_enabled(True, ["/opt/py", "-m", "mirbadllm"], platform="darwin", base=tmp_path)
    plist = plistlib.loads((tmp_path / "Library/LaunchAgents/com.mirbadllm.app.plist").read_bytes())
    assert plist["ProgramArguments"] == ["/opt/py", "-m", "mirbadllm"] and plist["RunAtLoad"] is True


def test_preferences_round_trip_and_survive_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "app.json"
    save_preferences(AppPreferences(theme="dark", daemon_url="http://127.0.0.1:9000"), path)
    assert load_preferences(path).theme == "dark"
    path.write_text("{not json")
    assert load_preferences(path) == AppPreferences()
