"""The names of host services as MirbadLLM compares them, and the deny list compiled into every agent.

A contract, not policy code: the agent judges with it (``agent.services.policy``) and the daemon
refuses a whitelist entry with it before the entry is ever sent (``daemon.services.policy_api``),
so both say the same thing about the same name.

- ``normalise``: trimmed, lower-case, without systemd's ``.service`` suffix.
- ``valid_service_name``: a name a service manager could use (no ``/``, no leading ``-``).
- ``DENY_PATTERNS``: globs over normalised names that nothing anyone sends or writes can remove
  (every systemd unit that is not a ``.service`` among them).
- ``PROTECTED_PATTERNS``: globs whose services act only with their name typed.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable


def normalise(name: str) -> str:
    """The form names are compared in: trimmed, lower-case, no ``.service`` suffix."""
    return name.strip().lower().removesuffix(".service")


# MirbadLLM's own units and labels (agent.service.units spells them for the installers).
_OWN = ("mirbadllm-agent*", "mirbadllm-daemon*", "mirbadllm-hostd*", "com.mirbadllm.agent", "com.mirbadllm.*",
        "mirbadllmagent", "mirbadllm*")

DENY_PATTERNS: tuple[str, ...] = (
    # MirbadLLM itself: the agent (every OS's name for it) and the daemon.
    *_OWN,
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
    # systemd units that are no services: starting reboot.target or shutdown.target takes the node
    # down, stopping system.slice or a .mount strands it, ssh.socket starts ssh. Services only.
    "*.target", "*.slice", "*.scope", "*.mount", "*.automount", "*.swap", "*.device", "*.socket", "*.path",
    "*.timer", "*.snapshot",
    # Root shells and single-user modes (debug-shell.service: a root shell on tty9, no password).
    "debug-shell", "rescue", "emergency", "container-getty*", "console-shell",
)

PROTECTED_PATTERNS: tuple[str, ...] = (
    "docker*", "containerd*", "com.docker.*", "nvidia-persistenced*", "nvidia-fabricmanager*",
    "nvidia-dcgm*", "dcgm*",
)

# What a service manager calls a service: unit names (foo@bar.service, a\x2db.mount), launchd
# labels (com.example.job), Windows service names (which may hold spaces). Never a path or an
# option: no '/', and no leading '-'.
SERVICE_NAME = re.compile(r"[A-Za-z0-9_@.:+\\][A-Za-z0-9_@.:+\\ -]{0,254}")


def valid_service_name(name: str) -> bool:
    # "." and ".." are path segments, never names: in a URL they would climb out of /services/.
    return bool(SERVICE_NAME.fullmatch(name)) and name == name.strip() and name.strip(".") != ""


def deny_match(names: Iterable[str], patterns: Iterable[str] = DENY_PATTERNS) -> str | None:
    """The first deny pattern one of ``names`` (normalised) matches, else None."""
    listed = tuple(patterns)
    for name in names:
        key = normalise(name)
        for pattern in listed:
            if fnmatch.fnmatchcase(key, pattern):
                return pattern
    return None
