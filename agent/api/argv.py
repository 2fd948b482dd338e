"""``scan``: a runtime's argv read into the values its settings model types, the flags the command
builder owns, and the rest, kept as typed.

llama-server's and ``mlx_lm.server``'s argv share one grammar: a value flag takes ``--flag=value``
(long spellings) or the next argument, a bool flag stands alone, anything else is kept in order.
Each runtime's module names its own flags (``agent.api.llamacpp``, ``agent.api.mlx``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

S = TypeVar("S", bound=BaseModel)

KEEP_AS_TYPED: Any = object()  # what ``coerce`` answers for a value no field takes: flag and value go to ``rest``


def flag_setting(flag: str, default_shown: Any, description: str, unit: str = "", **kw: Any) -> Any:
    """A runtime settings field (default None: the runtime's own) that records its command-line
    flag, the runtime's default as shown to people, and a unit."""
    extra = {"flag": flag, "runtime_default": default_shown, "unit": unit}
    return Field(default=None, description=description, json_schema_extra=extra, **kw)


def flag_values(settings: BaseModel) -> Iterator[tuple[str, str, Any]]:
    """(field, its flag, its value) for each field of ``settings`` that has a flag (``flag_setting``), in
    field order: what a command builder walks."""
    for name, info in type(settings).model_fields.items():
        if not info.exclude:  # the union's tag: no flag
            yield name, str((info.json_schema_extra or {})["flag"]), getattr(settings, name)  # type: ignore[index]


@dataclass
class Scanned:
    values: dict[str, Any] = field(default_factory=dict)  # field -> value, the last spelling wins
    owned: dict[str, str] = field(default_factory=dict)  # an owned value flag -> its raw value
    rest: list[str] = field(default_factory=list)


def without_executable(argv: list[str]) -> list[str]:
    """``argv`` with or without the executable in front: its arguments."""
    args = list(argv)
    return args[1:] if args and not args[0].startswith("-") else args


def scan(args: list[str], *, value_flags: Mapping[str, str], bool_flags: Mapping[str, tuple[str, bool]],
         owned_value_flags: frozenset[str], owned_bool_flags: frozenset[str] = frozenset(),
         coerce: Callable[[str, str], Any]) -> Scanned:
    """``value_flags``: flag -> field, its value ``coerce(field, raw)``; ``bool_flags``: flag -> (field,
    value); owned flags are the builder's: their values are noted in ``owned``, never kept.

    Raises ValueError for a value flag with no value, or a value ``coerce`` cannot read."""
    found = Scanned()
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if flag in value_flags or flag in owned_value_flags:
            if eq:
                raw = inline
            elif i + 1 < len(args):
                i += 1
                raw = args[i]
            else:
                raise ValueError(f"{flag} needs a value")
            if flag in value_flags:
                value = coerce(value_flags[flag], raw)
                if value is KEEP_AS_TYPED:
                    found.rest += [arg] if eq else [flag, raw]
                else:
                    found.values[value_flags[flag]] = value
            else:
                found.owned[flag] = raw
        elif arg in bool_flags:
            name, on = bool_flags[arg]
            found.values[name] = on
        elif arg not in owned_bool_flags:
            found.rest.append(arg)
        i += 1
    return found


@dataclass(frozen=True)
class ParsedCommand(Generic[S]):
    """A runtime's argv read back into its parts (``model_path``: None where no flag names the file)."""

    served_name: str | None
    host: str | None
    port: int | None
    settings: S
    extra_args: list[str] = field(default_factory=list)
    model_path: str | None = None


def read_back(found: Scanned, base: S, *, name_flags: tuple[str, ...],
              model_flags: tuple[str, ...] = ()) -> ParsedCommand[S]:
    """``scan``'s findings as a ``ParsedCommand``: the typed values over ``base``, the served name and
    the model file from the first of their owned flags given, ``--host`` and ``--port``."""

    def pick(*names: str) -> str | None:
        return next((found.owned[n] for n in names if n in found.owned), None)

    port = pick("--port")
    return ParsedCommand(served_name=pick(*name_flags), host=pick("--host"), port=int(port) if port is not None else None,
                         settings=type(base).model_validate({**base.model_dump(), **found.values}),
                         extra_args=found.rest, model_path=pick(*model_flags))
