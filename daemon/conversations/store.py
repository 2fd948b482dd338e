"""``ConversationStore``: saved chats in ``conversations.sqlite`` (WAL), on a thread of their own.

Three tables: ``conversations`` (one row a chat: title, model, system prompt, times), ``messages``
(one row a message, numbered from 0 by ``seq`` within its chat) and ``message_images`` (the bytes of
a message's kept images, a BLOB each, returned as data URLs). Appending after the first ``keep``
messages deletes the later ones in the same transaction, so a regenerate or an edit never leaves a
chat half-replaced. A chat's id is a random hex string; an unknown one is ``None`` here and a 404 in
the API.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon.api.conversations import (
    Conversation,
    ConversationAppend,
    ConversationCreate,
    ConversationImage,
    ConversationMessage,
    ConversationSummary,
    data_url,
    default_title,
    image_bytes,
)
from daemon.sqlite_worker import SqliteWorker

_LOGGER = logging.getLogger(__name__)

_SCHEMA = """
PRAGMA journal_mode=WAL;
PRAGMA foreign_keys=ON;
CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, title TEXT NOT NULL, model TEXT NOT NULL,
    system_prompt TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS messages (conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, reasoning TEXT, model TEXT NOT NULL,
    images TEXT NOT NULL, error TEXT, created_at REAL NOT NULL, PRIMARY KEY (conversation_id, seq));
CREATE TABLE IF NOT EXISTS message_images (conversation_id TEXT NOT NULL
    REFERENCES conversations(id) ON DELETE CASCADE, seq INTEGER NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL,
    media_type TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (conversation_id, seq, idx));
