"""Saved chats: the contracts of ``/api/conversations`` (``daemon.conversations``) and their exports.

A conversation is what the Playground (or ``mirbadllm run``) said with a model: a title, the model,
the system prompt and its messages in order. The daemon keeps them in SQLite so the app and the
CLI see the same list. ``ConversationAppend`` adds messages after the first ``keep`` ones, which is
how a client appends (``keep`` unset), regenerates the last answer (``keep`` = all but it) and
edits a message and sends again (``keep`` = the messages before it). A message's images are named
(``images``) and, up to ``MAX_SAVED_IMAGE_BYTES`` each, kept byte for byte (``attachments``, data
URLs) so a reopened chat shows them and sends them again; a bigger one is 422, an image only named
stays a name.

``to_markdown`` and ``to_json`` are the export formats (``GET /api/conversations/{id}/export``).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_LOGGER = logging.getLogger(__name__)

MAX_TITLE = 200
MAX_CONTENT = 200_000       # characters of one message (a long answer fits; a pasted book does not)
MAX_MESSAGES = 2_000        # per conversation, and per append
MAX_IMAGES = 8              # named attachments of one message
MAX_SAVED_IMAGE_BYTES = 10 << 20  # one kept image, decoded (a photo fits; the Playground keeps only the name of a bigger one)
MAX_BODY_BYTES = 64 << 20   # a request body to these routes (a few kept images as base64)
EXPORT_FORMATS = ("md", "json")

Role = Literal["system", "user", "assistant"]
ExportFormat = Literal["md", "json"]


_DATA_URL = re.compile(r"data:(image/[\w.+-]+);base64,(.*)", re.DOTALL)


def image_bytes(data_url: str) -> tuple[str, bytes]:
    """An image data URL's media type and bytes; ValueError when it is not one."""
    match = _DATA_URL.fullmatch(data_url)
    if match is None:
        raise ValueError("must be a data URL: data:image/<type>;base64,<bytes>")
    try:
        return match.group(1), base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("its base64 is not valid") from None


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


class ConversationImage(BaseModel):
    """An image kept with its message: its name and its bytes as a data URL."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_TITLE)
    data_url: str = Field(description="data:image/<type>;base64,<bytes>, at most MAX_SAVED_IMAGE_BYTES decoded.")

    @field_validator("data_url")
    @classmethod
    def _fits(cls, value: str) -> str:
        if len(value) > 2 * MAX_SAVED_IMAGE_BYTES:  # far past the cap: refused before decoding
            raise ValueError(f"the image is over {MAX_SAVED_IMAGE_BYTES >> 20} MiB; a saved image may be at most "
                             f"{MAX_SAVED_IMAGE_BYTES >> 20} MiB")
        size = len(image_bytes(value)[1])
        if size > MAX_SAVED_IMAGE_BYTES:
            raise ValueError(f"the image is {size / (1 << 20):.1f} MiB; a saved image may be at most "
                             f"{MAX_SAVED_IMAGE_BYTES >> 20} MiB")
        return value


class ConversationMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str = Field(default="", max_length=MAX_CONTENT)
    reasoning: str | None = Field(default=None, max_length=MAX_CONTENT,
                                  description="The model's thinking (<think> or reasoning_content), shown collapsed.")
    model: str = Field(default="", max_length=MAX_TITLE, description="The model that answered (assistant).")
    images: list[str] = Field(default_factory=list, max_length=MAX_IMAGES,
                              description="The names of the images attached to this message.")
    attachments: list[ConversationImage] = Field(
        default_factory=list, max_length=MAX_IMAGES,
        description="The images kept with this message (sent again on regenerate or edit); names default to theirs.")
    error: str | None = Field(default=None, max_length=4_000, description="Why the answer failed, if it did.")
    created_at: float = 0.0

    @model_validator(mode="after")
    def _named(self) -> ConversationMessage:
        if not self.images and self.attachments:
            self.images = [image.name for image in self.attachments]
        return self


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(default="", max_length=MAX_TITLE, description="Empty: the first user message's start.")
    model: str = Field(default="", max_length=MAX_TITLE)
    system_prompt: str = Field(default="", max_length=MAX_CONTENT)
    messages: list[ConversationMessage] = Field(default_factory=list, max_length=MAX_MESSAGES)


class ConversationRename(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=MAX_TITLE)


class ConversationAppend(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[ConversationMessage] = Field(max_length=MAX_MESSAGES)
    keep: int | None = Field(default=None, ge=0, description="Keep only the first N messages, then append "
                             "(regenerate: all but the last answer; edit: those before the edited one).")
    model: str | None = Field(default=None, max_length=MAX_TITLE, description="The model now chosen, if it changed.")


class ConversationSummary(BaseModel):
    id: str
    title: str
    model: str
    created_at: float
    updated_at: float
    message_count: int


class Conversation(ConversationSummary):
    system_prompt: str = ""
    messages: list[ConversationMessage] = Field(default_factory=list)


def default_title(messages: list[ConversationMessage]) -> str:
    """The first user message's first line, shortened: what a person would call the chat."""
    first = next((m.content for m in messages if m.role == "user" and m.content.strip()), "")
    line = first.strip().splitlines()[0] if first.strip() else "New chat"
    return line if len(line) <= 60 else line[:59].rstrip() + "…"


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def to_markdown(conversation: Conversation) -> str:
    """The conversation as a Markdown document: a heading, then each turn under its speaker."""
    lines = [f"# {conversation.title}", "",
             f"Model: {conversation.model or '-'} · started {_when(conversation.created_at)}", ""]
    if conversation.system_prompt.strip():
        lines += ["## System", "", conversation.system_prompt.strip(), ""]
    for message in conversation.messages:
        who = "You" if message.role == "user" else message.model or message.role.capitalize()
        lines += [f"## {who}", ""]
        if message.images:
            lines += [f"Attached: {', '.join(message.images)}", ""]
        if message.reasoning:
            lines += ["<details><summary>Reasoning</summary>", "", message.reasoning.strip(), "", "</details>", ""]
        lines += [message.content.strip(), ""]
        if message.error:
            lines += [f"*Error: {message.error}*", ""]
    return "\n".join(lines).rstrip() + "\n"


def to_json(conversation: Conversation) -> str:
    return json.dumps(conversation.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


def export_text(conversation: Conversation, fmt: ExportFormat) -> str:
    return to_markdown(conversation) if fmt == "md" else to_json(conversation)
