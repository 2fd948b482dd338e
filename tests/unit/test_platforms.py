"""What differs on Windows and macOS, run here: each OS choice is a pure function of the platform
(golden values per OS), and the OS calls go through seams that take hand-written fakes."""

from __future__ import annotations

import asyncio
import ntpath
import os
import signal
import socket
import stat
from pathlib import Path, PureWindowsPath
from typing import Any, Self

import pytest

from agent.main import install_stop_handlers as install_agent_stop_handlers
from agent.runtimes.catalog import RuntimeCatalog, built_llama_server
from agent.runtimes.llamacpp import child_env
from agent.runtimes.ports import port_is_free, probe_socket_options
from agent.runtimes.process import (
    CTRL_BREAK_HELPER,
    ProcessOps,
    RuntimeProcess,
    SpawnOptions,
    StopPlan,
    StopStep,
    ctrl_break_helper_argv,
    spawn_options,
    stop_plan,
)
from app import autostart
from core.json_store import write_atomic
from core.safe_names import commonpath_inside
from daemon.main import install_stop_handlers, loop_factory, stop_signal_names
from tests.fakes import fake_runtime_script

NOWHERE = "no-such-distribution"


# -- core/json_store.py: no os.fchmod on Windows ----------------------------------------------------

def test_atomic_write_sets_posix_mode_bits_and_leaves_windows_to_its_acls(tmp_path: Path) -> None:
    posix, windows = tmp_path / "posix.json", tmp_path / "windows.json"
    write_atomic(posix, b"{}\n", 0o644, platform="linux")
    write_atomic(windows, b"{}\n", 0o644, platform="win32")
    assert posix.read_bytes() == windows.read_bytes() == b"{}\n"
    assert stat.S_IMODE(posix.stat().st_mode) == 0o644
    # No mode call at all on Windows: the temp file keeps mkstemp's private 0600.
    assert stat.S_IMODE(windows.stat().st_mode) == 0o600


# -- daemon/main.py: Windows' event loop has no add_signal_handler -----------------------------------

class ProactorLikeLoop:
    """The two loop methods the daemon uses, as Windows' proactor loop answers them."""

    def __init__(self) -> None:
        self.soon: list[Any] = []

    def add_signal_handler(self, sig: int, callback: Any) -> None:
        raise NotImplementedError

    def call_soon_threadsafe(self, callback: Any) -> None:
        self.soon.append(callback)


def test_stop_signals_per_platform() -> None:
    assert stop_signal_names("linux") == ["SIGINT", "SIGTERM"]
    assert stop_signal_names("darwin") == ["SIGINT", "SIGTERM"]
    assert stop_signal_names("win32") == ["SIGINT", "SIGTERM", "SIGBREAK"]


def test_daemon_event_loop_is_uvloop_on_posix_and_asyncio_on_windows() -> None:
    assert loop_factory("win32") is None  # no uvloop build there: asyncio's proactor loop
    if os.name == "nt":
        return  # uvloop is not installed on Windows, so there is no POSIX loop to make here
    factory = loop_factory("linux")
    assert factory is not None  # uvloop is a dependency off Windows
    loop = factory()
    try:
        assert type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()


def test_without_loop_signal_handlers_a_signal_still_stops_the_daemon() -> None:
    loop, stopped = ProactorLikeLoop(), []
    installed: dict[int, Any] = {}
    how = install_stop_handlers(loop, lambda: stopped.append(True), platform="win32",  # type: ignore[arg-type]
                                set_handler=lambda sig, handler: installed.__setitem__(sig, handler))
    assert how == "signal"
    assert signal.SIGINT in installed and signal.SIGTERM in installed
    installed[signal.SIGINT](signal.SIGINT, None)  # Ctrl-C: handed to the loop, not a KeyboardInterrupt
    assert stopped == [] and len(loop.soon) == 1
    loop.soon[0]()
    assert stopped == [True]


