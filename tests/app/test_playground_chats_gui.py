"""The Playground page as people use it: a saved chat listed and reopened, its answer's Markdown with
each code block's Copy putting the code on the clipboard, the reasoning folded until opened,
Regenerate replacing the last answer, Edit sending a question again, a saved chat's image shown as a
thumbnail and sent again on Regenerate and Edit, an image refused on a model that cannot see with the reason on
the page, and the model list marking the models that see images."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from fake_daemon import FakeDaemonClient, definition
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QGuiApplication, QImage
from PySide6.QtWidgets import QLabel

from app.ui.pages.chat_bubble import CodeBlock
from daemon.api.conversations import (
    Conversation,
    ConversationImage,
    ConversationMessage,
)
from daemon.api.models import ModelState

CODE = "def add(a, b):\n    return a + b"
ANSWER = f"Here is **add**:\n\n```python\n{CODE}\n```\n\nCall it with two numbers."


class Upstream:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in ("A shorter ", "answer."):
            chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp


def _run(qtbot: Any, work: Any) -> None:
    """Await ``work`` on the qasync loop that Qt's events drive."""
    task = asyncio.ensure_future(work)
    qtbot.waitUntil(task.done)
    task.result()


@pytest.fixture
def upstream(qloop: Any, qtbot: Any) -> Iterator[tuple[Upstream, str]]:
    up = Upstream()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", up.chat)
    server = TestServer(app)
    _run(qtbot, server.start_server())
    yield up, f"http://127.0.0.1:{server.port}"
    _run(qtbot, server.close())


@pytest.fixture
def daemon(upstream: tuple[Upstream, str]) -> FakeDaemonClient:
    fake = FakeDaemonClient([definition("plain", served_name="plain-7b"),
                             definition("eye", served_name="eye-4b", extra_args=["--mmproj", "/m/mmproj.gguf"])])
    fake.set_state("plain", ModelState.READY)
    fake.base_url = upstream[1]
    now = time.time()
    fake.conversations["saved-1"] = Conversation(
        id="saved-1", title="Adding numbers", model="plain-7b", created_at=now, updated_at=now, message_count=2,
        messages=[ConversationMessage(role="user", content="Write add in Python"),
                  ConversationMessage(role="assistant", model="plain-7b", content=ANSWER,
                                      reasoning="They want a function of two arguments.")])
    return fake


def test_a_saved_chat_reopens_with_code_to_copy_reasoning_folded_and_regenerate(
        daemon: FakeDaemonClient, upstream: tuple[Upstream, str], open_main_window: Any, qtbot: Any) -> None:
    window = open_main_window(daemon)
    window.show_page("playground")
    page = window.playground
    qtbot.waitUntil(lambda: page.chat_list.count() == 1)
    item = page.chat_list.item(0)
    assert item.text() == "Adding numbers"
    page.chat_list.itemClicked.emit(item)
    qtbot.waitUntil(lambda: len(page.bubbles) == 2)

    answer = page.bubbles[1]
    blocks = answer.findChildren(CodeBlock)
    assert len(blocks) == 1 and blocks[0].code.text() == CODE and blocks[0].language.text() == "python"
    prose = [w.text() for w in answer.parts if isinstance(w, QLabel)]
    assert prose == ["Here is **add**:", "Call it with two numbers."]  # Markdown, rendered by the label
    qtbot.mouseClick(blocks[0].copy, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == CODE and blocks[0].copy.text() == "Copied"

    assert answer.reasoning_toggle.isVisible() and not answer.reasoning.isVisible()  # folded
    answer.reasoning_toggle.click()
    assert answer.reasoning.isVisible() and answer.reasoning.text() == "They want a function of two arguments."

    assert answer.regenerate_button.isVisible() and not page.bubbles[0].regenerate_button.isVisible()
    assert page.bubbles[0].edit_button.isVisible()
    answer.regenerate_button.click()
    qtbot.waitUntil(lambda: not page.vm.state.value.busy and page.bubbles[1].text.text() == "A shorter answer.")
    assert len(page.bubbles) == 2 and page.bubbles[1].findChildren(CodeBlock) == []
    assert upstream[0].bodies[-1]["messages"][-1] == {"role": "user", "content": "Write add in Python"}
    qtbot.waitUntil(lambda: [m.content for m in daemon.conversations["saved-1"].messages]
                    == ["Write add in Python", "A shorter answer."])

    page.bubbles[0].edit_button.click()  # edit the question and send it again: what followed is replaced
    assert page.input.toPlainText() == "Write add in Python" and page.send_button.text() == "Resend"
    page.input.setPlainText("Write sub in Python")
    page.send()
    qtbot.waitUntil(lambda: not page.vm.state.value.busy and page.bubbles[0].text.text() == "Write sub in Python")
    assert len(page.bubbles) == 2 and page.send_button.text() == "Send"
    qtbot.waitUntil(lambda: [m.content for m in daemon.conversations["saved-1"].messages]
                    == ["Write sub in Python", "A shorter answer."])


def test_an_image_on_a_model_that_cannot_see_is_refused_with_the_reason_shown(
        daemon: FakeDaemonClient, upstream: tuple[Upstream, str], open_main_window: Any, qtbot: Any,
        tmp_path: Path) -> None:
    window = open_main_window(daemon)
    window.show_page("playground")
    page = window.playground
    photo = tmp_path / "chart.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n")
    page.model.setCurrentText("plain-7b")
    page.attach_images([photo])
    assert page.notice.isVisible()
    assert "plain-7b cannot see images" in page.notice.text() and "vision projector" in page.notice.text()
    assert not page.attached.isVisible() and upstream[0].bodies == []

    page.model.setCurrentText("eye-4b")
    page.attach_images([photo])
    assert page.attached.text() == "Attached: chart.png" and not page.notice.isVisible()
    assert page.model.itemData(page.model.findText("eye-4b"), 3)  # its tooltip says it sees images

    window.show_page("models")
    details = {w.text() for w in window.models.findChildren(QLabel, "ModelDetail")}
    assert any(d.startswith("eye · ") and d.endswith(" · sees images") for d in details)
    assert not any(d.startswith("plain · ") and "sees images" in d for d in details)


