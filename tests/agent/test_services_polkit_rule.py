"""``mirbadllm agent services polkit-rule``: the rule printed for the whitelist, exactly (a root
installs it as is), with what the deny list takes out said and never granted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.main import main
from agent.services.polkit import granted_units, unit_name

GOLDEN = """\
// MirbadLLM: lets the agent's user (mirbadllm-agent) start, stop and restart these systemd units, no others.
// Printed by `mirbadllm agent services polkit-rule`; install it as root in
// /etc/polkit-1/rules.d/50-mirbadllm-agent-services.rules
// and print it again when the services whitelist changes.
polkit.addRule(function(action, subject) {
    if (action.id != "org.freedesktop.systemd1.manage-units" || subject.user != "mirbadllm-agent") {
        return polkit.Result.NOT_HANDLED;
    }
    var units = [
        "nginx.service",
        "ollama.service",
        "open-webui.service",
        "smartd.service"
    ];
    var verbs = ["start", "stop", "restart"];
    if (units.indexOf(action.lookup("unit")) >= 0 && verbs.indexOf(action.lookup("verb")) >= 0) {
        return polkit.Result.YES;
    }
    return polkit.Result.NOT_HANDLED;
});
"""


def test_the_rule_grants_exactly_the_whitelisted_units_to_the_agents_user(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "services.json").write_text(json.dumps({"allow": ["Ollama.service", "ssh", "nginx"]}))
    assert main(["services", "polkit-rule", "--home", str(tmp_path), "open-webui", "nginx.service",
                 "smartd", "reboot.target", "dbus", "../x"]) == 0
    out = capsys.readouterr()
    assert out.out == GOLDEN
    assert "left out ssh: on the deny list (ssh*), never managed" in out.err
    assert "left out dbus: on the deny list (dbus*)" in out.err and "'../x': not a service name" in out.err
    assert "left out reboot.target: on the deny list (*.target)" in out.err


def test_nothing_to_grant_prints_no_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["services", "polkit-rule", "--home", str(tmp_path), "sshd"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and "No unit to grant" in out.err


def test_unit_names_are_the_full_names_systemd_asks_polkit_about() -> None:
    assert [unit_name(n) for n in ("nginx", "Nginx.service", "foo@bar")] == [
        "nginx.service", "nginx.service", "foo@bar.service"]
    assert granted_units(["mirbadllm-agent", "mirbadllm-daemon.service", "com.mirbadllm.agent"])[0] == []
