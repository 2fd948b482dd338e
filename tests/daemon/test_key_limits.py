"""Per-key limits on /v1: requests per minute (a sliding window on an injected clock) and tokens per
UTC day (counted from the runtime's real token counts), refused with 429 and a usable Retry-After;
set through the admin API and kept across a restart of the daemon."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import openai
import pytest

from daemon.api.client import DaemonError
from daemon.api.models import ApiKeyInfo, ApiKeyLimits
from daemon.errors import DaemonProblem
from daemon.router.limits import RequestWindows, seconds_to_next_utc_day, utc_day
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime

CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _chat(d: RunningDaemon, key: str) -> tuple[int, dict[str, str], dict[str, object]]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session, session.post(f"{d.v1}/chat/completions", data=CHAT,
                                                                headers=headers) as r:
        return r.status, dict(r.headers), await r.json()


async def _key(d: RunningDaemon, key_id: str) -> ApiKeyInfo:
    return next(k for k in await d.client.list_keys() if k.id == key_id)


def test_the_window_frees_a_place_when_its_oldest_request_is_a_minute_old() -> None:
    windows = RequestWindows()
    assert [windows.admit("k", 3, t) for t in (100.0, 110.0, 130.0)] == [None, None, None]
    assert windows.admit("k", 3, 140.0) == 20  # the one of t=100 leaves at t=160
    assert windows.count("k", 140.0) == 3  # a refusal takes no place
    assert windows.admit("k", 3, 160.0) is None
    assert windows.admit("k", 3, 161.0) == 9  # next out: t=110 at t=170
    assert windows.admit("other", 3, 161.0) is None  # each key has its own window
    assert windows.admit("k", None, 161.0) is None  # no limit: counted, never refused


def test_the_day_is_the_utc_day() -> None:
    noon = datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp()
    assert utc_day(noon) == "2026-03-01"
    assert seconds_to_next_utc_day(noon) == 12 * 3600
    assert utc_day(noon + 12 * 3600) == "2026-03-02"


async def test_the_request_past_the_rpm_limit_gets_429_with_a_retry_after_that_works(
        tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=2, usage_when_asked=True)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        clock = Clock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC).timestamp())
        d.daemon.keys.clock = clock
        created = await d.client.create_key("script")
        info = await d.client.set_key_limits(created.info.id, ApiKeyLimits(requests_per_minute=3))
        assert info.limits == ApiKeyLimits(requests_per_minute=3)

        for _ in range(3):  # at 0, 10 and 20 s
            assert (await _chat(d, created.key))[0] == 200
            clock.now += 10
        assert (await _key(d, created.info.id)).requests_last_minute == 3
        clock.now -= 5  # 25 s after the first
        status, headers, body = await _chat(d, created.key)
        assert status == 429
        assert body["error"] == {**body["error"], "type": "rate_limit_error", "code": "rate_limited"}
        assert "3 requests per minute" in str(body["error"])
        retry = int(headers["Retry-After"])
        assert retry == 35  # the first request leaves the window 60 s after it came

        # The openai client sees the same refusal as a RateLimitError.
        client = openai.AsyncOpenAI(base_url=d.v1, api_key=created.key, max_retries=0)
        with pytest.raises(openai.RateLimitError) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert caught.value.code == "rate_limited"
        await client.close()

        clock.now += retry - 1
        assert (await _chat(d, created.key))[0] == 429  # a second early: still full
        clock.now += 1
        assert (await _chat(d, created.key))[0] == 200  # acting on Retry-After gets in

        rows = sorted(await d.client.requests(limit=100), key=lambda r: r.ts)
        refused = [r for r in rows if r.status == 429]
        assert len(refused) == 3 and all("rate_limited" in (r.error or "") for r in refused)
        assert all(r.key_id == created.info.id and r.model is None for r in refused)  # never reached a model
        assert d.daemon.router.stats["m"].total == 4  # only the admitted ones went to the runtime


async def test_a_key_over_its_tokens_for_the_day_waits_for_the_next_utc_day(
        tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=5, usage_when_asked=True)  # 1 prompt + 5 tokens
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        clock = Clock(datetime(2026, 3, 1, 23, 0, tzinfo=UTC).timestamp())
        d.daemon.keys.clock = clock
        created = await d.client.create_key("batch")
        await d.client.set_key_limits(created.info.id, ApiKeyLimits(tokens_per_day=10))
        other = await d.client.create_key("other")

        async def tokens_today(key_id: str, at_least: int) -> int:
            for _ in range(200):  # the access log counts a request's tokens as its handler finishes
                info = await _key(d, key_id)
                if info.tokens_today >= at_least:
                    return info.tokens_today
                await asyncio.sleep(0.02)
            return info.tokens_today

        assert (await _chat(d, created.key))[0] == 200
        assert await tokens_today(created.info.id, 6) == 6
        assert (await _chat(d, created.key))[0] == 200  # 6 < 10: let through, and it crosses the limit
        assert await tokens_today(created.info.id, 12) == 12
        status, headers, body = await _chat(d, created.key)
        assert status == 429 and body["error"]["code"] == "tokens_per_day_exceeded"  # type: ignore[index]
        assert body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
        assert int(headers["Retry-After"]) == 3600  # 23:00 UTC: an hour to the next day
        assert (await _chat(d, other.key))[0] == 200  # another key has its own day

        clock.now += 3600
        info = await _key(d, created.info.id)
        assert info.tokens_today == 0 and info.tokens_total == 12
        assert (await _chat(d, created.key))[0] == 200


async def test_limits_set_through_the_api_survive_a_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with running_daemon(home, None, local_agent=False) as d:
        created = await d.client.create_key("editor")
        await d.client.set_key_limits(created.info.id, ApiKeyLimits(requests_per_minute=30, tokens_per_day=5000))
        info = await d.client.set_key_limits(created.info.id, ApiKeyLimits(tokens_per_day=9000))  # rpm stays
        assert info.limits == ApiKeyLimits(requests_per_minute=30, tokens_per_day=9000)
        with pytest.raises(DaemonError) as caught:
            await d.client.set_key_limits("nope", ApiKeyLimits(requests_per_minute=1))
        assert caught.value.status == 404
        with pytest.raises(DaemonError) as invalid:
            await d.client._call("PATCH", f"/api/keys/{created.info.id}", body={"requests_per_minute": 0})
        assert invalid.value.status == 422 and invalid.value.code == "invalid_key_limits"
        async with aiohttp.ClientSession() as session, session.post(
                f"{d.url}/api/keys", json={"name": "capped", "limits": {"requests_per_minute": 2}},
                headers={"Authorization": f"Bearer {d.daemon.admin_token}"}) as r:
            assert r.status == 201
            capped = (await r.json())["info"]
        assert capped["limits"] == {"requests_per_minute": 2, "tokens_per_day": None}
    async with running_daemon(home, None, local_agent=False) as d:
        by_name = {k.name: k for k in await d.client.list_keys()}
        assert by_name["editor"].limits == ApiKeyLimits(requests_per_minute=30, tokens_per_day=9000)
        assert by_name["capped"].limits == ApiKeyLimits(requests_per_minute=2)
        cleared = await d.client.set_key_limits(created.info.id, ApiKeyLimits(requests_per_minute=None))
        assert cleared.limits == ApiKeyLimits(tokens_per_day=9000)


def test_the_days_tokens_and_the_limits_are_kept_in_keys_json(tmp_path: Path) -> None:
    from daemon.keys import KeyStore

    clock = Clock(datetime(2026, 3, 1, 9, 0, tzinfo=UTC).timestamp())
    store = KeyStore(tmp_path / "keys.json", clock=clock)
    created = store.create("batch", ApiKeyLimits(tokens_per_day=100))
    store.count_use(created.info.id, 60)
    store.flush_usage()
    again = KeyStore(tmp_path / "keys.json", clock=clock)
    again.load()
    [info] = again.list()
    assert (info.limits, info.tokens_today, info.tokens_total) == (ApiKeyLimits(tokens_per_day=100), 60, 60)
    again.count_use(created.info.id, 50)
    with pytest.raises(DaemonProblem) as caught:
        again.admit(created.info.id)
    assert (caught.value.status, caught.value.code) == (429, "tokens_per_day_exceeded")
    assert caught.value.retry_after == 15 * 3600
    clock.now += 15 * 3600  # the next UTC day starts from nothing
    again.admit(created.info.id)
    assert again.list()[0].tokens_today == 0


async def test_a_stream_the_client_cancels_still_counts_the_tokens_it_got(
        tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=400, token_delay_s=0.01, usage_when_asked=True)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        created = await d.client.create_key("editor")
        headers = {"Authorization": f"Bearer {created.key}", "Content-Type": "application/json"}
        body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
        received = 0
        async with aiohttp.ClientSession() as session, session.post(f"{d.v1}/chat/completions", data=body,
                                                                    headers=headers) as r:
            async for line in r.content:
                received += line.startswith(b"data:") and b'"content": "' in line
                if received == 5:
                    break  # the editor's user pressed Stop: the connection closes mid-answer
        for _ in range(500):  # counted when the daemon notices the client left and its handler ends
            info = await _key(d, created.info.id)
            if info.requests_total:
                break
            await asyncio.sleep(0.02)
        assert info.requests_total == 1
        assert 5 <= info.tokens_total < 400, info  # the tokens it got (and a few in flight), not 0
