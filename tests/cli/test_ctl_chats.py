"""``mirbadllm ctl chats`` against a real daemon: the Playground's saved chats listed, shown, renamed,
exported (Markdown to a file, JSON to the terminal) and deleted, by id or its start; an unknown id
said plainly with a non-zero exit."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from daemon.api.conversations import ConversationCreate, ConversationMessage
from mirbadllm import ctl
from tests.daemon.harness import running_daemon


async def _ctl(home: Path, *argv: str) -> int:
    return await asyncio.to_thread(ctl.main, ["--home", str(home), *argv])


async def test_ctl_chats_lists_shows_renames_exports_and_deletes(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    async with running_daemon(home, None, local_agent=False) as d:
        chat = await d.client.create_conversation(ConversationCreate(model="coder", messages=[
            ConversationMessage(role="user", content="Say hi in Python"),
            ConversationMessage(role="assistant", model="coder", content="```python\nprint('hi')\n```",
                                reasoning="Easy.")]))
        capsys.readouterr()

        assert await _ctl(home, "chats", "list") == 0
        listed = capsys.readouterr().out
        assert chat.id in listed and "Say hi in Python" in listed and "coder" in listed

        assert await _ctl(home, "chats", "show", chat.id[:6]) == 0  # the start of an id is enough
        shown = capsys.readouterr().out
        assert "[you]\nSay hi in Python" in shown and "print('hi')" in shown and "reasoning" in shown

        assert await _ctl(home, "chats", "rename", chat.id, "Hello world") == 0
        assert "Hello world" in capsys.readouterr().out
        out = tmp_path / "chat.md"
        assert await _ctl(home, "chats", "export", chat.id, "--out", str(out)) == 0
        assert out.read_text().startswith("# Hello world\n") and "```python\nprint('hi')\n```" in out.read_text()
        capsys.readouterr()
        assert await _ctl(home, "chats", "export", chat.id, "--format", "json") == 0
        assert json.loads(capsys.readouterr().out)["title"] == "Hello world"

        assert await _ctl(home, "chats", "rm", chat.id) == 0
        assert await d.client.list_conversations() == []
        capsys.readouterr()
        assert await _ctl(home, "chats", "show", chat.id) == 1
        assert "no saved chat" in capsys.readouterr().err
