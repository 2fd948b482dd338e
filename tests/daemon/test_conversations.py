"""Saved chats: ``/api/conversations`` on a real daemon and real SQLite. A chat is created, grows,
is renamed, has its last answer replaced, is exported as Markdown and JSON and deleted; it is still
there after a restart; an unknown id is 404 and oversize input 422, in the API's error shape. A
message's images come back byte for byte (and go with the JSON export); one over 10 MiB is 422."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from daemon.api.client import DaemonError
from daemon.api.conversations import (
    MAX_CONTENT,
    MAX_SAVED_IMAGE_BYTES,
    ConversationCreate,
    ConversationImage,
    ConversationMessage,
)
from daemon.conversations.store import ConversationStore
from tests.daemon.harness import RunningDaemon, running_daemon

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _user(text: str, **fields: object) -> ConversationMessage:
    return ConversationMessage(role="user", content=text, **fields)  # type: ignore[arg-type]


def _answer(text: str, **fields: object) -> ConversationMessage:
    return ConversationMessage(role="assistant", content=text, model="m", **fields)  # type: ignore[arg-type]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def daemon(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningDaemon]:
    async with running_daemon(tmp_path_factory.mktemp("chats") / "home", None, local_agent=False) as d:
        yield d


async def _raw(d: RunningDaemon, method: str, path: str, body: object = None) -> tuple[int, dict[str, object]]:
    headers = {"Authorization": f"Bearer {d.daemon.admin_token}"}
    async with aiohttp.ClientSession() as session, \
            session.request(method, f"{d.url}{path}", json=body, headers=headers) as answer:
        return answer.status, json.loads(await answer.read())


async def test_a_chat_is_saved_grows_renamed_regenerated_exported_and_deleted(daemon: RunningDaemon) -> None:
    client = daemon.client
    chat = await client.create_conversation(ConversationCreate(model="m", system_prompt="Be brief.",
                                                               messages=[_user("What is 2+2?\nThanks")]))
    assert (chat.title, chat.message_count, chat.system_prompt) == ("What is 2+2?", 1, "Be brief.")
    grown = await client.append_messages(chat.id, [_answer("4", reasoning="2 and 2 make 4")])
    assert [m.content for m in grown.messages] == ["What is 2+2?\nThanks", "4"]
    assert grown.messages[1].reasoning == "2 and 2 make 4"

    regenerated = await client.append_messages(chat.id, [_answer("Four.")], keep=1)  # the last answer replaced
    assert [m.content for m in regenerated.messages] == ["What is 2+2?\nThanks", "Four."]
    edited = await client.append_messages(chat.id, [_user("What is 3+3?", images=["sum.png"]), _answer("6")], keep=0)
    assert [m.content for m in edited.messages] == ["What is 3+3?", "6"]
    assert edited.messages[0].images == ["sum.png"]

    renamed = await client.rename_conversation(chat.id, "Arithmetic")
    assert renamed.title == "Arithmetic"
    assert [(c.id, c.title, c.message_count) for c in await client.list_conversations()
            if c.id == chat.id] == [(chat.id, "Arithmetic", 2)]

    markdown = await client.export_conversation(chat.id, "md")
    assert markdown.startswith("# Arithmetic\n")
    assert "## You\n\nAttached: sum.png\n\nWhat is 3+3?" in markdown and "## m\n\n6" in markdown
    exported = json.loads(await client.export_conversation(chat.id, "json"))
    assert exported["title"] == "Arithmetic" and [m["content"] for m in exported["messages"]] == ["What is 3+3?", "6"]

    await client.delete_conversation(chat.id)
    assert chat.id not in [c.id for c in await client.list_conversations()]


async def test_an_unknown_id_is_404_in_the_api_shape(daemon: RunningDaemon) -> None:
    for method, path, body in (("GET", "/api/conversations/nope", None),
                               ("PATCH", "/api/conversations/nope", {"title": "x"}),
                               ("DELETE", "/api/conversations/nope", None),
                               ("POST", "/api/conversations/nope/messages", {"messages": []}),
                               ("GET", "/api/conversations/nope/export?format=md", None)):
        status, error = await _raw(daemon, method, path, body)
        assert status == 404, (method, path)
        assert error["error"]["code"] == "conversation_not_found"  # type: ignore[index]
        assert "nope" in error["error"]["message"]  # type: ignore[index]
    with pytest.raises(DaemonError) as missing:
        await daemon.client.get_conversation("nope")
    assert missing.value.status == 404


async def test_oversize_input_is_refused_with_422_and_nothing_is_saved(daemon: RunningDaemon) -> None:
    before = await daemon.client.list_conversations()
    status, error = await _raw(daemon, "POST", "/api/conversations",
                               {"messages": [{"role": "user", "content": "x" * (MAX_CONTENT + 1)}]})
    assert status == 422 and error["error"]["code"] == "invalid_request"  # type: ignore[index]
    assert "messages.0.content" in error["error"]["message"]  # type: ignore[index]
    status, error = await _raw(daemon, "POST", "/api/conversations", {"title": "t" * 201})
    assert status == 422 and "title" in error["error"]["message"]  # type: ignore[index]
    chat = await daemon.client.create_conversation(ConversationCreate())
    status, _ = await _raw(daemon, "PATCH", f"/api/conversations/{chat.id}", {"title": ""})
    assert status == 422
    status, error = await _raw(daemon, "GET", f"/api/conversations/{chat.id}/export?format=pdf")
    assert status == 400 and error["error"]["code"] == "invalid_parameter"  # type: ignore[index]
    assert len(await daemon.client.list_conversations()) == len(before) + 1
    await daemon.client.delete_conversation(chat.id)


def _data_url(data: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


async def test_a_messages_images_are_kept_byte_for_byte_and_replaced_with_it(daemon: RunningDaemon) -> None:
    photo, chart = os.urandom(300_000), b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    client = daemon.client
    chat = await client.create_conversation(ConversationCreate(messages=[
        _user("What is in these?", attachments=[ConversationImage(name="cat.jpg", data_url=_data_url(photo, "image/jpeg")),
                                                ConversationImage(name="chart.png", data_url=_data_url(chart))]),
        _answer("A cat and a chart.")]))
    got = await client.get_conversation(chat.id)
    first = got.messages[0]
    assert first.images == ["cat.jpg", "chart.png"]  # named by their attachments
    assert [(i.name, i.data_url.split(",")[0]) for i in first.attachments] == [
        ("cat.jpg", "data:image/jpeg;base64"), ("chart.png", "data:image/png;base64")]
    assert [base64.b64decode(i.data_url.split(",")[1]) for i in first.attachments] == [photo, chart]
    assert got.messages[1].attachments == []

    exported = json.loads(await client.export_conversation(chat.id, "json"))
    assert exported["messages"][0]["attachments"][1] == {"name": "chart.png", "data_url": _data_url(chart)}
    assert "Attached: cat.jpg, chart.png" in await client.export_conversation(chat.id, "md")

    edited = await client.append_messages(chat.id, [_user("And this?", attachments=[
        ConversationImage(name="dog.png", data_url=_data_url(b"woof"))])], keep=0)  # the edit replaces the images too
    assert [(m.content, [i.name for i in m.attachments]) for m in edited.messages] == [("And this?", ["dog.png"])]
    assert base64.b64decode(edited.messages[0].attachments[0].data_url.split(",")[1]) == b"woof"
    await client.delete_conversation(chat.id)


async def test_an_image_over_the_cap_or_not_an_image_is_422_and_nothing_is_saved(daemon: RunningDaemon) -> None:
    before = await daemon.client.list_conversations()
    too_big = _data_url(bytes(MAX_SAVED_IMAGE_BYTES + 1))
    status, error = await _raw(daemon, "POST", "/api/conversations", {"messages": [
        {"role": "user", "content": "look", "attachments": [{"name": "scan.png", "data_url": too_big}]}]})
    assert status == 422 and error["error"]["code"] == "invalid_request"  # type: ignore[index]
    message = error["error"]["message"]  # type: ignore[index]
    assert "messages.0.attachments.0.data_url" in message and "at most 10 MiB" in message
    status, error = await _raw(daemon, "POST", "/api/conversations", {"messages": [
        {"role": "user", "content": "look", "attachments": [{"name": "x.txt", "data_url": "data:text/plain,hi"}]}]})
    assert status == 422 and "data:image/" in error["error"]["message"]  # type: ignore[index]
    assert await daemon.client.list_conversations() == before


async def test_chats_outlive_a_restart_of_the_store(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "conversations.sqlite")
    await store.open()
    chat = await store.create(ConversationCreate(messages=[_user("remember me")]))
    await store.close()
    again = ConversationStore(tmp_path / "conversations.sqlite")
    await again.open()
    try:
        found = await again.get(chat.id)
        assert found is not None and [m.content for m in found.messages] == ["remember me"]
        assert found.title == "remember me"
    finally:
        await again.close()
