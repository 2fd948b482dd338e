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
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    async with running_daemon(home, None, local_agent=False) as rd:
        assert await _ctl(rd, "keys", "create", "editor", "--rpm", "20") == 0
        assert "Copy it now" in capsys.readouterr().out
        [key] = await rd.client.list_keys()
        assert key.limits == ApiKeyLimits(requests_per_minute=20)
        assert await _ctl(rd, "keys", "limit", key.id, "--tokens-per-day", "50000") == 0
        assert "0/20 rpm, 0/50000 tokens today (UTC)" in capsys.readouterr().out  # rpm was kept
        assert await _ctl(rd, "keys", "limit", key.id) == 2  # nothing given: nothing changed
        capsys.readouterr()
    async with running_daemon(home, None, local_agent=False) as rd:
        assert await _ctl(rd, "keys", "list") == 0
        assert "0/20 rpm, 0/50000 tokens today (UTC)" in capsys.readouterr().out
        assert await _ctl(rd, "keys", "limit", key.id, "--rpm", "none") == 0
        assert (await rd.client.list_keys())[0].limits == ApiKeyLimits(tokens_per_day=50000)
        with pytest.raises(DaemonError) as caught:
            await _ctl(rd, "keys", "limit", "nope", "--rpm", "5")
        assert caught.value.code == "key_not_found"


async def test_a_key_is_named_as_the_readme_writes_it_and_names_are_unique(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemon(tmp_path / "home", None, local_agent=False) as rd:
        assert await _ctl(rd, "keys", "create", "my-editor") == 0
        with pytest.raises(DaemonError) as taken:
            await rd.client.create_key("My-Editor ")
        assert (taken.value.status, taken.value.code) == (409, "key_name_taken")
        assert "my-editor" in taken.value.message
        assert [k.name for k in await rd.client.list_keys()] == ["my-editor"]

        assert await _ctl(rd, "keys", "limit", "my-editor", "--rpm", "60", "--tokens-per-day", "200000") == 0
        assert "my-editor: 0/60 rpm, 0/200000 tokens today (UTC)" in capsys.readouterr().out
        with pytest.raises(DaemonError) as unknown:
            await _ctl(rd, "keys", "revoke", "laptop")
        assert unknown.value.code == "key_not_found" and "my-editor (" in unknown.value.message
        assert await _ctl(rd, "keys", "revoke", "my-editor") == 0
        assert await rd.client.list_keys() == []


def test_ctl_into_a_pipe_closed_early_ends_quietly(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """`ctl jobs | head -1`: the reader goes away; ctl ends with 0 and no BrokenPipeError trace."""
    import os
    import sys

    (tmp_path / "admin-token").write_text("t")
    args = ctl.parse_args(["--home", str(tmp_path), "--url", "http://127.0.0.1:9", "keys", "list"])
    read, write = os.pipe()
    os.close(read)  # the reader has gone
    saved, sys.stdout = sys.stdout, os.fdopen(write, "w")

    async def chatty(_args: object, _client: object) -> int:
        for n in range(100_000):
            print(f"line {n}")
        return 0

    try:
        assert ctl.run_with_client(args, chatty) == 0  # type: ignore[arg-type]
    finally:
        sys.stdout = saved
    assert "BrokenPipeError" not in capfd.readouterr().err


def test_a_bad_value_is_said_in_plain_words() -> None:
    from pydantic import ValidationError

    from daemon.api.models import ModelDefinition

    with pytest.raises(ValidationError) as bad:
        ModelDefinition.model_validate({"id": "m", "served_name": "m", "model_path": "/m.gguf",
                                         "settings": {"ctx_size": -5}})
    text = ctl.plain_errors(bad.value)
    assert text == "settings.ctx_size: Input should be greater than or equal to 0"
    assert "errors.pydantic.dev" not in text
