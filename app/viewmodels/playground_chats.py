"""The Playground's saved chats: each conversation is kept in the daemon (``/api/conversations``), so
the app and ``mirbadllm ctl chats`` see the same list; listed, reopened, renamed, deleted, exported.

After every answer (finished, failed or stopped) the messages that changed are written: a new chat
is created with all of them; a later turn appends; a regenerate or an edit replaces what followed the
first changed message (``keep``). Images are kept with their message (up to the daemon's
``MAX_SAVED_IMAGE_BYTES`` each; a bigger one keeps only its name), so a reopened chat shows them and
a regenerate or an edit sends them again. Writes go one at a time, in order, each to the chat it belongs
to even when another is shown by then (a chat is known by its generation: every new or reopened
chat is a new one). A failed write never stops the chat: the page says it was not saved and why.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from daemon.api.client import DaemonError
from daemon.api.conversations import (
    MAX_SAVED_IMAGE_BYTES,
    ConversationCreate,
    ConversationImage,
    ConversationMessage,
    ExportFormat,
)

if TYPE_CHECKING:
    from app.viewmodels.fleet import FleetViewModel
    from app.viewmodels.observable import Observable
    from app.viewmodels.playground import ChatMessage, ImageAttachment, PlaygroundState

_LOGGER = logging.getLogger(__name__)


def _keepable(data_url: str) -> bool:
    """Small enough to keep (the base64 after the comma is 4/3 of the bytes)."""
    return bool(data_url) and (len(data_url) - data_url.find(",") - 1) * 3 // 4 <= MAX_SAVED_IMAGE_BYTES


def to_saved(message: ChatMessage) -> ConversationMessage:
    return ConversationMessage(role="user" if message.role == "user" else "assistant", content=message.content,
                               reasoning=message.reasoning or None, model=message.model,
                               images=[image.name for image in message.images], error=message.error,
                               attachments=[ConversationImage(name=image.name, data_url=image.data_url)
                                            for image in message.images if _keepable(image.data_url)])


def _reopened_images(message: ConversationMessage, attachment: type[ImageAttachment]) -> tuple[ImageAttachment, ...]:
    """A saved message's images: the kept ones with their bytes, the others by name only."""
    kept = [image.data_url for image in message.attachments]
    names = list(message.images) or [image.name for image in message.attachments]
    by_name = {image.name: image.data_url for image in message.attachments}
    if len(kept) == len(names):
        return tuple(attachment(name, data) for name, data in zip(names, kept, strict=True))
    return tuple(attachment(name, by_name.get(name, "")) for name in names)


class SavedChats:
    """Mixed into ``PlaygroundViewModel``: its state's ``conversation_id`` and ``conversations``."""

    fleet: FleetViewModel
    state: Observable[PlaygroundState]
    _generation: int  # the chat shown (PlaygroundViewModel bumps it for a new or reopened chat)

    def _init_saved(self) -> None:
        self._saved: dict[int, int] = {}  # generation -> how many of its messages the daemon has as they are
        self._chat_ids: dict[int, str] = {}  # generation -> its saved chat's id
        self._save_lock = asyncio.Lock()
        self._saving: set[asyncio.Task[None]] = set()

    def _save_from(self, generation: int, first_changed: int, messages: tuple[ChatMessage, ...]) -> None:
        """Write chat ``generation``'s ``messages`` from ``first_changed`` on (those before it are saved),
        in the background."""
        task = asyncio.ensure_future(self._write(generation, first_changed, messages, messages[-1].model,
                                                 self.state.value.system_prompt))
        self._saving.add(task)
        task.add_done_callback(self._saving.discard)

    async def saved(self) -> None:
        """Wait for the writes under way (a test, or closing)."""
        while self._saving:
            await asyncio.gather(*self._saving, return_exceptions=True)

    async def _write(self, generation: int, first_changed: int, messages: tuple[ChatMessage, ...], model: str,
                     system_prompt: str) -> None:
        async with self._save_lock:
            chat_id = self._chat_ids.get(generation)
            keep = min(first_changed, self._saved.get(generation, 0))
            client = self.fleet.client
            shown = generation == self._generation
            try:
                if chat_id is None:
                    chat = await client.create_conversation(ConversationCreate(
                        model=model, system_prompt=system_prompt, messages=[to_saved(m) for m in messages]))
                    self._chat_ids[generation] = chat.id
                    if shown:
                        self.state.set(replace(self.state.value, conversation_id=chat.id))
                else:
                    await client.append_messages(chat_id, [to_saved(m) for m in messages[keep:]], keep=keep,
                                                 model=model)
                self._saved[generation] = len(messages)
                if shown and self.state.value.save_error:
                    self.state.set(replace(self.state.value, save_error=""))
            except DaemonError as exc:
                _LOGGER.info("the chat was not saved: %s", exc.message)
                if shown:
                    self.state.set(replace(self.state.value, save_error=f"Not saved: {exc.message}"))
                return
        await self.refresh_conversations()

    async def refresh_conversations(self) -> None:
        try:
            chats = tuple(await self.fleet.client.list_conversations())
        except DaemonError as exc:
            _LOGGER.info("cannot list the saved chats: %s", exc.message)
            return
        if chats != self.state.value.conversations:
            self.state.set(replace(self.state.value, conversations=chats))

    async def open_conversation(self, conversation_id: str) -> None:
        """Show a saved chat: its messages, system prompt and (when it is still offered) its model."""
        from app.viewmodels.playground import ChatMessage, ImageAttachment

        self._stop_answer()
        await self.saved()
        chat = await self.fleet.client.get_conversation(conversation_id)
        messages = tuple(ChatMessage(role=m.role, content=m.content, model=m.model, reasoning=m.reasoning or "",
                                     error=m.error, images=_reopened_images(m, ImageAttachment))
                         for m in chat.messages if m.role != "system")
        s = self.state.value
        changes: dict[str, Any] = {"messages": messages, "conversation_id": chat.id, "system_prompt": chat.system_prompt,
                                   "images": (), "notice": "", "save_error": "", "busy": False}
        if chat.model in s.models:
            changes["model"] = chat.model
        self._saved[self._generation] = len(chat.messages)
        self._chat_ids[self._generation] = chat.id
        self.state.set(replace(s, **changes))

    async def rename_conversation(self, conversation_id: str, title: str) -> None:
        await self.fleet.client.rename_conversation(conversation_id, title)
        await self.refresh_conversations()

    async def delete_conversation(self, conversation_id: str) -> None:
        await self.saved()
        await self.fleet.client.delete_conversation(conversation_id)
        if self.state.value.conversation_id == conversation_id:
            self.new_chat()
        await self.refresh_conversations()

    async def export_conversation(self, conversation_id: str, fmt: ExportFormat) -> str:
        await self.saved()
        return await self.fleet.client.export_conversation(conversation_id, fmt)

    def new_chat(self) -> None:
        """An empty chat; the one shown stays saved."""
        self._stop_answer()
        self.state.set(replace(self.state.value, messages=(), conversation_id=None, images=(), notice="",
                               save_error="", busy=False))

    def _stop_answer(self) -> None:
        raise NotImplementedError
