"""Reading and rewriting the daemon's ``services.json`` (``daemon.services.policy`` reads it per request).

``read_policy`` gives the file as a ``ServicesPolicy`` (its ``error`` set, and nothing in it, when the
file is not an object of lists of names). ``write_names`` replaces one block (every node's, or one
node's under ``nodes``) and keeps whatever else the file holds (other keys, other nodes), written
atomically; a node left with no names loses its block. It refuses to rewrite a file it cannot read,
so a hand edit with a typo is never overwritten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.json_store import write_json_atomic
from daemon.api.services import ServiceNames, ServicesPolicy


class PolicyUnreadable(ValueError):
    pass


def _names(block: Any, key: str) -> list[str]:
    value = block.get(key, []) if isinstance(block, dict) else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyUnreadable(f"'{key}' is not a list of names")
    return [v for v in value if v.strip()]


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PolicyUnreadable(str(exc)) from exc
    if not isinstance(data, dict):
        raise PolicyUnreadable("not a JSON object")
    if not isinstance(data.get("nodes", {}), dict):
        raise PolicyUnreadable("'nodes' is not an object")
    return data


def _parse(data: dict[str, Any]) -> ServicesPolicy:
    nodes = {node: ServiceNames(allow=_names(block, "allow"), protected=_names(block, "protected"))
             for node, block in (data.get("nodes") or {}).items()}
    return ServicesPolicy(allow=_names(data, "allow"), protected=_names(data, "protected"), nodes=nodes)


def read_policy(path: Path) -> ServicesPolicy:
    try:
        return _parse(_load(path))
    except PolicyUnreadable as exc:
        return ServicesPolicy(error=f"{path.name} is unreadable ({exc}); fix or remove it by hand")


def write_names(path: Path, node_id: str | None, names: ServiceNames) -> ServicesPolicy:
    """Store ``names`` as every node's block (``node_id`` None) or ``node_id``'s; the policy after."""
    data = _load(path)
    _parse(data)  # every block readable before any is replaced
    block = {"allow": names.allow, "protected": names.protected}
    if node_id is None:
        data.update(block)
    else:
        nodes = dict(data.get("nodes") or {})
        old = nodes.get(node_id)
        kept = {k: v for k, v in old.items() if k not in block} if isinstance(old, dict) else {}
        if names.allow or names.protected or kept:
            nodes[node_id] = {**kept, **block}
        else:
            nodes.pop(node_id, None)
        data["nodes"] = nodes
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, data)
    return _parse(data)