CREATE INDEX IF NOT EXISTS conversations_updated ON conversations(updated_at);
"""
_SUMMARY = ("SELECT c.id, c.title, c.model, c.created_at, c.updated_at,"
            " (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) FROM conversations c")


class ConversationStore(SqliteWorker):
    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        super().__init__(path, "conversations")
        self._clock = clock

    async def open(self) -> None:
        await self._run(self._open)

    def _open(self) -> None:
        self._db = sqlite3.connect(self._path, check_same_thread=False, timeout=30)
        self._db.executescript(_SCHEMA)

    # --- reads --------------------------------------------------------------------------------
    async def summaries(self) -> list[ConversationSummary]:
        """Every chat, the most recently changed first."""
        rows = await self._run(self._list)
        return [_summary(row) for row in rows]

    def _list(self) -> list[tuple[Any, ...]]:
        assert self._db is not None
        return self._db.execute(_SUMMARY + " ORDER BY c.updated_at DESC, c.rowid DESC").fetchall()

    async def get(self, conversation_id: str) -> Conversation | None:
        result: Conversation | None = await self._run(self._get, conversation_id)
        return result

    def _get(self, conversation_id: str) -> Conversation | None:
        assert self._db is not None
        row = self._db.execute(_SUMMARY + " WHERE c.id = ?", (conversation_id,)).fetchone()
        if row is None:
            return None
        system = self._db.execute("SELECT system_prompt FROM conversations WHERE id = ?",
                                  (conversation_id,)).fetchone()[0]
        messages = self._db.execute("SELECT seq, role, content, reasoning, model, images, error, created_at FROM messages"
                                    " WHERE conversation_id = ? ORDER BY seq", (conversation_id,)).fetchall()
        kept: dict[int, list[ConversationImage]] = {}
        for seq, name, media_type, data in self._db.execute(
                "SELECT seq, name, media_type, data FROM message_images WHERE conversation_id = ? ORDER BY seq, idx",
                (conversation_id,)):
            kept.setdefault(seq, []).append(ConversationImage.model_construct(name=name,
                                                                              data_url=data_url(media_type, data)))
        return Conversation(**_summary(row).model_dump(), system_prompt=system,
                            messages=[_message(m[1:], kept.get(m[0], [])) for m in messages])

    # --- writes -------------------------------------------------------------------------------
    async def create(self, new: ConversationCreate) -> Conversation:
        conversation_id = uuid.uuid4().hex[:16]
        await self._run(self._create, conversation_id, new, self._clock())
        created = await self.get(conversation_id)
        assert created is not None
        return created

    def _create(self, conversation_id: str, new: ConversationCreate, now: float) -> None:
        assert self._db is not None
        title = new.title.strip() or default_title(new.messages)
        with self._db:
            self._db.execute("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?)",
                             (conversation_id, title, new.model, new.system_prompt, now, now))
            self._insert(conversation_id, 0, new.messages, now)

    def _insert(self, conversation_id: str, first: int, messages: list[ConversationMessage], now: float) -> None:
        assert self._db is not None
        self._db.executemany(
            "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(conversation_id, first + i, m.role, m.content, m.reasoning, m.model, json.dumps(m.images), m.error,
              m.created_at or now) for i, m in enumerate(messages)])
        self._db.executemany(
            "INSERT INTO message_images VALUES (?, ?, ?, ?, ?, ?)",
            [(conversation_id, first + i, j, image.name, *image_bytes(image.data_url))
             for i, m in enumerate(messages) for j, image in enumerate(m.attachments)])

    async def append(self, conversation_id: str, change: ConversationAppend) -> Conversation | None:
        """Keep the first ``change.keep`` messages (all when unset), then add ``change.messages``."""
        if not await self._run(self._append, conversation_id, change, self._clock()):
            return None
        return await self.get(conversation_id)

    def _append(self, conversation_id: str, change: ConversationAppend, now: float) -> bool:
        assert self._db is not None
        with self._db:
            row = self._db.execute("SELECT title, (SELECT COUNT(*) FROM messages WHERE conversation_id = ?)"
                                   " FROM conversations WHERE id = ?", (conversation_id, conversation_id)).fetchone()
            if row is None:
                return False
            count = row[1]
            keep = count if change.keep is None else min(change.keep, count)
            self._db.execute("DELETE FROM messages WHERE conversation_id = ? AND seq >= ?", (conversation_id, keep))
            self._db.execute("DELETE FROM message_images WHERE conversation_id = ? AND seq >= ?",
                             (conversation_id, keep))
            self._insert(conversation_id, keep, change.messages, now)
            self._db.execute("UPDATE conversations SET updated_at = ?, model = COALESCE(?, model) WHERE id = ?",
                             (now, change.model, conversation_id))
            if row[0] == "New chat" and change.messages:  # a chat created empty is named by its first message
                self._db.execute("UPDATE conversations SET title = ? WHERE id = ?",
                                 (default_title(change.messages), conversation_id))
        return True

    async def rename(self, conversation_id: str, title: str) -> Conversation | None:
        if not await self._run(self._rename, conversation_id, title.strip(), self._clock()):
            return None
        return await self.get(conversation_id)

    def _rename(self, conversation_id: str, title: str, now: float) -> bool:
        assert self._db is not None
        with self._db:
            cursor = self._db.execute("UPDATE conversations SET title = ?, updated_at = ? WHERE id = ?",
                                      (title, now, conversation_id))
        return cursor.rowcount > 0

    async def delete(self, conversation_id: str) -> bool:
        deleted: bool = await self._run(self._delete, conversation_id)
        return deleted

    def _delete(self, conversation_id: str) -> bool:
        assert self._db is not None
        with self._db:
            self._db.execute("DELETE FROM message_images WHERE conversation_id = ?", (conversation_id,))
            self._db.execute("DELETE FROM messages WHERE conversation_id = ?", (conversation_id,))
            cursor = self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
        return cursor.rowcount > 0


def _summary(row: tuple[Any, ...]) -> ConversationSummary:
    return ConversationSummary(id=row[0], title=row[1], model=row[2], created_at=row[3], updated_at=row[4],
                               message_count=row[5])


def _message(row: tuple[Any, ...], attachments: list[ConversationImage]) -> ConversationMessage:
    role, content, reasoning, model, images, error, created_at = row
    return ConversationMessage.model_construct(role=role, content=content, reasoning=reasoning, model=model,
                                               images=json.loads(images), attachments=attachments, error=error,
                                               created_at=created_at)
