"""``mirbadllm agent services polkit-rule``: the polkit rule that lets the agent's own user start, stop
and restart the whitelisted systemd units, and nothing else.

The agent's unit runs as its unprivileged user (``mirbadllm-agent``, created by the Debian
package), so systemd asks polkit before it starts a unit for it; without a rule the answer is
"Interactive authentication required" (502 ``service_action_failed``). This prints a rule for
``/etc/polkit-1/rules.d/`` that a root installs by hand: it grants exactly
``org.freedesktop.systemd1.manage-units`` with the verbs start, stop and restart, for the unit
names listed, to that user. Opt-in: nothing installs it, and it does not follow the whitelist;
print it again after the whitelist changes.

The names are the agent's own ``services.json`` (``allow``) plus those on the command line (the
daemon's whitelist: ``mirbadllm ctl services policy``). A name on the deny list is left out (said
on stderr): it is never managed, so it is never granted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from agent.api.service_names import deny_match, normalise, valid_service_name
from agent.paths import AgentPaths
from agent.service.units import LINUX_AGENT_HOME, LINUX_AGENT_USER
from agent.services.policy import read_policy_file

RULE_FILE = "/etc/polkit-1/rules.d/50-mirbadllm-agent-services.rules"
VERBS = ("start", "stop", "restart")


def unit_name(name: str) -> str:
    """The full unit name polkit is asked about (``nginx`` -> ``nginx.service``; other unit types
    are on the deny list)."""
    return f"{normalise(name)}.service"


def granted_units(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """(units to grant, sorted and unique; names left out with why)."""
    units: set[str] = set()
    left_out: list[str] = []
    for name in names:
        if not name.strip():
            continue
        if not valid_service_name(name.strip()):
            left_out.append(f"{name!r}: not a service name")
        elif (pattern := deny_match([name])) is not None:
            left_out.append(f"{normalise(name)}: on the deny list ({pattern}), never managed")
        else:
            units.add(unit_name(name))
    return sorted(units), left_out


def polkit_rule(units: list[str], user: str = LINUX_AGENT_USER) -> str:
    """The rule's text: ``units`` (full names) for ``user``, start/stop/restart only."""
    listed = ",\n".join(f"        {json.dumps(u)}" for u in units)
    return f"""// MirbadLLM: lets the agent's user ({user}) start, stop and restart these systemd units, no others.
// Printed by `mirbadllm agent services polkit-rule`; install it as root in
// {RULE_FILE}
// and print it again when the services whitelist changes.
polkit.addRule(function(action, subject) {{
    if (action.id != "org.freedesktop.systemd1.manage-units" || subject.user != {json.dumps(user)}) {{
        return polkit.Result.NOT_HANDLED;
    }}
    var units = [
{listed}
    ];
    var verbs = [{", ".join(json.dumps(v) for v in VERBS)}];
    if (units.indexOf(action.lookup("unit")) >= 0 && verbs.indexOf(action.lookup("verb")) >= 0) {{
        return polkit.Result.YES;
    }}
    return polkit.Result.NOT_HANDLED;
}});
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mirbadllm agent services polkit-rule",
                                     description="Print the polkit rule for the whitelisted units (root installs it).")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="more units to grant (e.g. the daemon's whitelist: mirbadllm ctl services policy)")
    parser.add_argument("--home", type=Path, default=Path(LINUX_AGENT_HOME),
                        help=f"the agent's data directory, where its services.json is (default {LINUX_AGENT_HOME})")
    parser.add_argument("--user", default=LINUX_AGENT_USER, help="the user the agent runs as")
    args = parser.parse_args(argv)
    policy = read_policy_file(AgentPaths(args.home.expanduser()).services_policy_file)
    if policy.error:
        print(f"note: {policy.error}", file=sys.stderr)
    units, left_out = granted_units([*sorted(policy.allow), *args.names])
    for why in left_out:
        print(f"left out {why}", file=sys.stderr)
    if not units:
        print("No unit to grant: whitelist some in the agent's services.json (allow) or name them here.",
              file=sys.stderr)
        return 1
    sys.stdout.write(polkit_rule(units, args.user))
    return 0
