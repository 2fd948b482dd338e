"""``mirbadllm run MODEL``: a person chats in a terminal (stdin piped), against a daemon with the fake
runtime: the model is started, answers stream, the conversation is kept, Ctrl-C stops an answer."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

from daemon.api.models import ModelState, RequestRecord
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime
from tests.fakes.gguf_files import write_gguf

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "Hello from the fake llama server. It"  # the fake's first 8 tokens
TEMPLATE = {"tokenizer.chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}


class Terminal:
    """``mirbadllm run`` in a subprocess, its stdin a pipe the test types into."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.out = ""

    @classmethod
    async def open(cls, rd: RunningDaemon, *argv: str) -> Terminal:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mirbadllm", "run", "--home", str(rd.daemon.paths.home), *argv, cwd=ROOT,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        return cls(proc)

    async def type(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def until(self, text: str, after: int = 0, timeout: float = 60) -> str:
        """Read stdout until ``text`` appears past offset ``after``; everything read so far."""
        assert self.proc.stdout is not None

        async def read() -> None:
            while text not in self.out[after:]:
                chunk = await self.proc.stdout.read(256)  # type: ignore[union-attr]
                if not chunk:
                    raise AssertionError(f"stdout ended before {text!r}: {self.out!r} "
                                         f"{(await self.proc.stderr.read()).decode()}")  # type: ignore[union-attr]
                self.out += chunk.decode()

        await asyncio.wait_for(read(), timeout)
        return self.out

    async def finish(self) -> tuple[int, str]:
        """Close stdin (end of input); the exit code and stderr."""
        assert self.proc.stdin is not None
        if not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        rest, err = await asyncio.wait_for(self.proc.communicate(), 60)
        self.out += rest.decode()
        return self.proc.returncode or 0, err.decode()


async def logged(rd: RunningDaemon, path: str, count: int, timeout: float = 30) -> list[RequestRecord]:
    """The access-log rows of ``path`` once ``count`` are complete (a row is finished after the answer)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = sorted((r for r in await rd.client.requests() if r.path == path), key=lambda r: r.ts)
        if len(rows) >= count and all(r.total_ms is not None for r in rows):
            return rows
        assert time.monotonic() < deadline, f"access log of {path}: {rows}"
        await rd.client.events((await rd.client.status()).last_event_id, timeout=0.1)  # no event for rows: a tick


async def test_run_starts_the_model_streams_answers_and_keeps_the_conversation(
        tmp_path: Path, fake_runtime: Path) -> None:
    path = write_gguf(tmp_path / "models" / "chat.gguf", extra=TEMPLATE)
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        await rd.client.create_model(model("m", str(path)))
        term = await Terminal.open(rd, "m")
        await term.type("hi")
        await term.until(ANSWER + "\n")
        assert (await rd.client.get_model("m")).status.state == ModelState.READY
        await term.type("and again")
        await term.until(ANSWER + "\n" + ANSWER + "\n")
        await term.type("/bye")
        code, err = await term.finish()
        assert code == 0 and "starting m" in err and "m is ready" in err
        chats = await logged(rd, "/v1/chat/completions", 2)
        # the second request carried the whole conversation: "hi", the answer, "and again"
        assert [r.prompt_tokens for r in chats] == [1, 1 + len(ANSWER.split()) + 2]
        assert [r.status for r in chats] == [200, 200]  # read to the end, not cut short (499)
        (saved,) = await rd.client.list_conversations()  # the app's Playground and `ctl chats` see it
        chat = await rd.client.get_conversation(saved.id)
        assert [m.content for m in chat.messages] == ["hi", ANSWER, "and again", ANSWER]
        assert chat.title == "hi" and f"ctl chats show {saved.id}" in err


async def test_a_base_model_gets_text_completion_and_end_of_input_leaves(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        await rd.client.create_model(model("base", str(model_file)))
        await rd.client.start_model("base", wait=True)
        term = await Terminal.open(rd, "base")
        await term.type("Once upon a time")
        await term.until(ANSWER + "\n")
        code, err = await term.finish()
        assert code == 0 and "base model" in err
        assert len(await logged(rd, "/v1/completions", 1)) == 1
        assert not [r for r in await rd.client.requests() if r.path == "/v1/chat/completions"]


async def test_ctrl_c_stops_the_answer_and_the_chat_goes_on(tmp_path: Path) -> None:
    slow = write_fake_runtime(tmp_path / "slow", token_delay_s=0.05, tokens=2000)
    path = write_gguf(tmp_path / "models" / "chat.gguf", extra=TEMPLATE)
    async with running_daemon(tmp_path / "home", slow) as rd:
        await rd.client.create_model(model("m", str(path)))
        await rd.client.start_model("m", wait=True)
        term = await Terminal.open(rd, "m")
        await term.type("tell me everything")
        await term.until("Hello from")
        term.proc.send_signal(signal.SIGINT)
        await term.until("\n")  # the stopped answer ends its line
        seen = len(term.out)
        await term.type("and now?")
        await term.until("Hello from", after=seen)  # still chatting
        term.proc.send_signal(signal.SIGINT)
        await term.type("/bye")
        code, err = await term.finish()
        assert code == 0 and err.count("(answer stopped)") == 2
        assert term.out.count("Hello from") == 2


async def test_an_image_is_refused_for_a_model_that_cannot_see_before_anything_is_sent(
        tmp_path: Path, fake_runtime: Path) -> None:
    path = write_gguf(tmp_path / "models" / "chat.gguf", extra=TEMPLATE)
    photo = tmp_path / "cat.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n")
    async with running_daemon(tmp_path / "home", fake_runtime) as rd:
        await rd.client.create_model(model("m", str(path)))
        term = await Terminal.open(rd, "m", "--image", str(photo))
        code, err = await term.finish()
        assert code == 1 and "m cannot see images" in err and "vision projector" in err
        assert (await rd.client.get_model("m")).status.state == ModelState.STOPPED  # not even started
        assert await rd.client.requests() == []


def test_an_image_goes_with_the_first_message_as_an_image_part(tmp_path: Path) -> None:
    from mirbadllm.chat import Conversation, image_url

    photo = tmp_path / "cat.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n")
    conversation = Conversation("eye", images=[image_url(photo)])
    _, body = conversation.request("What is this?")
    text, image = body["messages"][-1]["content"]
    assert text == {"type": "text", "text": "What is this?"}
    assert image["image_url"]["url"].startswith("data:image/png;base64,")
    conversation.answered("What is this?", "A cat.")
    _, later = conversation.request("Sure?")
    assert later["messages"][-1] == {"role": "user", "content": "Sure?"}  # the next message carries none
    assert later["messages"][0]["content"][1]["type"] == "image_url"  # the history keeps it


async def test_the_saved_chat_keeps_the_image_itself_and_only_names_one_too_big_to_keep(tmp_path: Path) -> None:
    import base64

    from daemon.api.conversations import MAX_SAVED_IMAGE_BYTES, ConversationCreate
    from mirbadllm.chat import ChatSaver

    class Daemon:  # only what ChatSaver calls
        def __init__(self) -> None:
            self.created: list[ConversationCreate] = []

        async def create_conversation(self, new: ConversationCreate) -> object:
            self.created.append(new)
            return type("Chat", (), {"id": "c1"})()

    small = "data:image/png;base64," + base64.b64encode(b"\x89PNG tiny").decode()
    huge = "data:image/png;base64," + base64.b64encode(bytes(MAX_SAVED_IMAGE_BYTES + 3)).decode()
    daemon = Daemon()
    await ChatSaver(daemon, "eye", None).add("What are these?", "Two.", [("a.png", small), ("scan.png", huge)])  # type: ignore[arg-type]
    question = daemon.created[0].messages[0]
    assert question.images == ["a.png", "scan.png"]  # both named in the transcript
    assert [(i.name, i.data_url) for i in question.attachments] == [("a.png", small)]  # the small one kept
