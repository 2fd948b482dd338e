"""The Playground: chat with a ready model through ``/v1/chat/completions``, streamed token by token.

It talks to the daemon's OpenAI side exactly as any client would (aiohttp, SSE), so what works
here works for the user's own tools. Each answer records its time to first token and tokens/s.

A base model cannot chat: given a chat it repeats the system prompt until ``max_tokens``. Its GGUF
carries no chat template (instruction-tuned GGUFs ship theirs), so for a model whose file has none
the Playground opens in text completion (``/v1/completions`` with the raw prompt) and says why; the
user may switch to chat, and that choice sticks. A built-in template named in the settings (the
demo model has ``gemma`` so that ``/v1/chat/completions`` answers at all) does not make a base model
an instruction-tuned one, so it does not change the default. The fact comes from the agent's
reading of the file's header (``FitReport.summary.has_chat_template``).

An answer's reasoning (``reasoning_content`` deltas, or ``<think>`` blocks in its text) is kept apart
from the answer (``app.viewmodels.chat_text``) and shown collapsed. The last answer can be generated
again, and a message of the user's edited and sent again (what followed it is replaced). Images go
to a model that can see (``daemon.api.vision``); one that cannot is refused before anything is sent,
and the page says why. Every chat is saved in the daemon (``app.viewmodels.playground_chats``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp

from app.viewmodels.chat_text import split_reasoning
from app.viewmodels.fleet import FleetSnapshot, FleetViewModel
from app.viewmodels.observable import Observable
from app.viewmodels.playground_chats import SavedChats
from daemon.api.contracts import profile
from daemon.api.conversations import ConversationSummary
from daemon.api.models import ModelDefinition, ModelState
from daemon.api.sources import FitQuery
from daemon.api.vision import (
    IMAGE_TYPES,
    MAX_IMAGE_BYTES,
    cannot_see_reason,
    sees_images,
)

_LOGGER = logging.getLogger(__name__)

# Generations have no read timeout (a long answer is not a hung one); connecting does.
_STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=10, sock_connect=10, sock_read=None)

CHAT, COMPLETION = "chat", "completion"
MODES = (CHAT, COMPLETION)
BASE_MODEL_REASON = ("This is a base model without a chat template: it continues text. "
                     "Use Chat for instruction-tuned models.")


class ChatError(Exception):
    """The endpoint refused or broke off; the message is the OpenAI error text when there is one."""


@dataclass(frozen=True)
class AnswerStats:
    ttft_ms: float | None
    tokens: int
    tokens_per_s: float | None
    finish_reason: str | None = None

    def describe(self) -> str:
        parts = []
        if self.ttft_ms is not None:
            parts.append(f"TTFT {self.ttft_ms:.0f} ms")
        parts.append(f"{self.tokens} tokens")
        if self.tokens_per_s is not None:
            parts.append(f"{self.tokens_per_s:.1f} tok/s")
        if self.finish_reason and self.finish_reason != "stop":
            parts.append(f"finished: {self.finish_reason}")
        return " · ".join(parts)


@dataclass(frozen=True)
class ImageAttachment:
    name: str
    data_url: str  # "" for an image of a reopened chat that kept only its name (older, or too big to keep)


@dataclass(frozen=True)
class ChatMessage:
    role: str  # user | assistant
    content: str
    model: str = ""
    stats: AnswerStats | None = None
    error: str | None = None
    streaming: bool = False
    completion: bool = False  # a prompt and its continuation, not a chat turn
    reasoning: str = ""  # the model's thinking, apart from its answer
    images: tuple[ImageAttachment, ...] = ()


@dataclass(frozen=True)
class PlaygroundState:
    models: tuple[str, ...] = ()  # served names of ready models
    model: str = ""
    system_prompt: str = "You are a helpful assistant."
    temperature: float = 0.7
    max_tokens: int = 512
    api_key: str = ""
    keys_required: bool = False
    messages: tuple[ChatMessage, ...] = ()
    busy: bool = False
    mode: str = CHAT  # chat: /v1/chat/completions; completion: /v1/completions with a raw prompt
    base_model: bool = False  # the selected model has no chat template (neither in its file nor its settings)
    vision_models: frozenset[str] = frozenset()  # served names of the models that can see images
    images: tuple[ImageAttachment, ...] = ()  # attached to the next message
    notice: str = ""  # why the last attempt was refused before it was sent
    conversation_id: str | None = None  # the saved chat shown (None: not saved yet)
    conversations: tuple[ConversationSummary, ...] = ()
    save_error: str = ""

    @property
    def mode_reason(self) -> str:
        return BASE_MODEL_REASON if self.base_model else ""


async def stream_chat(session: aiohttp.ClientSession, api_url: str, body: dict[str, Any],
                      api_key: str = "", path: str = "/chat/completions") -> AsyncIterator[dict[str, Any]]:
    """POST ``{api_url}{path}`` with ``stream`` on; yields each SSE chunk as JSON."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with session.post(f"{api_url}{path}", json={**body, "stream": True},
                                headers=headers, timeout=_STREAM_TIMEOUT) as resp:
            if resp.status >= 400:
                raise ChatError(_error_text(resp.status, await resp.text()))
            async for raw in resp.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):  # the daemon's own word
                    raise ChatError(str(chunk["error"].get("message") or chunk["error"]))
                yield chunk
    except aiohttp.ClientPayloadError as exc:  # the answer began, then the stream broke off
        raise ChatError(f"the answer broke off before it ended ({exc.__class__.__name__})") from exc
    except aiohttp.ClientError as exc:
        raise ChatError(f"cannot reach {api_url}: {exc}") from exc


