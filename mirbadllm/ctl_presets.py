"""``mirbadllm ctl models preset ID [--system TEXT] [--temperature X] ... [--clear FIELD]``: a model's
defaults for requests that do not set them (a system prompt, sampling), shown or changed."""

from __future__ import annotations

import argparse

from daemon.api.client import DaemonClient
from daemon.api.models import Preset

# option -> the preset's field, and its type
_OPTIONS: dict[str, tuple[str, type]] = {
    "--system": ("system_prompt", str), "--temperature": ("temperature", float), "--top-p": ("top_p", float),
    "--top-k": ("top_k", int), "--min-p": ("min_p", float), "--repeat-penalty": ("repeat_penalty", float),
    "--max-tokens": ("max_tokens", int)}


def add_parser(models: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sub = models.add_parser("preset", help="a model's defaults for requests that do not set them")
    sub.add_argument("id")
    for option, (field, kind) in _OPTIONS.items():
        sub.add_argument(option, dest=field, type=kind, default=None)
    sub.add_argument("--clear", action="append", default=[], choices=sorted(Preset.model_fields), metavar="FIELD",
                     help="back to the runtime's default (repeatable): " + ", ".join(sorted(Preset.model_fields)))


async def run(args: argparse.Namespace, client: DaemonClient) -> int:
    view = await client.get_model(args.id)
    changes = {field: getattr(args, field) for field, _kind in _OPTIONS.values() if getattr(args, field) is not None}
    if changes or args.clear:
        preset = view.definition.preset.model_dump()
        preset.update(changes)
        preset.update({field: None for field in args.clear})
        updated = view.definition.model_copy(update={"preset": Preset.model_validate(preset)})
        view = await client.update_model(updated)  # the daemon checks each value (422 naming the field)
    print(_fmt(view.definition.id, view.definition.preset))
    return 0


def _fmt(model_id: str, preset: Preset) -> str:
    shown = [f"  {field:<15} {value!r}" for field, value in preset.model_dump().items() if value is not None]
    return f"{model_id}: " + ("\n" + "\n".join(shown) if shown else "no preset (each request's values, else the "
                                                                    "runtime's defaults)")
