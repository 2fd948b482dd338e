"""The admin API through the real ``DaemonClient``: models CRUD, lifecycle, events, logs, keys."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import psutil
import pytest

from daemon.api.client import DaemonClient, DaemonError
from daemon.api.models import DaemonSettings, ModelState
from daemon.listener import lan_hosts
from tests.daemon.harness import model, running_daemon


async def test_admin_needs_the_token(tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as d:  # no node needed
        token_file = tmp_path / "home" / "admin-token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        wrong = DaemonClient(d.url, "not-the-token")
        with pytest.raises(DaemonError) as caught:
            await wrong.status()
        assert caught.value.status == 401 and caught.value.code == "invalid_admin_token"
        assert await wrong.healthz() is True  # /healthz needs no token
        await wrong.close()


async def test_model_lifecycle_events_and_logs(tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        start_id = (await d.client.status()).last_event_id
        view = await d.client.create_model(model("m", str(model_file), tags=["chat"]))
        assert view.status.state == ModelState.STOPPED
        with pytest.raises(DaemonError) as dup:
            await d.client.create_model(model("m", str(model_file)))
        assert dup.value.status == 409

        status = await d.client.start_model("m", wait=True)
        assert status.state == ModelState.READY and status.pid and status.endpoint
        page = await d.client.events(start_id, timeout=0)
        states = [e.data["state"] for e in page.events if e.type == "model.state"]
        assert states[-2:] == ["starting", "ready"]
        # The first of the model's events (a node may say it is slow in between, on a loaded machine).
        assert [e.type for e in page.events if e.model == "m"][0] == "model.added"

        lines = [line async for line in d.client.logs("m", tail=50)]
        assert any("listening" in line or "model loaded" in line for line in lines), lines

        # A settings change on a running model shows as restart pending, until a restart.
        changed = view.definition.model_copy(update={"settings": view.definition.settings.model_copy(update={"ctx_size": 4096})})
        updated = await d.client.update_model(changed)
        assert updated.status.restart_pending is True
        old_pid = updated.status.pid
        await d.client.restart_model("m")
        status = await d.wait_state("m", ModelState.READY)
        assert status.restart_pending is False and status.pid != old_pid

        stopped = await d.client.stop_model("m")
        assert stopped.state == ModelState.STOPPED
        await d.client.delete_model("m")
        assert await d.client.list_models() == []


async def test_invalid_definitions_are_refused_with_the_field(tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as d:  # no node needed
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {d.daemon.admin_token}"}) as s:
            bad = {"id": "Bad Id", "served_name": "x", "model_path": "/m.gguf", "settings": {"ctx_size": -5}}
            async with s.post(f"{d.url}/api/models", json=bad) as r:
                body = await r.json()
            assert r.status == 422 and body["error"]["code"] == "invalid_model"
            assert "id:" in body["error"]["message"] and "settings.ctx_size" in body["error"]["message"]
        assert await d.client.list_models() == []


async def test_a_failing_start_reports_the_runtime_error(tmp_path: Path, model_file: Path) -> None:
    from tests.fakes import write_fake_runtime

    broken = write_fake_runtime(tmp_path / "bin", exit_code=3)
    async with running_daemon(tmp_path / "home", broken) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m")
        status = await d.wait_state("m", ModelState.FAILED)
        assert "exited" in status.error and "3" in status.error
        assert status.last_log_lines
        # It can never succeed as it is: not retried as a crash, not started again at the next boot.
        page = await d.client.events(0, timeout=0)
        assert not any(e.type == "model.crashed" for e in page.events)
        assert (await d.client.get_model("m")).status.crash_count == 0
        assert "m" not in d.daemon.orchestrator.book.wanted


async def test_keys_are_shown_once_and_lan_access_needs_one(tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as d:  # no node needed
        with pytest.raises(DaemonError) as refused:
            await d.client.put_settings(DaemonSettings(lan_access=True))
        assert refused.value.code == "keys_required"
        created = await d.client.create_key("laptop")
        listed = await d.client.list_keys()
        assert [k.name for k in listed] == ["laptop"]
        assert created.key not in repr(listed) and listed[0].prefix == created.key[:14]
        settings = await d.client.put_settings(DaemonSettings(require_api_keys=True))
        assert settings.require_api_keys and (await d.client.status()).daemon.keys_required
        assert "require_api_keys = true" in (tmp_path / "home" / "config.toml").read_text()
        # A client that sends one setting changes that one: keys stay required.
        settings = await d.client.put_settings(DaemonSettings(audit_retention_days=30))
        assert settings.require_api_keys and settings.audit_retention_days == 30
        assert (await d.client.status()).daemon.keys_required


async def test_history_records_model_and_node_samples(tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)

        async def has_points() -> bool:
            series = await d.client.model_history("m", "5m")
            return any(p.values.get("rss_bytes") for p in series.points)

        for _ in range(200):
            if await has_points():
                break
            await asyncio.sleep(0.1)
        series = await d.client.model_history("m", "5m")
        assert series.points and series.points[-1].values["rss_bytes"] > 0
        node = await d.client.node_history("local", "5m")
        assert node.points and node.points[-1].values["mem_total_bytes"] > 0
        status = await d.client.status()
        assert status.hosts and status.hosts[0].memory_total


async def test_open_to_the_lan_the_daemon_names_addresses_other_devices_can_use(tmp_path: Path) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as d:  # no node needed
        await d.client.create_key("phone")
        await d.client.put_settings(DaemonSettings(lan_access=True))
        info = (await d.client.status()).daemon
        assert "0.0.0.0" not in info.api_url and all("0.0.0.0" not in u for u in info.lan_urls)
        assert info.lan_urls == [f"http://{h}:{info.port}/v1" for h in lan_hosts()]
        assert info.api_url == (info.lan_urls[0] if info.lan_urls else f"http://127.0.0.1:{info.port}/v1")
        assert not any(u.startswith(("http://127.", "http://172.17.")) for u in info.lan_urls), "no loopback, no docker0"
        async with aiohttp.ClientSession() as session:
            for url in info.lan_urls:  # each one really reaches /v1, which wants the key
                async with session.get(f"{url}/models") as resp:
                    assert resp.status == 401
        home_json = json.loads((tmp_path / "home" / "daemon.json").read_text())
        assert home_json["admin_url"].startswith("http://127.0.0.1:"), "this machine's clients stay on loopback"

        await d.client.put_settings(DaemonSettings(lan_access=False))
        info = (await d.client.status()).daemon
        assert info.lan_urls == [] and info.api_url.startswith("http://127.0.0.1:")


def test_lan_hosts_skip_loopback_link_local_bridges_and_interfaces_that_are_down(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def addr(ip: str) -> object:
        return SimpleNamespace(family=socket.AF_INET, address=ip)

    up, down = SimpleNamespace(isup=True), SimpleNamespace(isup=False)
    interfaces = {"lo": [addr("127.0.0.1")], "eth0": [addr("203.0.113.7")], "wlan0": [addr("192.168.1.20")],
                  "docker0": [addr("172.17.0.1")], "eth1": [addr("169.254.3.4")], "eth2": [addr("10.0.0.9")]}
    stats = {name: up for name in interfaces} | {"eth2": down}
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: interfaces)
    monkeypatch.setattr(psutil, "net_if_stats", lambda: stats)
    assert lan_hosts() == ["192.168.1.20", "203.0.113.7"]
