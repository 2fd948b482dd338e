"""The daemon's whitelist of host services, sent to the agents with every request.

``services.json`` in the daemon's home, read at each request (an edit needs no restart)::

    {"allow": ["ollama", "nginx"], "protected": ["nginx"],
     "nodes": {"<node id>": {"allow": ["smartd"]}}}

It can only add names: the agent's compiled-in deny list refuses whatever is sent
(``agent.services.policy``). An unreadable file sends nothing (logged). Edited by hand or through
``/api/services/policy`` (``daemon.services.policy_api``, which refuses deny-listed names).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeServiceNames:
    allow: list[str]
    protect: list[str]


def _names(block: Any, key: str) -> list[str]:
    value = block.get(key, []) if isinstance(block, dict) else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"'{key}' is not a list of names")
    return [v for v in value if v.strip()]


def names_for(path: Path, node_id: str) -> NodeServiceNames:
    """The names the daemon whitelists and protects on ``node_id``."""
    if not path.exists():
        return NodeServiceNames([], [])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        node = (data.get("nodes") or {}).get(node_id, {})
        return NodeServiceNames(_names(data, "allow") + _names(node, "allow"),
                                _names(data, "protected") + _names(node, "protected"))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        _LOGGER.warning("%s is unreadable, no service names are sent: %s", path, exc)
        return NodeServiceNames([], [])
