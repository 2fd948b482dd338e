"""The demo daemon's saved chats (``/api/conversations``), mixed into ``memory_daemon.DemoDaemon``.

None at first (a test creates them through the calls). The rules are the daemon's own
(``daemon.conversations``): the same contracts validate, an unknown id is 404
``conversation_not_found``, ``keep`` replaces what followed, exports are ``daemon.api.conversations``'.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from daemon.api.client import DaemonError
from daemon.api.conversations import (
    Conversation,
    ConversationAppend,
    ConversationCreate,
    ConversationMessage,
    ConversationRename,
    ConversationSummary,
    ExportFormat,
    default_title,
    export_text,
)

_LOGGER = logging.getLogger(__name__)

_CODE_ANSWER = ("Use `pathlib` and a generator:\n\n```python\nfrom pathlib import Path\n\n"
                "def big_files(root: str, over: int) -> list[Path]:\n"
                "    return [p for p in Path(root).rglob(\"*\") if p.is_file() and p.stat().st_size > over]\n```\n\n"
                "It walks the tree once and skips folders.")


def _checked(model: type[Any], data: object) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise DaemonError(422, "invalid_request", "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())) from None


class DemoConversations:
    if TYPE_CHECKING:  # provided by the daemon class this is mixed into
        def _record(self, name: str, *args: Any) -> None: ...

    @property
    def conversations(self) -> dict[str, Conversation]:
        chats: dict[str, Conversation] | None = self.__dict__.get("_demo_conversations")
        if chats is None:
            chats = self.__dict__["_demo_conversations"] = {}
        return chats

    def _chat(self, conversation_id: str) -> Conversation:
        found = self.conversations.get(conversation_id)
        if found is None:
            raise DaemonError(404, "conversation_not_found", f"No saved conversation '{conversation_id[:128]}' "
                              "(`mirbadllm ctl chats list` shows them).")
        return found

    def _save(self, chat: Conversation, **changes: Any) -> Conversation:
        saved = chat.model_copy(update={**changes, "updated_at": time.time()})
        saved.message_count = len(saved.messages)
        self.conversations[saved.id] = saved
        return saved.model_copy(deep=True)

    async def list_conversations(self) -> list[ConversationSummary]:
        self._record("list_conversations")
        chats = sorted(self.conversations.values(), key=lambda c: c.updated_at, reverse=True)
        return [ConversationSummary.model_validate(c.model_dump(exclude={"messages", "system_prompt"}))
                for c in chats]

    async def create_conversation(self, new: ConversationCreate) -> Conversation:
        self._record("create_conversation", new)
        new = _checked(ConversationCreate, new.model_dump())
        now = time.time()
        messages = [m.model_copy(update={"created_at": m.created_at or now}) for m in new.messages]
        chat = Conversation(id=uuid.uuid4().hex[:16], title=new.title.strip() or default_title(new.messages),
                            model=new.model, created_at=now, updated_at=now, message_count=len(messages),
                            system_prompt=new.system_prompt, messages=messages)
        return self._save(chat)

    async def get_conversation(self, conversation_id: str) -> Conversation:
        self._record("get_conversation", conversation_id)
        return self._chat(conversation_id).model_copy(deep=True)

    async def rename_conversation(self, conversation_id: str, title: str) -> Conversation:
        self._record("rename_conversation", conversation_id, title)
        change = _checked(ConversationRename, {"title": title})
        return self._save(self._chat(conversation_id), title=change.title.strip())

    async def delete_conversation(self, conversation_id: str) -> None:
        self._record("delete_conversation", conversation_id)
        self._chat(conversation_id)
        del self.conversations[conversation_id]

    async def append_messages(self, conversation_id: str, messages: list[ConversationMessage],
                              keep: int | None = None, model: str | None = None) -> Conversation:
        self._record("append_messages", conversation_id, messages, keep, model)
        change = _checked(ConversationAppend, {"messages": [m.model_dump() for m in messages], "keep": keep,
                                               "model": model})
        chat = self._chat(conversation_id)
        kept = chat.messages[:len(chat.messages) if change.keep is None else change.keep]
        now = time.time()
        added = [m.model_copy(update={"created_at": m.created_at or now}) for m in change.messages]
        title = default_title(added) if chat.title == "New chat" and added else chat.title
        return self._save(chat, messages=kept + added, model=change.model or chat.model, title=title)

    async def export_conversation(self, conversation_id: str, fmt: ExportFormat = "md") -> str:
        self._record("export_conversation", conversation_id, fmt)
        if fmt not in ("md", "json"):
            raise DaemonError(400, "invalid_parameter", "format must be md or json")
        return export_text(self._chat(conversation_id), fmt)