def test_without_loop_signal_handlers_ctrl_c_still_stops_the_agent() -> None:
    loop, stopped = ProactorLikeLoop(), []
    installed: dict[int, Any] = {}
    install_agent_stop_handlers(loop, lambda: stopped.append(True),  # type: ignore[arg-type]
                                set_handler=lambda sig, handler: installed.__setitem__(sig, handler))
    assert signal.SIGINT in installed and signal.SIGTERM in installed
    installed[signal.SIGINT](signal.SIGINT, None)
    loop.soon[0]()
    assert stopped == [True]


async def test_on_posix_sigterm_reaches_the_loop_handler() -> None:
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    try:
        assert install_stop_handlers(loop, stop.set) == "loop"
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 10)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


# -- agent/runtimes/process.py: spawn and stop per OS ------------------------------------------------

def test_spawn_options_per_platform() -> None:
    posix = SpawnOptions(start_new_session=True)
    assert spawn_options("linux") == spawn_options("darwin") == posix
    assert posix.popen_kwargs() == {"start_new_session": True}
    windows = spawn_options("win32")
    # CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW | CREATE_BREAKAWAY_FROM_JOB, then without breakaway.
    assert windows == SpawnOptions(creationflags=0x09000200, fallback=SpawnOptions(creationflags=0x08000200))
    assert windows.popen_kwargs() == {"creationflags": 0x09000200}


def test_stop_plan_per_platform() -> None:
    posix = StopPlan(polite=StopStep("signal_group", 15), force=StopStep("signal_group", 9))
    assert stop_plan("linux") == stop_plan("darwin") == posix
    assert stop_plan("win32") == StopPlan(polite=StopStep("ctrl_break", 1), force=StopStep("kill_tree"))


def test_ctrl_break_helper_is_python_that_names_the_runtime() -> None:
    argv = ctrl_break_helper_argv(4242, python=r"C:\Py\python.exe")
    assert argv == [r"C:\Py\python.exe", "-c", CTRL_BREAK_HELPER, "4242"]
    compile(CTRL_BREAK_HELPER, "<ctrl-break helper>", "exec")


class AccessDenied(PermissionError):
    winerror = 5  # what CreateProcess says when the agent's job forbids breakaway


