"""Service names as an attacker (or a compromised daemon) sends them to an agent's real mutual-TLS
API, each whitelisted by the request itself: units that are no services (reboot.target takes the
node down, system.slice or a .mount strands it, ssh.socket starts ssh), template instances of
denied units, upper case, look-alike letters, paths. Every one is refused before the OS is asked."""

from __future__ import annotations

from typing import Any

from agent.api.service_names import deny_match
from tests.agent.test_host_services import _refused, node  # noqa: F401 - the fixture
from tests.fakes.services import FakeUnit, default_units

DENIED_NAMES = [
    "reboot.target", "poweroff.target", "shutdown.target", "rescue.target", "suspend.target",
    "multi-user.target", "system.slice", "user.slice", "home.mount", "swapfile.swap",
    "ssh.socket", "sshd.socket", "ssh@.service", "sshd@1.service", "sshd@0-10.0.0.1:22.service",
    "SSH.SERVICE", "Sshd", "session-1.scope", "debug-shell", "debug-shell.service", "emergency.service",
    "rescue", "apt-daily.timer", "DBUS.Service", "systemd-logind", "NetworkManager",
]


async def test_units_that_are_no_services_and_denied_names_in_disguise_are_refused(node: Any) -> None:  # noqa: F811
    units = [*default_units(), FakeUnit("debug-shell.service", "Early root shell on /dev/tty9"),
             FakeUnit("emergency.service", "Emergency shell"), FakeUnit("rescue.service", "Rescue shell")]
    n = await node({"allow": DENIED_NAMES}, units=units)
    for name in DENIED_NAMES:
        for action in ("start", "stop", "restart"):
            refused = await _refused(n.client, name, action, allow=DENIED_NAMES, confirm=name)
            assert (refused.status, refused.code) == (403, "service_denied"), (name, action, refused)
    for name in ("ѕsh", "ssh\u200b", "-.mount", "../ssh", "/lib/systemd/system/ssh.service", "ssh*", "ss?", "[s]sh"):
        refused = await _refused(n.client, name, "stop", allow=[name])  # look-alikes, paths, globs
        assert (refused.status, refused.code) == (422, "service_invalid_name"), name
    assert n.fake.calls == []  # nothing refused reached the service manager
    assert not n.fake.units["debug-shell.service"].running


def test_a_plain_service_is_still_no_denied_name() -> None:
    for name in ("nginx", "ollama.service", "postgresql@16-main.service", "com.example.job", "Spooler Helper"):
        assert deny_match([name]) is None, name


async def test_dot_segments_never_leave_as_a_service_name(node: Any) -> None:  # noqa: F811
    """``..`` as a name would turn /services/../stop into the agent's /stop: the name is no service
    name, and no client of ours sends a path with a dot segment at all."""
    import pytest

    from agent.api.client import AgentError
    from agent.api.service_names import valid_service_name
    from agent.api.services import ServiceActionRequest

    assert not any(valid_service_name(name) for name in (".", "..", "...", " .."))
    n = await node({"allow": [".."]})
    for name in ("..", "."):
        with pytest.raises(AgentError) as refused:
            await n.client.service_action(name, "stop", ServiceActionRequest(allow=[name], confirm=name))
        assert (refused.value.status, refused.value.code) == (400, "invalid_path")
    assert n.fake.calls == []
