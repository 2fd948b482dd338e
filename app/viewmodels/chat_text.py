"""An answer's text as the Playground shows it: the model's reasoning apart from its answer, and the
answer cut into Markdown prose and fenced code blocks (each block gets its own copy button).

Reasoning comes two ways: llama-server (with ``--reasoning-format``) and vLLM stream it in the
``reasoning_content`` delta field; a model whose template does not split it writes it inline between
``<think>`` and ``</think>``. ``split_reasoning`` takes the inline form out of the text, also while it
streams (an open ``<think>`` with no end yet is all reasoning so far).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

_LOGGER = logging.getLogger(__name__)

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)[^\n]*$")


def split_reasoning(text: str) -> tuple[str, str]:
    """``(reasoning, answer)`` of a text that may hold ``<think>...</think>`` blocks (one left open
    while it streams). Some templates open the block in the prompt, so the text starts inside it:
    a ``</think>`` without an opening one ends reasoning that began with the text."""
    reasoning: list[str] = []
    answer: list[str] = []
    rest = text
    if _THINK_CLOSE in rest and _THINK_OPEN not in rest.split(_THINK_CLOSE, 1)[0]:
        head, rest = rest.split(_THINK_CLOSE, 1)
        reasoning.append(head)
    inside = False  # answer up to the next <think>, reasoning up to the next </think>, and so on
    while rest:
        marker = _THINK_CLOSE if inside else _THINK_OPEN
        at = rest.find(marker)
        (reasoning if inside else answer).append(rest if at < 0 else rest[:at])
        if at < 0:
            break
        rest = rest[at + len(marker):]
        inside = not inside
    return "\n".join(r.strip() for r in reasoning if r.strip()), "".join(answer).lstrip("\n")


@dataclass(frozen=True)
class Segment:
    kind: str  # "text" (Markdown prose) or "code"
    text: str
    language: str = ""


def segments(markdown: str) -> list[Segment]:
    """The text cut at fenced code blocks (```lang ... ```); a block still open (the answer is
    streaming) runs to the end. Prose keeps its Markdown; code is the block's lines as they are."""
    found: list[Segment] = []
    prose: list[str] = []
    code: list[str] = []
    fence: str | None = None
    language = ""
    for line in markdown.split("\n"):
        match = _FENCE.match(line)
        if fence is None and match:
            if any(p.strip() for p in prose):
                found.append(Segment("text", "\n".join(prose).strip("\n")))
            prose, code, fence, language = [], [], match["fence"], match["lang"]
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
            found.append(Segment("code", "\n".join(code), language))
            fence = None
        elif fence is not None:
            code.append(line)
        else:
            prose.append(line)
    if fence is not None:
        found.append(Segment("code", "\n".join(code), language))
    elif any(p.strip() for p in prose):
        found.append(Segment("text", "\n".join(prose).strip("\n")))
    return found
