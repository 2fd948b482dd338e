"""The fixed inputs of the suite: chat prompts, long prompts, objective questions, tool cases.

Everything is deterministic except where a run asks for a fresh random prefix (cold long prompts),
so two runs measure the same work. ``validate`` checks tool-call arguments against a JSON schema
subset (type, required, properties, closed objects, enum, items).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

CHAT_PROMPTS = (
    "Write a Python function that merges two sorted lists into one sorted list, then explain it.",
    "You are a planning agent. List the steps to book a meeting room for a team of six next Tuesday.",
    "Describe a walk along a quiet harbour at dawn, with the boats, the light and the sounds.",
)
# About 1.5 tokens per word in common tokenizers; used to size long prompts under a token budget.
TOKENS_PER_WORD = 1.5
_FILLER = ("The committee reviewed the quarterly figures for the northern region and noted that "
           "shipping costs rose while storage costs fell, so the net effect on margins was small. ")
_RANDOM_WORDS = ("amber", "basil", "cedar", "delta", "ember", "fjord", "grove", "harbor", "iris", "jade",
                 "kelp", "lumen", "maple", "nectar", "onyx", "pebble", "quartz", "raven", "sable", "tundra",
                 "umber", "velvet", "willow", "yarrow", "zephyr")


def chat_prompt(index: int, tag: str) -> str:
    """A fixed prompt with a distinct suffix, so no two requests of a run share their whole text."""
    return f"{CHAT_PROMPTS[index % len(CHAT_PROMPTS)]}\n\n(Request {tag}-{index}; answer in full.)"


def long_prompt(tokens: int, rng: random.Random) -> str:
    """About ``tokens`` tokens: a fresh random 24-word prefix, then the same reusable document."""
    prefix = " ".join(rng.choice(_RANDOM_WORDS) for _ in range(24))
    words_wanted = max(1, int(tokens / TOKENS_PER_WORD))
    filler_words = _FILLER.split()
    body = [filler_words[i % len(filler_words)] for i in range(words_wanted)]
    return f"{prefix}.\n\n{' '.join(body)}\n\nSummarise the document above in one sentence."


@dataclass(frozen=True)
class Question:
    prompt: str
    answer: re.Pattern[str]


OBJECTIVE_QUESTIONS = (
    Question("What is 7 + 5? Reply with the number only.", re.compile(r"\b12\b")),
    Question("What is the capital of France? Reply with one word.", re.compile(r"\bparis\b", re.IGNORECASE)),
    Question("How many days are in a week? Reply with the number only.", re.compile(r"\b7\b|\bseven\b", re.IGNORECASE)),
    Question("What colour is the sky on a clear day? Reply with one word.", re.compile(r"\bblue\b", re.IGNORECASE)),
    Question("What is 3 times 4? Reply with the number only.", re.compile(r"\b12\b|\btwelve\b", re.IGNORECASE)),
    Question("Which planet do people live on? Reply with one word.", re.compile(r"\bearth\b", re.IGNORECASE)),
    Question("What is the opposite of hot? Reply with one word.", re.compile(r"\bcold\b", re.IGNORECASE)),
    Question("How many legs does a spider have? Reply with the number only.", re.compile(r"\b8\b|\beight\b", re.IGNORECASE)),
)


@dataclass(frozen=True)
class ToolCase:
    prompt: str
    tool: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.tool["function"]["name"])

    @property
    def schema(self) -> dict[str, Any]:
        return dict(self.tool["function"].get("parameters") or {"type": "object"})


def _tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


TOOL_CASES = (
    ToolCase("What is the weather in Paris right now? Use the tool.", _tool(
        "get_weather", "Current weather for a city.",
        {"type": "object", "properties": {"city": {"type": "string"},
                                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
         "required": ["city"], "additionalProperties": False})),
    ToolCase("What time is it? Use the tool.", _tool("get_time", "The current time.", {"type": "object"})),
    ToolCase("Find three documents about solar panels. Use the tool.", _tool(
        "search_documents", "Search the document store.",
        {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"},
                                          "tags": {"type": "array", "items": {"type": "string"}}},
         "required": ["query"], "additionalProperties": False})),
)

EMBEDDING_TEXTS = (
    "A short line.",
    "Solar panels turn sunlight into electricity with photovoltaic cells.",
    "The harbour was quiet at dawn; the boats rocked gently and gulls called over the water.",
    "Quarterly figures show shipping costs rising while storage costs fell, leaving margins flat.",
)

_TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,),
                                       "number": (int, float), "integer": (int,), "boolean": (bool,),
                                       "null": (type(None),)}


def validate(value: Any, schema: dict[str, Any], where: str = "arguments") -> list[str]:
    """Errors of ``value`` against ``schema``; an empty list means valid."""
    errors: list[str] = []
    wanted = schema.get("type")
    if wanted is not None:
        names = wanted if isinstance(wanted, list) else [wanted]
        ok = any(isinstance(value, _TYPES.get(n, ())) and not (n in ("integer", "number") and isinstance(value, bool))
                 for n in names)
        if not ok:
            return [f"{where}: expected {'/'.join(names)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        errors += [f"{where}.{k}: required" for k in schema.get("required", []) if k not in value]
        if schema.get("additionalProperties") is False:
            errors += [f"{where}.{k}: not allowed" for k in value if k not in props]
        for key, sub in props.items():
            if key in value:
                errors += validate(value[key], sub, f"{where}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{where}[{i}]")
    return errors