def _error_text(status: int, text: str) -> str:
    try:
        return f"{json.loads(text)['error']['message']} ({status})"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {text[:300]}"


class PlaygroundViewModel(SavedChats):
    def __init__(self, fleet: FleetViewModel, session_factory: Any = aiohttp.ClientSession) -> None:
        self.fleet = fleet
        self.state: Observable[PlaygroundState] = Observable(PlaygroundState())
        self._session_factory = session_factory
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        # (node, model path) -> the file carries a chat template (None: could not tell); and the
        # lookups in flight. Keyed by the file so a renamed or re-set model keeps its answer.
        self._templates: dict[tuple[str, str], bool | None] = {}
        self._lookups: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._chosen: dict[str, str] = {}  # served name -> the mode the user picked for it
        self._generation = 0  # bumped when the chat shown changes: an answer still ending leaves it alone
        self._init_saved()
        fleet.snapshot.subscribe(self._on_fleet, now=True)

    def _on_fleet(self, snapshot: FleetSnapshot) -> None:
        """The models a message can go to: those ready, and those a request starts. The one chosen
        stays chosen while it is still defined (a model stopped mid-answer keeps its place and mode)."""
        running = [m.definition.served_name for m in snapshot.models if m.status.state == ModelState.READY]
        loadable = [m.definition.served_name for m in snapshot.models if m.status.state != ModelState.READY
                    and m.definition.start_on_request and profile(m.definition.runtime).on_node]
        ready = (*running, *loadable)  # the running ones first: the one picked by default answers at once
        defined = {m.definition.served_name for m in snapshot.models}
        s = self.state.value
        model = s.model if s.model in ready or (s.model in defined and s.messages) else (ready[0] if ready else "")
        if model and model not in ready:
            ready = (*ready, model)
        vision = frozenset(m.definition.served_name for m in snapshot.models if sees_images(m.definition))
        if ready != s.models or model != s.model or snapshot.keys_required != s.keys_required \
                or vision != s.vision_models:
            starts = self._preset_of(model) if model != s.model else {}
            self.state.set(replace(s, models=ready, model=model, keys_required=snapshot.keys_required,
                                   vision_models=vision, **starts))
        self._pick_mode()

    def _preset_of(self, served_name: str) -> dict[str, Any]:
        """What the model's preset says the Playground starts from: its system prompt, temperature
        and reply length (each only where the preset sets it)."""
        definition = self._definition(served_name)
        if definition is None:
            return {}
        preset = definition.preset
        starts = {"system_prompt": preset.system_prompt, "temperature": preset.temperature,
                  "max_tokens": preset.max_tokens}
        return {k: v for k, v in starts.items() if v is not None}

    def configure(self, **changes: Any) -> None:
        """Set model, system_prompt, temperature, max_tokens, api_key or mode (chat | completion)."""
        allowed = {"model", "system_prompt", "temperature", "max_tokens", "api_key", "mode"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"not a playground setting: {sorted(unknown)}")
        if "mode" in changes:
            if changes["mode"] not in MODES:
                raise ValueError(f"mode must be one of {MODES}, not {changes['mode']!r}")
            model = changes.get("model", self.state.value.model)
            if model:
                self._chosen[model] = changes["mode"]
        if "model" in changes and changes["model"] != self.state.value.model:
            changes = {**self._preset_of(changes["model"]), **changes}  # what the caller sets wins
        self.state.set(replace(self.state.value, **changes))
        if "model" in changes:
            self._pick_mode()

    def _definition(self, served_name: str) -> ModelDefinition | None:
        return next((m.definition for m in self.fleet.snapshot.value.models
                     if m.definition.served_name == served_name), None)

    def _has_template(self, definition: ModelDefinition) -> bool | None:
        """Whether the model's file has a chat template (None: not known yet)."""
        key = (definition.node, definition.model_path)
        if key not in self._templates and key not in self._lookups:
            try:
                asyncio.get_running_loop()
            except RuntimeError:  # built outside the loop: ask on the next fleet change
                return None
            self._lookups[key] = asyncio.ensure_future(self._look_up(definition))
        return self._templates.get(key)

    async def _look_up(self, definition: ModelDefinition) -> None:
        key = (definition.node, definition.model_path)
        try:
            report = await self.fleet.client.fit(FitQuery(node=definition.node, model_path=definition.model_path,
                                                          settings=definition.settings))
            self._templates[key] = report.summary.has_chat_template
        except Exception as exc:  # noqa: BLE001 - any failure only means "not known": keep chat
            _LOGGER.info("cannot tell whether %s has a chat template: %s", definition.model_path, exc)
            self._templates[key] = None
        finally:
            self._lookups.pop(key, None)
        self._pick_mode()

    def _pick_mode(self) -> None:
        """Completion for a base model, chat for every other one, unless the user chose for this model."""
        s = self.state.value
        definition = self._definition(s.model) if s.model else None
        base = definition is not None and self._has_template(definition) is False
        mode = self._chosen.get(s.model, COMPLETION if base else CHAT)
        if (mode, base) != (s.mode, s.base_model):
            self.state.set(replace(self.state.value, mode=mode, base_model=base))

    def clear(self) -> None:
        """Start a new chat (the one shown stays saved)."""
        self.new_chat()

    def _stop_answer(self) -> None:
        self.stop()
        self._generation += 1

    def cannot_see(self) -> str | None:
        """Why the selected model cannot take an image (None: it can, or only its runtime can tell)."""
        definition = self._definition(self.state.value.model)
        return cannot_see_reason(definition) if definition is not None else None

    def attach_image(self, path: Path) -> bool:
        """Attach an image file to the next message; refused (and why, in ``notice``) for a model that
        cannot see, a file that is not an image or is too large."""
        why = self.cannot_see()
        kind = IMAGE_TYPES.get(path.suffix.lower())
        if why is None and kind is None:
            why = f"{path.name} is not an image this can send (PNG, JPEG, WebP, GIF or BMP)."
        if why is None:
            try:
                size = path.stat().st_size
                data = path.read_bytes() if size <= MAX_IMAGE_BYTES else b""
            except OSError as exc:
                why = f"cannot read {path.name}: {exc.strerror or exc}"
            else:
                if size > MAX_IMAGE_BYTES:
                    why = f"{path.name} is {size / (1 << 20):.0f} MiB; an image may be {MAX_IMAGE_BYTES >> 20} MiB."
        if why is not None:
            self.state.set(replace(self.state.value, notice=why))
            return False
        image = ImageAttachment(path.name, f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}")
        self.state.set(replace(self.state.value, images=self.state.value.images + (image,), notice=""))
        return True

    def remove_images(self) -> None:
        self.state.set(replace(self.state.value, images=(), notice=""))

    def send(self, text: str) -> asyncio.Task[None] | None:
        s = self.state.value
        if s.busy or not text.strip() or not s.model:
            return None
        completion = s.mode == COMPLETION
        if s.images and (why := self.cannot_see() or ("Text completion sends no images." if completion else None)):
            self.state.set(replace(s, notice=why))  # refused here: nothing goes to the model
            return None
        prompt = text if completion else text.strip()  # a continuation depends on the prompt's last space
        user = ChatMessage("user", prompt, completion=completion, images=s.images)
        return self._start(s.messages + (user,), len(s.messages))

    def regenerate(self) -> asyncio.Task[None] | None:
        """Answer the last message again, in place of the last answer."""
        s = self.state.value
        if s.busy or len(s.messages) < 2 or s.messages[-1].role != "assistant" or not s.model:
            return None
        if any(i.data_url for m in s.messages for i in m.images) and (why := self.cannot_see()):
            self.state.set(replace(s, notice=why))  # a saved chat's images go again, and this model cannot see
            return None
        return self._start(s.messages[:-1], len(s.messages) - 1)

    def edit(self, index: int, text: str) -> asyncio.Task[None] | None:
        """Send the user's message ``index`` again as ``text``; what followed it is replaced."""
        s = self.state.value
        if s.busy or not text.strip() or not s.model or not 0 <= index < len(s.messages) \
                or s.messages[index].role != "user":
            return None
        old = s.messages[index]
        if old.images and any(i.data_url for i in old.images) and (why := self.cannot_see()):
            self.state.set(replace(s, notice=why))
            return None
        edited = replace(old, content=text if old.completion else text.strip())
        return self._start(s.messages[:index] + (edited,), index)

    def _start(self, history: tuple[ChatMessage, ...], first_changed: int) -> asyncio.Task[None]:
        s = self.state.value
        answer = ChatMessage("assistant", "", s.model, streaming=True, completion=history[-1].completion)
        self.state.set(replace(s, messages=history + (answer,), busy=True, images=(), notice=""))
        self._task = asyncio.ensure_future(self._answer(history, first_changed))
        return self._task

    def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def close(self) -> None:
        self.stop()
        await self.saved()
        for lookup in list(self._lookups.values()):
            lookup.cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _body(self, history: tuple[ChatMessage, ...]) -> dict[str, Any]:
        s = self.state.value
        if history[-1].completion:  # a base model continues this one text; earlier turns are not a dialogue
            return {"model": s.model, "prompt": history[-1].content, "temperature": s.temperature,
                    "max_tokens": s.max_tokens, "stream_options": {"include_usage": True}}
        messages: list[dict[str, Any]] = [{"role": "system", "content": s.system_prompt}] \
            if s.system_prompt.strip() else []
        messages += [{"role": m.role, "content": _content(m)} for m in history if not m.error and not m.completion]
        return {"model": s.model, "messages": messages, "temperature": s.temperature,
                "max_tokens": s.max_tokens, "stream_options": {"include_usage": True}}

    def _show_answer(self, generation: int, answer: ChatMessage) -> None:
        s = self.state.value
        if generation != self._generation or not s.messages:  # another chat is shown now
            return
        self.state.set(replace(s, messages=s.messages[:-1] + (answer,)))

    async def _answer(self, history: tuple[ChatMessage, ...], first_changed: int) -> None:
        if self._session is None:
            self._session = self._session_factory()
        generation = self._generation
        current = self.state.value.messages[-1]  # the answer _start put up, streaming

        def update(**changes: Any) -> None:
            nonlocal current
            current = replace(current, **changes)
            self._show_answer(generation, current)

        started = time.perf_counter()
        first: float | None = None
        pieces = 0
        usage_tokens: int | None = None
        finish: str | None = None
        text = ""
        thought = ""  # reasoning_content deltas

        def stats() -> AnswerStats:
            end = time.perf_counter()
            tokens = usage_tokens if usage_tokens is not None else pieces
            rate = tokens / (end - first) if first is not None and end > first and tokens > 1 else None
            ttft = (first - started) * 1000 if first is not None else None
            return AnswerStats(ttft, tokens, rate, finish)

        try:
            path = "/completions" if history[-1].completion else "/chat/completions"
            async for chunk in stream_chat(self._session, self.fleet.snapshot.value.api_url,
                                           self._body(history), self.state.value.api_key, path):
                if chunk.get("usage"):
                    usage_tokens = chunk["usage"].get("completion_tokens", usage_tokens)
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    piece = choice.get("text") or delta.get("content") or ""
                    thinking = delta.get("reasoning_content") or ""
                    finish = choice.get("finish_reason") or finish
                    if piece or thinking:
                        first = first or time.perf_counter()
                        pieces += 1
                        text, thought = text + piece, thought + thinking
                        inline, answer = split_reasoning(text)
                        update(content=answer, reasoning="\n".join(r for r in (thought.strip(), inline) if r))
            update(streaming=False, stats=stats())
        except asyncio.CancelledError:
            finish = "stopped by you"
            update(streaming=False, stats=stats())
        except (ChatError, ValueError) as exc:
            update(streaming=False, error=str(exc), stats=None)
        finally:
            if generation == self._generation:
                self.state.set(replace(self.state.value, busy=False))
            self._save_from(generation, first_changed, history + (current,))  # to its own chat, shown or not


def _content(message: ChatMessage) -> str | list[dict[str, Any]]:
    """A message's content for /v1: its text, or (with images) the text and each image as a part."""
    images = [image for image in message.images if image.data_url]  # one kept only by name has no data
    if not images:
        return message.content
    return [{"type": "text", "text": message.content},
            *({"type": "image_url", "image_url": {"url": image.data_url}} for image in images)]
