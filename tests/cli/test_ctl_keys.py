"""``mirbadllm ctl keys``: create, limit (--rpm, --tokens-per-day; none clears), list; the limits a
ctl command sets are the daemon's and outlive its restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.api.client import DaemonError
from daemon.api.models import ApiKeyLimits
from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, running_daemon


async def _ctl(rd: RunningDaemon, *argv: str) -> int:
    return await ctl.run(ctl.parse_args(list(argv)), rd.client)


async def test_ctl_sets_and_clears_a_keys_limits_and_they_persist(
        tmp_path: Path, fake_runtime: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    async with running_daemon(home, fake_runtime) as rd:
        assert await _ctl(rd, "keys", "create", "editor", "--rpm", "20") == 0
        assert "Copy it now" in capsys.readouterr().out
        [key] = await rd.client.list_keys()
        assert key.limits == ApiKeyLimits(requests_per_minute=20)
        assert await _ctl(rd, "keys", "limit", key.id, "--tokens-per-day", "50000") == 0
        assert "0/20 rpm, 0/50000 tokens today (UTC)" in capsys.readouterr().out  # rpm was kept
        assert await _ctl(rd, "keys", "limit", key.id) == 2  # nothing given: nothing changed
        capsys.readouterr()
    async with running_daemon(home, fake_runtime) as rd:
        assert await _ctl(rd, "keys", "list") == 0
        assert "0/20 rpm, 0/50000 tokens today (UTC)" in capsys.readouterr().out
        assert await _ctl(rd, "keys", "limit", key.id, "--rpm", "none") == 0
        assert (await rd.client.list_keys())[0].limits == ApiKeyLimits(tokens_per_day=50000)
        with pytest.raises(DaemonError) as caught:
            await _ctl(rd, "keys", "limit", "nope", "--rpm", "5")
        assert caught.value.code == "key_not_found"