def _png() -> bytes:
    image = QImage(24, 16, QImage.Format.Format_RGB32)
    image.fill(0x3366CC)
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data.data())


def test_a_reopened_chat_shows_its_image_and_sends_it_again_on_regenerate_and_edit(
        daemon: FakeDaemonClient, upstream: tuple[Upstream, str], open_main_window: Any, qtbot: Any) -> None:
    photo = f"data:image/png;base64,{base64.b64encode(_png()).decode('ascii')}"
    daemon.set_state("eye", ModelState.READY)
    now = time.time()
    daemon.conversations["seen-1"] = Conversation(
        id="seen-1", title="What is this?", model="eye-4b", created_at=now, updated_at=now + 1, message_count=2,
        messages=[ConversationMessage(role="user", content="What is this?",
                                      attachments=[ConversationImage(name="swatch.png", data_url=photo)]),
                  ConversationMessage(role="assistant", model="eye-4b", content="A blue swatch.")])
    window = open_main_window(daemon)
    window.show_page("playground")
    page = window.playground
    qtbot.waitUntil(lambda: page.chat_list.count() == 2)
    item = next(page.chat_list.item(i) for i in range(2) if page.chat_list.item(i).text() == "What is this?")
    page.chat_list.itemClicked.emit(item)
    qtbot.waitUntil(lambda: len(page.bubbles) == 2 and page.bubbles[0].thumbnails != [])
    question = page.bubbles[0]
    assert question.images.text() == "Attached: swatch.png"
    [picture] = question.thumbnails
    assert picture.toolTip() == "swatch.png" and picture.pixmap().width() == 24  # the picture itself

    page.model.setCurrentText("eye-4b")
    page.bubbles[1].regenerate_button.click()
    qtbot.waitUntil(lambda: not page.vm.state.value.busy and page.bubbles[1].text.text() == "A shorter answer.")
    sent = upstream[0].bodies[-1]["messages"][-1]
    assert sent == {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                {"type": "image_url", "image_url": {"url": photo}}]}

    page.bubbles[0].edit_button.click()
    page.input.setPlainText("And its colour?")
    page.send()
    qtbot.waitUntil(lambda: not page.vm.state.value.busy and page.bubbles[0].text.text() == "And its colour?")
    assert upstream[0].bodies[-1]["messages"][-1]["content"][1] == {"type": "image_url", "image_url": {"url": photo}}
    qtbot.waitUntil(lambda: [m.content for m in daemon.conversations["seen-1"].messages]
                    == ["And its colour?", "A shorter answer."])
    kept = daemon.conversations["seen-1"].messages[0].attachments
    assert [(i.name, i.data_url) for i in kept] == [("swatch.png", photo)]  # saved again, byte for byte