class RecordingPopen:
    """Stands in for subprocess.Popen: records each start; refuses the first when told to."""

    def __init__(self, refuse_first: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.refuse_first = refuse_first
        self.pid = os.getpid()  # a live process psutil can describe

    def __call__(self, argv: list[str], **kwargs: Any) -> RecordingPopen:
        self.calls.append(kwargs)
        if self.refuse_first and len(self.calls) == 1:
            raise AccessDenied(13, "Access is denied")
        return self


def test_windows_spawn_breaks_away_from_the_job_and_falls_back_inside_it(tmp_path: Path) -> None:
    popen = RecordingPopen(refuse_first=True)
    process = RuntimeProcess.spawn(["llama-server.exe"], {}, tmp_path / "x.log", tmp_path,
                                   platform="win32", popen=popen)  # type: ignore[arg-type]
    assert [call.get("creationflags") for call in popen.calls] == [0x09000200, 0x08000200]
    assert all("start_new_session" not in call for call in popen.calls)
    assert process.pid == os.getpid() and process.platform == "win32"


def test_posix_spawn_starts_a_new_session(tmp_path: Path) -> None:
    popen = RecordingPopen()
    RuntimeProcess.spawn(["llama-server"], {}, tmp_path / "x.log", tmp_path, platform="darwin",
                         popen=popen)  # type: ignore[arg-type]
    assert popen.calls[0]["start_new_session"] is True and "creationflags" not in popen.calls[0]


class FakeHandle:
    """The psutil.Process calls a stop makes, for a process that exits when told."""

    def __init__(self, pid: int) -> None:
        self.pid, self.alive = pid, True

    def is_running(self) -> bool:
        return self.alive

    def status(self) -> str:
        return "running"


class FakeOps(ProcessOps):
    """Records every stop step; the runtime obeys only the steps named in ``obeys``."""

    def __init__(self, handle: FakeHandle, obeys: set[str], delivers: bool = True) -> None:
        self.handle, self.obeys, self.delivers = handle, obeys, delivers
        self.calls: list[tuple[object, ...]] = []

    def _step(self, name: str, *args: object) -> bool:
        self.calls.append((name, *args))
        if name in self.obeys and self.delivers:
            self.handle.alive = False
        return self.delivers

    def signal_group(self, pid: int, sig: int) -> bool:
        return self._step(f"signal_group {sig}", pid)

    def ctrl_break(self, pid: int) -> bool:
        return self._step("ctrl_break", pid)

    def kill_tree(self, handle: Any) -> bool:
        self.calls.append(("kill_tree", handle.pid))
        handle.alive = False
        return True


def _process(platform: str, obeys: set[str], delivers: bool = True) -> tuple[RuntimeProcess, FakeOps]:
    handle = FakeHandle(4242)
    ops = FakeOps(handle, obeys, delivers)
    return RuntimeProcess(4242, 1.0, handle=handle, platform=platform, ops=ops), ops


async def test_windows_stop_is_ctrl_break_then_terminate_the_tree() -> None:
    process, ops = _process("win32", obeys=set())
    await asyncio.wait_for(process.terminate(timeout=0.05), 10)
    assert ops.calls == [("ctrl_break", 4242), ("kill_tree", 4242)]
    assert process.poll()


async def test_windows_runtime_that_heeds_ctrl_break_is_not_killed() -> None:
    process, ops = _process("win32", obeys={"ctrl_break"})
    await process.terminate(timeout=30)
    assert ops.calls == [("ctrl_break", 4242)]


async def test_windows_ctrl_break_that_cannot_be_delivered_kills_at_once() -> None:
    process, ops = _process("win32", obeys=set(), delivers=False)
    await asyncio.wait_for(process.terminate(timeout=3600), 10)  # no hour-long wait for nothing
    assert ops.calls == [("ctrl_break", 4242), ("kill_tree", 4242)]


async def test_posix_stop_is_sigterm_then_sigkill_to_the_group() -> None:
    process, ops = _process("linux", obeys={"signal_group 9"})
    await process.terminate(timeout=0.05)
    assert ops.calls == [("signal_group 15", 4242), ("signal_group 9", 4242)]


# -- agent/runtimes/llamacpp.py: the child's environment and the free-port probe --------------------

WINDOWS_ENVIRON = {
    "Path": r"C:\Windows\system32;C:\Windows", "SystemRoot": r"C:\Windows", "SystemDrive": "C:",
    "windir": r"C:\Windows", "TEMP": r"C:\Users\me\AppData\Local\Temp", "TMP": r"C:\Users\me\AppData\Local\Temp",
    "USERPROFILE": r"C:\Users\me", "NUMBER_OF_PROCESSORS": "8", "PATHEXT": ".COM;.EXE;.BAT;.CMD",
    "GITHUB_TOKEN": "not-for-runtimes", "PYTHONPATH": r"C:\evil",
}


def test_windows_child_env_keeps_what_windows_processes_need() -> None:
    env = child_env({"OMP_NUM_THREADS": "2"}, "k", Path(r"C:\llama\bin"), WINDOWS_ENVIRON, platform="win32")
    assert env == {
        "PATH": r"C:\llama\bin;C:\Windows\system32;C:\Windows", "PATHEXT": ".COM;.EXE;.BAT;.CMD",
        "SYSTEMROOT": r"C:\Windows", "SYSTEMDRIVE": "C:", "WINDIR": r"C:\Windows",
        "TEMP": r"C:\Users\me\AppData\Local\Temp", "TMP": r"C:\Users\me\AppData\Local\Temp",
        "USERPROFILE": r"C:\Users\me", "NUMBER_OF_PROCESSORS": "8",
        "OMP_NUM_THREADS": "2", "LLAMA_API_KEY": "k",
    }


def test_posix_child_env_is_unchanged_by_the_platform_parameter() -> None:
    agent_env = {"PATH": "/usr/bin", "HOME": "/home/me", "SECRET": "x", "SystemRoot": "C:"}
    assert child_env({}, "k", Path("/opt/llama"), agent_env, platform="darwin") == {
        "PATH": "/usr/bin", "HOME": "/home/me", "LD_LIBRARY_PATH": "/opt/llama",
        "DYLD_LIBRARY_PATH": "/opt/llama", "LLAMA_API_KEY": "k"}


def test_free_port_probe_socket_options_per_platform() -> None:
    assert probe_socket_options("linux") == probe_socket_options("darwin") == [("SOL_SOCKET", "SO_REUSEADDR", 1)]
    assert probe_socket_options("win32") == [("SOL_SOCKET", "SO_EXCLUSIVEADDRUSE", 1)]


class RecordingSocket:
    def __init__(self, *args: object) -> None:
        self.options: list[tuple[int, int, int]] = []
        self.bound: tuple[str, int] | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self.options.append((level, option, value))

    def bind(self, address: tuple[str, int]) -> None:
        self.bound = address


def test_windows_free_port_probe_binds_exclusively_never_with_reuseaddr() -> None:
    made: list[RecordingSocket] = []

    def make(*args: object) -> RecordingSocket:
        made.append(RecordingSocket(*args))
        return made[-1]

    assert port_is_free(18080, platform="win32", make_socket=make)  # type: ignore[arg-type]
    exclusive = getattr(socket, "SO_EXCLUSIVEADDRUSE", ~4)
    assert made[0].options == [(socket.SOL_SOCKET, exclusive, 1)]
    assert made[0].bound == ("127.0.0.1", 18080)


def test_a_listening_port_is_not_free_here() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert not port_is_free(listener.getsockname()[1])


# -- core/safe_names.py: commonpath across Windows drives --------------------------------------

def test_ntpath_commonpath_itself_raises_across_drives() -> None:
    with pytest.raises(ValueError):
        ntpath.commonpath([r"C:\models", r"D:\models\x.gguf"])


@pytest.mark.parametrize(("folder", "path", "inside"), [
    (r"C:\models", r"D:\models\x.gguf", False),           # another drive: outside, no ValueError
    (r"C:\models", r"\\server\share\x.gguf", False),       # a UNC share
    (r"C:\models", r"models\x.gguf", False),               # relative
    (r"C:\models", r"c:\MODELS\qwen\x.gguf", True),        # Windows compares case-insensitively
    (r"C:\models", r"C:\models-old\x.gguf", False),
])
def test_containment_of_windows_paths_never_crashes(folder: str, path: str, inside: bool) -> None:
    assert commonpath_inside(PureWindowsPath(folder), PureWindowsPath(path), ntpath) is inside


def test_containment_of_posix_paths() -> None:
    assert commonpath_inside("/models", "/models/a/x.gguf")
    assert not commonpath_inside("/models", "/models-old/x.gguf")
    assert not commonpath_inside("/models", "relative/x.gguf")


# -- agent/runtimes/catalog.py: llama-server.exe on Windows ------------------------------------------

def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"MZ")
    path.chmod(0o755)  # os.access(X_OK) is always true on Windows; here it must be set
    return path


