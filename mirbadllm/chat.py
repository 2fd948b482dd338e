"""``mirbadllm run MODEL``: chat with a model in the terminal, the answer streamed token by token.

    mirbadllm run MODEL|NAME [--yes] [--home DIR] [--url URL] [--api-key KEY] [--system TEXT] [--image PATH]...

Reads one message per line from stdin and streams the answer through the daemon's ``/v1`` (chat
completions; text completions for a base model without a chat template), keeping the whole
conversation. ``/bye`` or end of input leaves; Ctrl-C stops the current answer and stays. A model
that is not running is started first, with a spinner until it is ready. A catalog's short NAME
(``gemma3:1b``) not registered yet is offered for download first (y/N on a terminal; ``--yes``
downloads without asking), through the same path as ``ctl models pull NAME``.

Each exchange is saved in the daemon's chats, as the Playground's are (``mirbadllm ctl chats``;
``--no-save`` keeps this one out; ``/clear`` starts a new chat). ``--image PATH`` (again for more)
goes with the first message, ``/image PATH`` with the next one;
only to a model that can see (a GGUF with its vision projector, ``daemon.api.vision``): for one
that cannot, it is refused before anything is sent, saying why.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from agent.api.client import iter_sse_data
from daemon.api.client import DaemonClient, DaemonError
from daemon.api.conversations import (
    MAX_SAVED_IMAGE_BYTES,
    ConversationCreate,
    ConversationImage,
    ConversationMessage,
)
from daemon.api.hub import is_short_name
from daemon.api.models import ModelState, ModelView
from daemon.api.sources import FitQuery
from daemon.api.vision import IMAGE_TYPES, MAX_IMAGE_BYTES, cannot_see_reason
from mirbadllm import ctl_discover, ctl_sources

_LOGGER = logging.getLogger(__name__)

API_KEY_ENV = "MIRBADLLM_API_KEY"
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
HELP = ("/bye leaves, /clear forgets the conversation, /image PATH attaches an image to the next message, "
        "Ctrl-C stops an answer, Ctrl-D (end of input) leaves")
_STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_read=None)  # answers take their time


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mirbadllm run", description="Chat with a model in the terminal.")
    parser.add_argument("model", help="model id or served name (see `mirbadllm ctl models list`)")
    parser.add_argument("--home", type=Path, default=None, help="the daemon's data directory")
    parser.add_argument("--url", default=None, help="the daemon's URL (default: from the home)")
    parser.add_argument("--api-key", default=os.environ.get(API_KEY_ENV),
                        help=f"API key for /v1 when the daemon requires one (default: ${API_KEY_ENV})")
    parser.add_argument("--system", default=None, help="a system message to start the conversation with")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--no-save", action="store_true", help="keep this chat out of the saved chats")
    parser.add_argument("--image", type=Path, action="append", default=[], metavar="PATH",
                        help="an image for the first message (a model that can see: one with a vision projector)")
    parser.add_argument("--yes", "-y", action="store_true",
                        help="download a catalog model (e.g. gemma3:1b) that is not here yet without asking")
    return parser.parse_args(argv)


async def uses_chat(client: DaemonClient, view: ModelView) -> bool:
    """Chat completions, unless the model is a base model: no chat template in its settings nor in
    its GGUF header (``FitReport.summary.has_chat_template``, as the app's Playground decides).
    Not knowing (an older agent, an unreadable file) means chat."""
    definition = view.definition
    if definition.settings.chat_template:
        return True
    try:
        report = await client.fit(FitQuery(node=definition.node, model_path=definition.model_path,
                                           settings=definition.settings))
    except DaemonError as exc:
        _LOGGER.info("cannot tell whether %s has a chat template: %s", definition.model_path, exc.message)
        return True
    return report.summary.has_chat_template is not False


@dataclass
class Conversation:
    """What was said so far, as the next request's body."""

    model: str
    chat: bool = True
    system: str | None = None
    max_tokens: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    transcript: str = ""  # text completions: the whole exchange is the next prompt
    images: list[str] = field(default_factory=list)  # data URLs for the next message
    image_names: list[str] = field(default_factory=list)  # their files' names, for the saved chat

    def __post_init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.transcript = f"{self.system}\n\n" if self.system else ""

    def request(self, line: str) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "stream": True}
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        if self.chat:
            body["messages"] = [*self.messages, {"role": "user", "content": self._content(line)}]
            return "/chat/completions", body
        body["prompt"] = self.transcript + line
        return "/completions", body

    def _content(self, line: str) -> str | list[dict[str, Any]]:
        if not self.images:
            return line
        return [{"type": "text", "text": line},
                *({"type": "image_url", "image_url": {"url": url}} for url in self.images)]

    def answered(self, line: str, answer: str) -> None:
        if self.chat:
            self.messages += [{"role": "user", "content": self._content(line)},
                              {"role": "assistant", "content": answer}]
        else:
            self.transcript += line + answer + "\n"
        self.images, self.image_names = [], []


