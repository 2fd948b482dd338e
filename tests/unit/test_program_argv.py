"""How the program starts itself again: frozen, one executable; from source, python -m mirbadllm."""

from __future__ import annotations

import sys

from agent.api.program import program_argv


def test_from_source_it_is_this_python_with_the_launcher_module() -> None:
    assert program_argv("agent", "--port", "0", frozen=False) == [sys.executable, "-m", "mirbadllm", "agent",
                                                                  "--port", "0"]


def test_frozen_it_is_the_executable_and_the_subcommand() -> None:
    assert program_argv("daemon", "--home", "/h", frozen=True, executable="/opt/mirbadllm/mirbadllm") == [
        "/opt/mirbadllm/mirbadllm", "daemon", "--home", "/h"]


def test_the_local_agent_and_the_app_daemon_use_it() -> None:
    from pathlib import Path

    from app.bootstrap import daemon_command
    from daemon.nodes.local_agent import LocalAgentProcess

    assert daemon_command(Path("/h"))[:4] == [sys.executable, "-m", "mirbadllm", "daemon"]
    agent = LocalAgentProcess.__new__(LocalAgentProcess)
    agent.home, agent.port, agent._telemetry_interval_s, agent._llama_server = Path("/a"), 1, 2.0, None
    agent._first_port = None
    assert agent.argv()[:4] == [sys.executable, "-m", "mirbadllm", "agent"]


def test_the_local_agent_gets_the_configured_first_runtime_port() -> None:
    from pathlib import Path

    from daemon.nodes.local_agent import LocalAgentProcess

    agent = LocalAgentProcess(Path("/a"), Path("/a/agent.log"), None, 2.0, first_port=24000)
    assert agent.argv()[-2:] == ["--first-port", "24000"]
    assert "--first-port" not in LocalAgentProcess(Path("/a"), Path("/a/agent.log"), None).argv()