def test_windows_path_lookup_finds_llama_server_exe(tmp_path: Path) -> None:
    _exe(tmp_path / "bin" / "llama-server")  # a POSIX build's name is not a Windows program
    exe_path = _exe(tmp_path / "bin" / "llama-server.exe")
    (tmp_path / "bin" / "ggml-base.dll").write_bytes(b"MZ")
    catalog = RuntimeCatalog(environ={"PATH": f"{tmp_path / 'empty'};{tmp_path / 'bin'}"}, distribution=NOWHERE,
                             runtime_roots=[], sys_platform="win32")
    exe = catalog.llama_server()
    assert exe is not None and (exe.path, exe.source, exe.library_dir) == (exe_path, "path", exe_path.parent)


def test_windows_configured_folder_or_extensionless_path_means_the_exe(tmp_path: Path) -> None:
    exe_path = _exe(tmp_path / "llama" / "llama-server.exe")
    for configured in (tmp_path / "llama", tmp_path / "llama" / "llama-server"):
        exe = RuntimeCatalog(configured, environ={"PATH": ""}, distribution=NOWHERE, runtime_roots=[],
                             sys_platform="win32").llama_server()
        assert exe is not None and (exe.path, exe.source) == (exe_path, "configured")


def test_windows_portable_build_defaults_to_llama_server_exe(tmp_path: Path) -> None:
    folder = tmp_path / "llamacpp-1.0-abc"
    exe_path = _exe(folder / "bin" / "llama-server.exe")
    (folder / "runtime.json").write_text('{"runtime": "llamacpp", "system": "Windows", "machine": "AMD64", '
                                         '"version": "1.0"}')
    exe = built_llama_server([tmp_path], system="Windows", machine="x86_64", sys_platform="win32")
    assert exe is not None and exe.path == exe_path.resolve()
    assert built_llama_server([tmp_path], system="Windows", machine="x86_64", sys_platform="linux") is None


