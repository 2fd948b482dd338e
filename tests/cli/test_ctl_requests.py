"""``mirbadllm ctl requests`` against a real daemon: a /v1 request looked up by the X-Request-Id its
answer carried (model asked and served, node by name, status, times, tokens, why it failed), the
list and its filters, and an unknown id said plainly with a non-zero exit."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import aiohttp
import pytest

from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, model, running_daemon


async def _ctl(home: Path, *argv: str) -> int:
    """The real ``mirbadllm ctl`` (its own client, token and URL from the home), off the test's loop."""
    return await asyncio.to_thread(ctl.main, ["--home", str(home), *argv])


async def _chat(d: RunningDaemon, model_name: str, key: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": model_name, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session, \
            session.post(f"{d.v1}/chat/completions", json=body, headers=headers) as answer:
        await answer.read()
        return answer.status, answer.headers["X-Request-Id"]


def _fields(out: str) -> dict[str, str]:
    """``show``'s lines as name -> value (names are padded to one width, two spaces before the value)."""
    found = {}
    for line in out.splitlines():
        name, _, value = line.partition("  ")
        found[name.strip()] = value.strip()
    return found


async def test_ctl_requests_shows_what_happened_to_a_request(tmp_path: Path, fake_runtime: Path, model_file: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    async with running_daemon(home, fake_runtime) as d:
        await d.client.create_model(model("coder", str(model_file)))
        await d.client.create_model(model("big", str(model_file), start_on_request=False, fallbacks=["coder"]))
        await d.client.start_model("coder", wait=True)
        key = await d.client.create_key("laptop")
        status, answered = await _chat(d, "coder", key.key)
        assert status == 200
        status, fell_back = await _chat(d, "big")
        assert status == 200
        status, refused = await _chat(d, "gpt-4o")
        assert status == 404
        await d.logged_requests(3)
        capsys.readouterr()

        assert await _ctl(home, "requests", "show", answered) == 0
        shown = _fields(capsys.readouterr().out)
        assert shown["request"] == answered and shown["model"] == "coder" and shown["served by"] == "coder"
        assert shown["node"] == socket.gethostname()  # by name, not by id
        assert shown["key"] == f"laptop ({key.info.id})" and shown["status"] == "200 OK"
        assert shown["tokens"] == "1 prompt + 8 completion"
        assert all(shown[name].endswith(("ms", " s")) for name in ("queued", "first token", "total"))
        assert "failure" not in shown and "reason" not in shown

        assert await _ctl(home, "requests", "show", fell_back) == 0
        shown = _fields(capsys.readouterr().out)
        assert shown["model"] == "big (asked); answered by the fallback coder" and shown["served by"] == "coder"
        assert "big" in shown["on the way"] and "stopped" in shown["on the way"]  # why big did not answer

        assert await _ctl(home, "requests", "show", refused) == 0
        shown = _fields(capsys.readouterr().out)
        assert shown["status"] == "404 Not Found" and shown["failure"] == "model_not_found"
        assert "gpt-4o" in shown["reason"] and shown["node"].startswith("-") and shown["key"] == "none"

        assert await _ctl(home, "requests", "list") == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == ["TIME", "ID", "STATUS", "MODEL", "NODE", "TOTAL", "TTFT", "TOKENS", "WHY"]
        assert [line.split()[2] for line in lines[1:]] == [refused, fell_back, answered]  # newest first
        assert "big -> coder" in lines[2] and "model_not_found" in lines[1]

        assert await _ctl(home, "requests", "list", "--status", "4xx") == 0
        assert [line.split()[2] for line in capsys.readouterr().out.splitlines()[1:]] == [refused]
        assert await _ctl(home, "requests", "list", "--model", "coder", "--key", "laptop", "--json") == 0
        assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [answered]
        assert await _ctl(home, "requests", "list", "--slower-than", "600000") == 0
        assert capsys.readouterr().out.strip() == "no requests match"
        assert await _ctl(home, "requests", "list", "--limit", "1") == 0
        assert len(capsys.readouterr().out.splitlines()) == 2

        assert await _ctl(home, "requests", "show", "no-such-id") == 1
        captured = capsys.readouterr()
        assert captured.out == "" and "no /v1 request with id 'no-such-id'" in captured.err
        assert "X-Request-Id" in captured.err
        with pytest.raises(SystemExit) as bad:
            await _ctl(home, "requests", "list", "--status", "6xx")
        assert bad.value.code == 2 and "neither a status" in capsys.readouterr().err