class ChatSaver:
    """Keeps the terminal's chat in the daemon's saved chats (``/api/conversations``): created with
    the first exchange, appended to after each one. A failed save is said once; the chat goes on."""

    def __init__(self, client: DaemonClient, model: str, system: str | None) -> None:
        self.client, self.model, self.system = client, model, system or ""
        self.chat_id: str | None = None
        self.warned = False

    def restart(self) -> None:
        self.chat_id = None

    async def add(self, line: str, answer: str, images: list[tuple[str, str]]) -> None:
        """Save one exchange; ``images`` are (name, data URL): kept up to MAX_SAVED_IMAGE_BYTES, else named."""
        kept = [ConversationImage(name=name, data_url=url) for name, url in images
                if (len(url) - url.find(",") - 1) * 3 // 4 <= MAX_SAVED_IMAGE_BYTES]
        messages = [ConversationMessage(role="user", content=line, images=[name for name, _ in images],
                                        attachments=kept),
                    ConversationMessage(role="assistant", content=answer, model=self.model)]
        try:
            if self.chat_id is None:
                self.chat_id = (await self.client.create_conversation(ConversationCreate(
                    model=self.model, system_prompt=self.system, messages=messages))).id
            else:
                await self.client.append_messages(self.chat_id, messages)
        except DaemonError as exc:
            if not self.warned:
                print(f"(this chat is not saved: {exc.message})", file=sys.stderr, flush=True)
                self.warned = True


def image_url(path: Path) -> str:
    """The image file as a data URL for /v1; a file that is not an image, too large or unreadable
    is refused (422 ``invalid_image``), naming it."""
    kind = IMAGE_TYPES.get(path.suffix.lower())
    if kind is None:
        raise DaemonError(422, "invalid_image", f"{path} is not an image this can send (PNG, JPEG, WebP, GIF or BMP)")
    try:
        if path.stat().st_size > MAX_IMAGE_BYTES:
            raise DaemonError(422, "invalid_image", f"{path} is larger than {MAX_IMAGE_BYTES >> 20} MiB")
        data = path.read_bytes()
    except OSError as exc:
        raise DaemonError(422, "invalid_image", f"cannot read {path}: {exc.strerror or exc}") from None
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def refuse_images(view: ModelView, chat: bool) -> None:
    """Images go only to a chat model that can see: anything else is refused before a request."""
    why = cannot_see_reason(view.definition)
    if why is None and not chat:
        why = f"{view.definition.served_name} is a base model (text completion): it takes no images"
    if why is not None:
        raise DaemonError(422, "model_cannot_see", why)


def piece_of(event: dict[str, Any], chat: bool) -> str:
    choices = event.get("choices") or [{}]
    if chat:
        return str((choices[0].get("delta") or {}).get("content") or "")
    return str(choices[0].get("text") or "")


class Chat:
    """One terminal chat: the conversation, the /v1 session and the answer being streamed."""

    def __init__(self, v1_url: str, conversation: Conversation, api_key: str | None, out: TextIO) -> None:
        self.v1_url = v1_url.rstrip("/")
        self.conversation = conversation
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.out = out
        self.answering: asyncio.Task[str] | None = None
        self.view: ModelView | None = None  # the model, to refuse an image it cannot see
        self.saver: ChatSaver | None = None

    async def answer(self, session: aiohttp.ClientSession, line: str) -> str:
        """Stream the answer to ``line``, printing each piece as it comes; the whole answer."""
        path, body = self.conversation.request(line)
        pieces: list[str] = []
        try:
            async with session.post(self.v1_url + path, json=body, headers=self.headers,
                                    timeout=_STREAM_TIMEOUT) as resp:
                if resp.status >= 400:
                    raise DaemonError(resp.status, "error", _error_text(await resp.text()))
                async for data in iter_sse_data(resp.content):
                    if data.strip() == "[DONE]":
                        continue  # read on to the stream's end: leaving now cuts the answer short (499)
                    event = json.loads(data)
                    if "error" in event:
                        raise DaemonError(502, "stream_error", _error_text(data))
                    piece = piece_of(event, self.conversation.chat)
                    pieces.append(piece)
                    self.out.write(piece)
                    self.out.flush()
        finally:
            if pieces:
                self.out.write("\n")
                self.out.flush()
        return "".join(pieces)

    def interrupt(self) -> None:
        """Ctrl-C: stop the answer being streamed; at the prompt, say how to leave."""
        if self.answering is not None and not self.answering.done():
            self.answering.cancel()
        else:
            print(f"\n({HELP})", file=sys.stderr, flush=True)

    async def repl(self, lines: LineReader) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                line = await lines.next()
                if line is None or line.strip() == "/bye":
                    return
                text = line.rstrip("\n")
                if not text.strip():
                    continue
                if text.strip() in ("/?", "/help"):
                    print(HELP, file=sys.stderr, flush=True)
                    continue
                if text.strip().startswith("/image "):
                    self._attach(Path(text.strip()[7:].strip()).expanduser())
                    continue
                if text.strip() == "/clear":
                    self.conversation.clear()
                    if self.saver is not None:
                        self.saver.restart()  # a new saved chat from here
                    print("(conversation cleared)", file=sys.stderr, flush=True)
                    continue
                await self._turn(session, text)

    def _attach(self, path: Path) -> None:
        try:
            if self.view is not None:
                refuse_images(self.view, self.conversation.chat)
            self.conversation.images.append(image_url(path))
            self.conversation.image_names.append(path.name)
            print(f"({path.name} goes with your next message)", file=sys.stderr, flush=True)
        except DaemonError as exc:
            print(f"error: {exc.message}", file=sys.stderr, flush=True)

    async def _turn(self, session: aiohttp.ClientSession, text: str) -> None:
        self.answering = asyncio.get_running_loop().create_task(self.answer(session, text))
        try:
            answer = await self.answering
            images = list(zip(self.conversation.image_names, self.conversation.images, strict=True))
            self.conversation.answered(text, answer)
            if self.saver is not None:
                await self.saver.add(text, answer, images)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the whole chat is ending, not only this answer
            print("(answer stopped)", file=sys.stderr, flush=True)
        except (DaemonError, aiohttp.ClientError, ValueError) as exc:
            print(f"error: {getattr(exc, 'message', exc)}", file=sys.stderr, flush=True)
        finally:
            self.answering = None


def _error_text(text: str) -> str:
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text[:500]


class LineReader:
    """stdin's lines, read by a thread (reading a terminal blocks) one at a time when asked, so that
    a terminal's prompt (with line editing, through ``input``) appears only once an answer is done."""

    PROMPT = ">>> "

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        self.wanted = threading.Event()
        self.tty = sys.stdin.isatty()
        if self.tty:
            with contextlib.suppress(ImportError):  # Windows has no readline; input() still works
                import readline  # noqa: F401 - gives input() editing and history
        # A daemon thread, never joined: it may still block on the terminal when the chat ends.
        threading.Thread(target=self._read, name="stdin", daemon=True).start()

    async def next(self) -> str | None:
        """The next line; None at the end of input."""
        self.wanted.set()
        return await self.lines.get()

    def _read(self) -> None:
        while True:
            self.wanted.wait()
            self.wanted.clear()
            try:
                line: str | None = input(self.PROMPT) if self.tty else sys.stdin.readline() or None
            except EOFError:
                line = None
            self.loop.call_soon_threadsafe(self.lines.put_nowait, line)
            if line is None:
                return


async def find_model(client: DaemonClient, wanted: str) -> ModelView:
    views = await client.list_models()
    found = next((v for v in views if wanted in (v.definition.id, v.definition.served_name)), None)
    if found is None:
        names = ", ".join(v.definition.id for v in views) or "none yet (`mirbadllm ctl models pull ...`)"
        raise DaemonError(404, "model_not_found", f"no model '{wanted}'; models: {names}")
    return found


async def find_or_pull(client: DaemonClient, wanted: str, yes: bool, err: TextIO) -> ModelView:
    """The model ``wanted``; a catalog short name not registered yet is downloaded first, once the
    person says yes (``yes``: without asking; no terminal to ask on: the command that would)."""
    try:
        return await find_model(client, wanted)
    except DaemonError as missing:
        if missing.code != "model_not_found" or not is_short_name(wanted):
            raise
        try:
            entry = await ctl_discover.catalog_entry(client, wanted)
        except DaemonError:
            raise missing from None
    what = f"{entry.repo} {entry.file} (about {ctl_discover.size_text(entry.size)})"
    if not yes:
        if not sys.stdin.isatty():
            raise DaemonError(404, "model_not_found", f"{entry.name} is not here yet: `mirbadllm run {entry.name} "
                              f"--yes` downloads {what} first, or `mirbadllm ctl models pull {entry.name}`")
        answer = await asyncio.to_thread(input, f"{entry.name} is not here yet. Download {what}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise DaemonError(404, "model_not_found", f"{entry.name} was not downloaded")
    if await ctl_sources.pull_catalog_model(client, entry.name, {"node": "local"}) != 0:
        raise DaemonError(502, "download_failed", f"{entry.name} could not be downloaded (the reason is above)")
    err.flush()
    return await find_model(client, wanted)


async def ensure_running(client: DaemonClient, view: ModelView, err: TextIO) -> ModelView:
    """Start the model when it is not running and wait until it is ready, with a spinner."""
    model_id = view.definition.id
    if view.status.state == ModelState.READY:
        return view
    if view.status.state != ModelState.STARTING:
        await client.start_model(model_id)
    since, frame, started = (await client.status()).last_event_id, 0, time.monotonic()
    while True:
        view = await client.get_model(model_id)
        state = view.status.state
        if state == ModelState.READY:
            if err.isatty():
                err.write("\r\x1b[K")
            err.write(f"{model_id} is ready ({time.monotonic() - started:.0f} s)\n")
            err.flush()
            return view
        if state in (ModelState.FAILED, ModelState.STOPPED):
            raise DaemonError(409, "start_failed", f"{model_id} did not start: {view.status.error or state.value}")
        if err.isatty():
            last = (view.status.last_log_lines or [""])[-1][:60]
            err.write(f"\r{SPINNER[frame % len(SPINNER)]} starting {model_id}…  {last}\x1b[K")
            err.flush()
            frame += 1
        elif frame == 0:
            err.write(f"starting {model_id}…\n")
            err.flush()
            frame = 1
        page = await client.events(since, timeout=0.2 if err.isatty() else 5)  # the spinner's tick
        since = page.last_id


async def chat(args: argparse.Namespace, client: DaemonClient) -> int:
    view = await find_or_pull(client, args.model, args.yes, sys.stderr)
    status = await client.status()
    if status.daemon.keys_required and not args.api_key:
        raise DaemonError(401, "invalid_api_key", f"this daemon requires an API key on /v1: pass --api-key KEY or "
                          f"set {API_KEY_ENV} (create one with `mirbadllm ctl keys create NAME`)")
    if args.image and (why := cannot_see_reason(view.definition)):  # before the model is even started
        raise DaemonError(422, "model_cannot_see", why)
    images = [image_url(path.expanduser()) for path in args.image]
    view = await ensure_running(client, view, sys.stderr)
    conversation = Conversation(view.definition.served_name, chat=await uses_chat(client, view), system=args.system,
                                max_tokens=args.max_tokens)
    if images:
        refuse_images(view, conversation.chat)
        conversation.images, conversation.image_names = images, [path.name for path in args.image]
    session = Chat(client.base_url + "/v1", conversation, args.api_key, sys.stdout)
    session.view = view
    session.saver = None if args.no_save else ChatSaver(client, view.definition.served_name, args.system)
    loop = asyncio.get_running_loop()
    lines = LineReader(loop)
    try:
        loop.add_signal_handler(signal.SIGINT, session.interrupt)
    except (NotImplementedError, RuntimeError):  # Windows: Ctrl-C ends the chat
        pass
    if not conversation.chat:
        print(f"{conversation.model} is a base model (no chat template): each line continues the text so far",
              file=sys.stderr)
    if sys.stdin.isatty():
        print(HELP, file=sys.stderr)
    try:
        await session.repl(lines)
    finally:
        try:
            loop.remove_signal_handler(signal.SIGINT)
        except (NotImplementedError, RuntimeError):
            pass
    if session.saver is not None and session.saver.chat_id is not None:
        print(f"(saved: `mirbadllm ctl chats show {session.saver.chat_id}`)", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    from mirbadllm.ctl import run_with_client

    return run_with_client(parse_args(argv), chat)