# -- tests/fakes: the fake runtime's wrapper on Windows ----------------------------------------------

def test_fake_runtime_wrapper_for_windows_is_a_cmd_file() -> None:
    text = fake_runtime_script({"load_seconds": 2, "stall": True, "exit_code": None, "fail_when": "50%"},
                               platform="win32", python=r"C:\Py\python.exe",
                               fake=PureWindowsPath(r"C:\src\tests\fakes\fake_llama_server.py"))
    assert text == ("@echo off\r\n"
                    'set "FAKE_FAIL_WHEN=50%%"\r\n'
                    'set "FAKE_LOAD_SECONDS=2"\r\n'
                    'set "FAKE_STALL=1"\r\n'
                    r'"C:\Py\python.exe" "C:\src\tests\fakes\fake_llama_server.py" %*' "\r\n"
                    "exit /b %ERRORLEVEL%\r\n")


def test_fake_runtime_wrapper_elsewhere_is_a_shell_script() -> None:
    text = fake_runtime_script({"tokens": 5, "ignore_sigterm": False}, platform="darwin", python="/py",
                               fake=Path("/src/fake llama.py"))
    assert text == "#!/bin/sh\nexport FAKE_TOKENS=5\nexec /py '/src/fake llama.py' \"$@\"\n"


# -- app/autostart.py: the Windows Run key -----------------------------------------------------------

class FakeWinreg:
    """The winreg calls autostart makes, over a dict of keys: (hive, path) -> {name: (type, value)}."""

    HKEY_CURRENT_USER = "HKCU"
    REG_SZ = 1

    class Key:
        def __init__(self, values: dict[str, tuple[int, str]]) -> None:
            self.values = values

        def __enter__(self) -> FakeWinreg.Key:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    def __init__(self) -> None:
        self.keys: dict[tuple[str, str], dict[str, tuple[int, str]]] = {}

    def OpenKey(self, hive: str, path: str) -> Key:  # winreg's names
        if (hive, path) not in self.keys:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return self.Key(self.keys[(hive, path)])

    def CreateKey(self, hive: str, path: str) -> Key:
        return self.Key(self.keys.setdefault((hive, path), {}))

    def QueryValueEx(self, key: Key, name: str) -> tuple[str, int]:
        if name not in key.values:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        kind, value = key.values[name]
        return value, kind

    def SetValueEx(self, key: Key, name: str, reserved: int, kind: int, value: str) -> None:
        key.values[name] = (kind, value)

    def DeleteValue(self, key: Key, name: str) -> None:
        if name not in key.values:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        del key.values[name]


def test_windows_start_at_login_writes_and_removes_the_run_value() -> None:
    registry = FakeWinreg()
    run_key = ("HKCU", r"Software\Microsoft\Windows\CurrentVersion\Run")
    assert not autostart.is_enabled("win32", registry=registry)
    command = [r"C:\Py\pythonw.exe", "-m", "mirbadllm", "--minimized", "--home", r"C:\Users\me\My Models"]
    autostart.set_enabled(True, command, platform="win32", registry=registry)
    assert registry.keys[run_key] == {
        "MirbadLLM": (1, r'C:\Py\pythonw.exe -m mirbadllm --minimized --home "C:\Users\me\My Models"')}
    assert autostart.is_enabled("win32", registry=registry)
    autostart.set_enabled(False, command, platform="win32", registry=registry)
    assert registry.keys[run_key] == {}
    assert not autostart.is_enabled("win32", registry=registry)
    autostart.set_enabled(False, command, platform="win32", registry=registry)  # already off: no error

