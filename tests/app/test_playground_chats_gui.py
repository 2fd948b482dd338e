"""The Playground page as people use it: a saved chat listed and reopened, its answer's Markdown with
each code block's Copy putting the code on the clipboard, the reasoning folded until opened,
Regenerate replacing the last answer, Edit sending a question again, a saved chat's image shown as a
thumbnail and sent again on Regenerate and Edit, an image refused on a model that cannot see with the reason on
the page, and the model list marking the models that see images."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import definition
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QGuiApplication, QImage
from PySide6.QtWidgets import QLabel
from real_daemon import RealDaemon, daemon_in_thread

from app.ui.pages.chat_bubble import CodeBlock
from daemon.api.client import DaemonClient
from daemon.api.conversations import (
    ConversationCreate,
    ConversationImage,
    ConversationMessage,
)
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import gguf_bytes

CODE = "def add(a, b):\n    return a + b"
ANSWER = f"Here is **add**:\n\n```python\n{CODE}\n```\n\nCall it with two numbers."
TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
REPLY = "Hello from the"  # the fake llama-server's answer of 3 tokens


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealDaemon]:
    """A real daemon with its local agent and the fake llama-server (3 tokens an answer, each request's
    body in the model's log): plain (served plain-7b, running) and eye (eye-4b, with a vision projector)."""
    root = tmp_path_factory.mktemp("chats-gui")
    models = root / "models"
    models.mkdir()
    for name in ("plain", "eye"):
        (models / f"{name}.gguf").write_bytes(gguf_bytes(name=name, extra={"tokenizer.chat_template": TEMPLATE}))
    (models / "eye-mmproj.gguf").write_bytes(gguf_bytes(name="eye projector"))
    runtime = write_fake_runtime(root / "runtime", tokens=3, log_bodies=True)
    with daemon_in_thread(root / "home", runtime) as found:
        for model in (definition("plain", served_name="plain-7b", model_path=str(models / "plain.gguf")),
                      definition("eye", served_name="eye-4b", model_path=str(models / "eye.gguf"),
                                 extra_args=["--mmproj", str(models / "eye-mmproj.gguf")])):
            found.call(lambda deps, model=model: deps.registry.add(model))
        _run_in(found, lambda client: client.start_model("plain", wait=True))
        yield found


def _run_in(served: RealDaemon, work: Any) -> Any:
    """``work(client)`` with a client of its own, on the daemon's loop (set-up the test does not watch)."""
    async def run(_deps: Any) -> Any:
        client = DaemonClient(*served)
        try:
            return await work(client)
        finally:
            await client.close()

    return served.call(run)


def _run(qtbot: Any, work: Any) -> Any:
    """Await ``work`` on the qasync loop that Qt's events drive."""
    task = asyncio.ensure_future(work)
    qtbot.waitUntil(task.done, timeout=30_000)
    return task.result()


@pytest.fixture
def daemon(served: RealDaemon, qloop: Any) -> Iterator[DaemonClient]:
    """The app's client; the daemon holds one saved chat, "Adding numbers" (its answer has a code block
    and reasoning), and eye is stopped."""
    async def reset(client: DaemonClient) -> None:
        for chat in await client.list_conversations():
            await client.delete_conversation(chat.id)
        await client.stop_model("eye")
        await client.create_conversation(ConversationCreate(title="Adding numbers", model="plain-7b", messages=[
            ConversationMessage(role="user", content="Write add in Python"),
            ConversationMessage(role="assistant", model="plain-7b", content=ANSWER,
                                reasoning="They want a function of two arguments.")]))

    _run_in(served, reset)
    client = DaemonClient(*served, client_name="app")
    yield client


def _saved(served: RealDaemon, title: str) -> list[ConversationMessage]:
    """The messages of the daemon's saved chat ``title``, as it holds them now."""
    async def read(client: DaemonClient) -> list[ConversationMessage]:
        chat = next(c for c in await client.list_conversations() if c.title == title)
        return (await client.get_conversation(chat.id)).messages

    return _run_in(served, read)  # type: ignore[no-any-return]


def _asked(served: RealDaemon, model_id: str) -> list[Any]:
    """The last message of each chat request ``model_id``'s runtime logged, read from its log through
    the daemon (its line comes as the runtime reads the request: wait on it)."""
    async def read(client: DaemonClient) -> list[Any]:
        lines = [line async for line in client.logs(model_id, tail=1000)]
        bodies = [json.loads(line.split("fake: body ", 1)[1]) for line in lines if "fake: body " in line]
        return [body["messages"][-1] for body in bodies if "messages" in body]

    return _run_in(served, read)  # type: ignore[no-any-return]


def test_a_saved_chat_reopens_with_code_to_copy_reasoning_folded_and_regenerate(
        daemon: DaemonClient, served: RealDaemon, open_main_window: Any, qtbot: Any) -> None:
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
    qtbot.waitUntil(lambda: not page.vm.state.value.busy and page.bubbles[1].text.text() == REPLY, timeout=30_000)
    assert len(page.bubbles) == 2 and page.bubbles[1].findChildren(CodeBlock) == []
    qtbot.waitUntil(lambda: _asked(served, "plain")[-1:] == [{"role": "user", "content": "Write add in Python"}])
    qtbot.waitUntil(lambda: [m.content for m in _saved(served, "Adding numbers")] == ["Write add in Python", REPLY])

    page.bubbles[0].edit_button.click()  # edit the question and send it again: what followed is replaced
    assert page.input.toPlainText() == "Write add in Python" and page.send_button.text() == "Resend"
    page.input.setPlainText("Write sub in Python")
    page.send()
    qtbot.waitUntil(lambda: not page.vm.state.value.busy and page.bubbles[0].text.text() == "Write sub in Python",
                    timeout=30_000)
    assert len(page.bubbles) == 2 and page.send_button.text() == "Send"
    qtbot.waitUntil(lambda: [m.content for m in _saved(served, "Adding numbers")] == ["Write sub in Python", REPLY])
    qtbot.waitUntil(lambda: _asked(served, "plain")[-1:] == [{"role": "user", "content": "Write sub in Python"}])


def test_an_image_on_a_model_that_cannot_see_is_refused_with_the_reason_shown(
        daemon: DaemonClient, served: RealDaemon, open_main_window: Any, qtbot: Any, tmp_path: Path) -> None:
    window = open_main_window(daemon)
    window.show_page("playground")
    page = window.playground
    photo = tmp_path / "chart.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n")
    asked = _asked(served, "plain")
    page.model.setCurrentText("plain-7b")
    page.attach_images([photo])
    assert page.notice.isVisible()
    assert "plain-7b cannot see images" in page.notice.text() and "vision projector" in page.notice.text()
    assert not page.attached.isVisible() and page.vm.state.value.messages == ()
    assert _asked(served, "plain") == asked  # nothing sent

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
        daemon: DaemonClient, served: RealDaemon, open_main_window: Any, qtbot: Any) -> None:
    photo = f"data:image/png;base64,{base64.b64encode(_png()).decode('ascii')}"

    async def prepare(client: DaemonClient) -> None:
        await client.start_model("eye", wait=True)
        await client.create_conversation(ConversationCreate(title="What is this?", model="eye-4b", messages=[
            ConversationMessage(role="user", content="What is this?",
                                attachments=[ConversationImage(name="swatch.png", data_url=photo)]),
            ConversationMessage(role="assistant", model="eye-4b", content="A blue swatch.")]))

    _run_in(served, prepare)
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
    qtbot.waitUntil(lambda: not page.vm.state.value.busy and page.bubbles[1].text.text() == REPLY, timeout=30_000)
    sent = {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                        {"type": "image_url", "image_url": {"url": photo}}]}
    qtbot.waitUntil(lambda: _asked(served, "eye")[-1:] == [sent])

    page.bubbles[0].edit_button.click()
    page.input.setPlainText("And its colour?")
    page.send()
    qtbot.waitUntil(lambda: not page.vm.state.value.busy and page.bubbles[0].text.text() == "And its colour?",
                    timeout=30_000)
    sent = {"role": "user", "content": [{"type": "text", "text": "And its colour?"},
                                        {"type": "image_url", "image_url": {"url": photo}}]}
    qtbot.waitUntil(lambda: _asked(served, "eye")[-1:] == [sent])  # the image went again
    qtbot.waitUntil(lambda: [m.content for m in _saved(served, "What is this?")] == ["And its colour?", REPLY])
    kept = _saved(served, "What is this?")[0].attachments
    assert [(i.name, i.data_url) for i in kept] == [("swatch.png", photo)]  # saved again, byte for byte
