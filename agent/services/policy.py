"""What the daemon may do to the node's services: a deny list compiled in, a whitelist, protected names.

In order, each checked here on the agent whatever the daemon or the app already checked:

1. Deny list (``DENY_PATTERNS``, case-insensitive globs over normalised names): remote access, the
   bus and init, login managers and sessions, networking and firewalls, the OS's core services, and
   MirbadLLM's own agent and daemon (plus the unit this agent runs in, read from its cgroup, and the
   launchd label it runs under). Every name of a service is checked: its id and each alias systemd
   reports (``display-manager.service`` is an alias of ``gdm3.service``), and the name asked for.
   The agent's ``services.json`` may add patterns (``deny``); nothing anyone sends removes one.
2. Whitelist: only names listed in the agent's ``services.json`` (``allow``) or sent by the daemon
   with the request are ever started, stopped or restarted. Exact names, normalised.
3. Protected (``PROTECTED_PATTERNS`` plus ``protected`` in the file and ``protect`` from the daemon):
   an action must carry the service's name, typed, as ``confirm``.

Docker and containerd are protected, not denied: the vLLM runtime runs in Docker and restarting it
is a real repair (after installing the NVIDIA container toolkit), but it stops every container on
the node, so it takes the typed name. The NVIDIA persistence and fabric managers likewise.

Names are normalised by ``normalise``: trimmed, lower-case, without systemd's ``.service`` suffix.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.api.service_names import (
    DENY_PATTERNS,
    PROTECTED_PATTERNS,
    deny_match,
    normalise,
    valid_service_name,
)
from agent.api.services import (
    CONFIRM_REQUIRED,
    DENIED,
    INVALID_NAME,
    NOT_WHITELISTED,
    ServiceAction,
    ServiceInfo,
)
from agent.problems import AgentProblem

_LOGGER = logging.getLogger(__name__)


# The names' form, the deny list and the protected patterns are contracts (agent.api.service_names):
# the daemon refuses a whitelist entry with the same list before it is ever sent.


class ServiceRefused(AgentProblem):
    status = 403
    code = DENIED


def valid_name(name: str) -> str:
    """``name`` when it is one a service manager could use, else 422."""
    if not valid_service_name(name):
        raise ServiceRefused(f"{name[:80]!r} is not a service name", status=422, code=INVALID_NAME)
    return name


@dataclass(frozen=True)
class PolicyFile:
    """The agent's ``services.json``: ``{"allow": [...], "protected": [...], "deny": [...]}``."""

    allow: frozenset[str] = frozenset()
    protected: frozenset[str] = frozenset()
    deny: tuple[str, ...] = ()
    error: str | None = None  # a file that could not be read: nothing is whitelisted from it


def read_policy_file(path: Path) -> PolicyFile:
    if not path.exists():
        return PolicyFile()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        lists = {}
        for key in ("allow", "protected", "deny"):
            value = data.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TypeError(f"'{key}' is not a list of names")
            lists[key] = [v for v in value if v.strip()]
    except (OSError, ValueError, TypeError) as exc:
        _LOGGER.warning("services policy %s is unreadable, nothing is whitelisted from it: %s", path, exc)
        return PolicyFile(error=f"{path.name} is unreadable ({exc}); nothing is whitelisted from it")
    return PolicyFile(frozenset(normalise(n) for n in lists["allow"]),
                      frozenset(normalise(n) for n in lists["protected"]),
                      tuple(normalise(n) for n in lists["deny"]))


def own_service_names(cgroup_file: Path = Path("/proc/self/cgroup"),
                      environ: dict[str, str] | None = None) -> list[str]:
    """The names this agent runs under: its systemd unit (the innermost ``.service`` of its cgroup)
    and its launchd label (``XPC_SERVICE_NAME``). Denied whatever they are called."""
    names: list[str] = []
    try:
        for line in cgroup_file.read_text(encoding="utf-8").splitlines():
            units = [part for part in line.rsplit(":", 1)[-1].split("/") if part.endswith(".service")]
            if units:
                names.append(units[-1])
    except OSError:
        pass
    label = (environ if environ is not None else dict(os.environ)).get("XPC_SERVICE_NAME", "")
    if label and label != "0":
        names.append(label)
    return list(dict.fromkeys(names))


@dataclass
class ServicePolicy:
    file: PolicyFile = field(default_factory=PolicyFile)
    own_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        denied = [n for n in self.file.allow if self._deny_match([n])]
        for name in denied:
            _LOGGER.warning("services policy: %s is on the deny list; its whitelist entry is ignored", name)

    @property
    def deny_patterns(self) -> list[str]:
        return [*DENY_PATTERNS, *self.file.deny, *(normalise(n) for n in self.own_names)]

    @property
    def protected_patterns(self) -> list[str]:
        return [*PROTECTED_PATTERNS, *sorted(self.file.protected)]

    def _deny_match(self, names: list[str]) -> str | None:
        return deny_match(names, self.deny_patterns)

    def judge(self, info: ServiceInfo, allow: Sequence[str] = (), protect: Sequence[str] = (),
              asked: str | None = None) -> ServiceInfo:
        """``info`` with ``whitelisted``, ``protected`` and ``denied_by`` filled for this request."""
        names = [info.name, *info.aliases, *([asked] if asked else [])]
        keys = {normalise(n) for n in names}
        allowed = self.file.allow | {normalise(n) for n in allow}
        protected = self.file.protected | {normalise(n) for n in protect}
        return info.model_copy(update={
            "denied_by": self._deny_match(names),
            "whitelisted": bool(keys & allowed),
            "protected": bool(keys & protected) or any(fnmatch.fnmatchcase(k, p) for k in keys
                                                       for p in PROTECTED_PATTERNS)})

    def check(self, judged: ServiceInfo, action: ServiceAction, asked: str, confirm: str | None) -> None:
        """Raise ``ServiceRefused`` unless ``action`` may run on the service ``judged`` (from ``judge``)."""
        if judged.denied_by is not None:
            raise ServiceRefused(f"{judged.name} is a system service MirbadLLM never manages "
                                 f"(deny list: {judged.denied_by})", code=DENIED,
                                 details={"pattern": judged.denied_by})
        if not judged.whitelisted:
            raise ServiceRefused(f"{judged.name} is not on this node's services whitelist", code=NOT_WHITELISTED)
        if judged.protected:
            typed = normalise(confirm or "")
            if not typed or typed not in {normalise(n) for n in (judged.name, *judged.aliases, asked)}:
                raise ServiceRefused(f"{judged.name} is protected: type its name to {action} it",
                                     code=CONFIRM_REQUIRED, details={"name": judged.name})
