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
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.api.services import (
    CONFIRM_REQUIRED,
    DENIED,
    INVALID_NAME,
    NOT_WHITELISTED,
    ServiceAction,
    ServiceInfo,
)
from agent.problems import AgentProblem
from agent.service.units import (
    LINUX_AGENT_UNIT,
    LINUX_DAEMON_UNIT,
    MACOS_LABEL,
    WINDOWS_SERVICE,
)

_LOGGER = logging.getLogger(__name__)


def normalise(name: str) -> str:
    """The form names are compared in: trimmed, lower-case, no ``.service`` suffix."""
    text = name.strip().lower()
    return text.removesuffix(".service")


def _stem(unit: str) -> str:
    return normalise(unit)


DENY_PATTERNS: tuple[str, ...] = (
    # MirbadLLM itself: the agent (every OS's name for it) and the daemon.
    f"{_stem(LINUX_AGENT_UNIT)}*", f"{_stem(LINUX_DAEMON_UNIT)}*", "mirbadllm-hostd*", MACOS_LABEL.lower(), "com.mirbadllm.*",
    WINDOWS_SERVICE.lower(), "mirbadllm*",
    # Remote access: losing it strands the node.
    "ssh*", "openssh*", "com.openssh.*", "dropbear*", "xrdp*", "termservice", "umrdpservice", "winrm",
    "tailscale*", "zerotier*", "wireguard*", "wg-quick@*",
    # The bus, init and the service managers themselves.
    "dbus*", "systemd-*", "init", "init.scope", "-.slice", "polkit*", "udev*", "com.apple.*",
    # Login managers and sessions.
    "gdm*", "lightdm*", "sddm*", "xdm", "display-manager", "getty*", "serial-getty*", "autovt*",
    "console-getty", "user@*", "user-runtime-dir@*", "accounts-daemon", "loginwindow",
    # Networking and firewalls.
    "networkmanager*", "network-manager*", "networking", "network", "networkd-dispatcher", "wpa_supplicant*",
    "dhcpcd*", "dhclient*", "isc-dhcp-*", "iwd", "connman*", "netplan*", "avahi-daemon*", "firewalld", "ufw",
    "nftables", "iptables", "ip6tables", "netfilter-persistent", "resolvconf",
    # Core OS services on Windows.
    "rpcss", "rpceptmapper", "dcomlaunch", "lsm", "samss", "eventlog", "winmgmt", "plugplay", "power",
    "profsvc", "dhcp", "dnscache", "nsi", "netman", "nlasvc", "bfe", "mpssvc", "lanmanworkstation",
    "lanmanserver", "cryptsvc", "wuauserv", "trustedinstaller", "windefend", "sense",
    # Storage, audit and security.
    "lvm2*", "multipathd*", "mdmonitor*", "iscsid*", "auditd", "apparmor", "rsyslog", "syslog", "cron",
    "crond", "chrony*", "unattended-upgrades",
)

PROTECTED_PATTERNS: tuple[str, ...] = (
    "docker*", "containerd*", "com.docker.*", "nvidia-persistenced*", "nvidia-fabricmanager*",
    "nvidia-dcgm*", "dcgm*",
)

# What a service manager calls a service: unit names (foo@bar.service, a\x2db.mount), launchd
# labels (com.example.job), Windows service names (which may hold spaces). Never a path or an
# option: no '/', and no leading '-'.
_NAME = re.compile(r"[A-Za-z0-9_@.:+\\][A-Za-z0-9_@.:+\\ -]{0,254}")


class ServiceRefused(AgentProblem):
    status = 403
    code = DENIED


def valid_name(name: str) -> str:
    """``name`` when it is one a service manager could use, else 422."""
    if not _NAME.fullmatch(name) or name != name.strip():
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
        for name in names:
            key = normalise(name)
            for pattern in self.deny_patterns:
                if fnmatch.fnmatchcase(key, pattern):
                    return pattern
        return None

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
