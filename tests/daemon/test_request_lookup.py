"""What happened to my request? ``GET /api/requests/{id}`` finds a /v1 request by the X-Request-Id its
answer carried (by an index, on a new file and a migrated one), an unknown id is 404 in the API's
shape, and the list's filters narrow it (a bad filter is 422 naming it)."""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from daemon.api.client import DaemonError
from daemon.api.models import RequestRecord
from daemon.history import History
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def _v1(d: RunningDaemon, body: dict[str, object], request_id: str | None = None) -> tuple[int, str]:
    """POST a chat to /v1; the status and the X-Request-Id the answer carried."""
    headers = {"X-Request-Id": request_id} if request_id else {}
    async with aiohttp.ClientSession() as session, \
            session.post(f"{d.v1}/chat/completions", json=body, headers=headers) as answer:
        await answer.read()
        return answer.status, answer.headers["X-Request-Id"]


async def _admin(d: RunningDaemon, path: str) -> tuple[int, dict[str, object]]:
    headers = {"Authorization": f"Bearer {d.daemon.admin_token}"}
    async with aiohttp.ClientSession() as session, session.get(f"{d.url}{path}", headers=headers) as answer:
        return answer.status, json.loads(await answer.read())


async def test_a_v1_request_is_found_by_the_id_its_answer_carried(tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=5, usage_when_asked=True)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        status, answered = await _v1(d, CHAT)
        assert status == 200 and answered
        missing_status, missing = await _v1(d, {**CHAT, "model": "nope"}, request_id="my-trace-42")
        assert (missing_status, missing) == (404, "my-trace-42")  # a client's own id is kept

        row = await d.client.request(answered)
        assert (row.id, row.model, row.answered_by, row.status, row.path) == (
            answered, "m", None, 200, "/v1/chat/completions")
        assert (row.node, row.node_name) == ("local", socket.gethostname())  # named for people
        assert (row.prompt_tokens, row.completion_tokens) == (1, 5)
        assert row.total_ms is not None and row.ttft_ms is not None and row.queue_ms is not None
        assert 0 <= row.queue_ms and 0 < row.ttft_ms <= row.total_ms and row.error is None

        refused = await d.client.request("my-trace-42")
        assert (refused.status, refused.model, refused.node, refused.node_name) == (404, None, None, "")
        assert refused.error is not None and "model_not_found" in refused.error and "nope" in refused.error

        # Unknown: 404 in the API's own shape, through the client and on the wire.
        with pytest.raises(DaemonError) as caught:
            await d.client.request("no-such-request")
        assert (caught.value.status, caught.value.code) == (404, "request_not_found")
        got, body = await _admin(d, "/api/requests/no-such-request")
        error = body["error"]
        assert got == 404 and isinstance(error, dict)
        assert (error["code"], error["type"]) == ("request_not_found", "invalid_request_error")
        assert "no-such-request" in str(error["message"]) and error["request_id"]


async def test_the_list_filters_by_model_key_status_and_time(tmp_path: Path, model_file: Path) -> None:
    runtime = write_fake_runtime(tmp_path / "bin", tokens=3)
    async with running_daemon(tmp_path / "home", runtime) as d:
        await d.client.create_model(model("m", str(model_file)))
        await d.client.start_model("m", wait=True)
        ok = [(await _v1(d, CHAT))[1] for _ in range(2)]
        _, refused = await _v1(d, {**CHAT, "model": "nope"})
        await d.logged_requests(3)

        assert [r.id for r in await d.client.requests(status="2xx")] == ok[::-1]  # newest first
        assert [r.id for r in await d.client.requests(status="404")] == [refused]
        assert await d.client.requests(status="5xx") == []
        assert [r.id for r in await d.client.requests(model="m")] == ok[::-1]
        assert [r.id for r in await d.client.requests(limit=1)] == [refused]
        assert await d.client.requests(key_id="k-none") == []
        everything = await d.client.requests()
        slowest = max(r.total_ms or 0 for r in everything)
        assert await d.client.requests(slower_than_ms=slowest) == []
        assert len(await d.client.requests(slower_than_ms=0)) == 3

        for query, field in (("status=6xx", "status"), ("status=5x", "status"), ("slower_than_ms=fast", "slower_than_ms"),
                             ("slower_than_ms=-1", "slower_than_ms"), ("limit=0", "limit"), ("limit=many", "limit"),
                             ("stauts=5xx", "stauts")):
            got, body = await _admin(d, f"/api/requests?{query}")
            error = body["error"]
            assert got == 422 and isinstance(error, dict), query
            assert error["code"] == "invalid_filter" and field in str(error["message"]), query
        with pytest.raises(DaemonError) as caught:
            await d.client.requests(status="teapot")
        assert (caught.value.status, caught.value.code) == (422, "invalid_filter")


def _plan(path: Path, request_id: str) -> str:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("EXPLAIN QUERY PLAN SELECT * FROM requests WHERE id = ? ORDER BY ts DESC LIMIT 1",
                          (request_id,)).fetchall()
        return " ".join(str(row[-1]) for row in rows)
    finally:
        db.close()


async def test_the_lookup_uses_an_index_on_a_new_file_and_a_migrated_one(tmp_path: Path) -> None:
    fresh = History(tmp_path / "fresh.sqlite")
    await fresh.open()
    await fresh.close()
    assert "USING INDEX requests_id" in _plan(tmp_path / "fresh.sqlite", "x")

    older = tmp_path / "older.sqlite"  # an access log from before the index (and before key_id)
    db = sqlite3.connect(older)
    db.execute("CREATE TABLE requests (id TEXT, ts REAL, model TEXT, node TEXT, path TEXT, status INTEGER,"
               " queue_ms REAL, ttft_ms REAL, total_ms REAL, prompt_tokens INTEGER, completion_tokens INTEGER)")
    db.execute("INSERT INTO requests VALUES ('old', 1e9, 'm', 'local', '/v1/chat/completions', 200, 1, 2, 3, 4, 5)")
    db.commit()
    db.close()
    assert "USING INDEX" not in _plan(older, "old")
    history = History(older)
    await history.open()
    history.record_request(RequestRecord(id="old", ts=2e9, model="m", node=None, path="/v1/models", status=200))
    found = await history.request("old")  # an id a client reused: the latest row
    assert found is not None and found.ts == 2e9
    assert await history.request("unknown") is None
    await history.close()
    assert "USING INDEX requests_id" in _plan(older, "old")
