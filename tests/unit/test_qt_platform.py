"""The Linux desktop prerequisites: which system packages Qt's platform plugin lacks, from ldd's text."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from app.qt_platform import (
    check_platform,
    display_answers,
    missing_libraries,
    plugin_path,
    probe_ldd,
)

LDD_XCB_MISSING = """\
\tlinux-vdso.so.1 (0x00007ffd1c5f2000)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/plugins/platforms/../../lib/libQt6XcbQpa.so.6 (0x00007fb1bd0b1000)
\tlibxkbcommon-x11.so.0 => not found
\tlibxcb-cursor.so.0 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb-util.so.1 => /lib/x86_64-linux-gnu/libxcb-util.so.1 (0x00007fb1bcfbf000)
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007fb1bcf34000)
"""
LDD_XCB_OK = """\
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007fb1bd0b1000)
\tlibxcb-cursor.so.0 => /lib/x86_64-linux-gnu/libxcb-cursor.so.0 (0x00007fb1bcfc7000)
"""
X11 = {"DISPLAY": ":0"}


def test_missing_sonames_are_read_from_ldd_once_each_in_order() -> None:
    assert missing_libraries(LDD_XCB_MISSING) == ("libxkbcommon-x11.so.0", "libxcb-cursor.so.0",
                                                  "libxcb-icccm.so.4", "libxcb-keysyms.so.1")
    assert missing_libraries("OSError: libxcb-icccm.so.4: cannot open shared object file: No such file") \
        == ("libxcb-icccm.so.4",)


def test_an_x11_session_missing_xcb_libraries_names_the_debian_and_fedora_packages() -> None:
    check = check_platform({"xcb": LDD_XCB_MISSING}, X11)
    assert not check.ok and check.plugin == "xcb"
    assert check.debian_packages == ("libxkbcommon-x11-0", "libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1")
    assert check.fedora_packages == ("libxkbcommon-x11", "xcb-util-cursor", "xcb-util-wm", "xcb-util-keysyms")
    message = check.message()
    assert "sudo apt install libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1" in message
    assert "sudo dnf install libxkbcommon-x11 xcb-util-cursor xcb-util-wm xcb-util-keysyms" in message


def test_complete_libraries_pass_and_non_desktop_plugins_are_not_checked() -> None:
    assert check_platform({"xcb": LDD_XCB_OK}, X11).ok
    assert check_platform({"xcb": LDD_XCB_MISSING}, {**X11, "QT_QPA_PLATFORM": "offscreen"}).ok
    assert check_platform({"xcb": LDD_XCB_MISSING}, X11, platform="darwin").ok


def test_qt_qpa_platform_xcb_is_checked_even_with_wayland_around() -> None:
    env = {"QT_QPA_PLATFORM": "xcb", "WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland", **X11}
    assert not check_platform({"xcb": LDD_XCB_MISSING, "wayland": ""}, env).ok


def test_a_wayland_session_falls_back_to_xcb_as_qt_does() -> None:
    env = {"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland", **X11}
    assert check_platform({"wayland": "", "xcb": LDD_XCB_MISSING}, env).ok  # wayland loads
    broken = "\tlibwayland-cursor.so.0 => not found\n"
    check = check_platform({"wayland": broken, "xcb": LDD_XCB_MISSING}, env)
    assert not check.ok and check.plugin == "wayland" and check.debian_packages == ("libwayland-cursor0",)


def test_no_display_is_said_plainly() -> None:
    check = check_platform({}, {})
    assert not check.ok and check.no_display and "No display found" in check.message()


def test_a_plugin_we_cannot_find_is_left_to_qt() -> None:
    assert check_platform({"xcb": None}, X11).ok


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux desktop plugins")
def test_this_machines_pyside6_agrees_with_loading_the_plugin_in_a_child() -> None:
    """The real PySide6: the verdict from ldd matches what a real load of libqxcb.so does."""
    path = plugin_path("xcb")
    assert path is not None and path.name == "libqxcb.so"
    text = probe_ldd("xcb")
    assert text and "libQt6XcbQpa.so.6" in text
    loads = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", str(path)],
                           capture_output=True, text=True, timeout=60, check=False).returncode == 0
    check = check_platform({"xcb": text}, {"DISPLAY": ":0"})
    assert check.ok == loads, check.message()
    if not loads:
        assert check.debian_packages and "sudo apt install" in check.message()


def test_a_display_nobody_answers_at_is_said_instead_of_qts_abort() -> None:
    check = check_platform({"xcb": LDD_XCB_OK}, {"DISPLAY": ":99"}, reachable={"xcb": False})
    assert not check.ok and "nothing answers at the display DISPLAY=:99" in check.message()
    assert check_platform({"xcb": LDD_XCB_OK}, {"DISPLAY": ":99"}, reachable={"xcb": None}).ok


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 sockets")
def test_an_x_server_is_found_by_its_socket_local_or_tcp() -> None:
    number = 4000 + os.getpid() % 1000
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(f"\0/tmp/.X11-unix/X{number}")  # Linux's abstract socket: no file, no permissions
    server.listen(1)
    try:
        assert display_answers("xcb", {"DISPLAY": f":{number}.0"}) is True
    finally:
        server.close()
    assert display_answers("xcb", {"DISPLAY": f":{number}"}) is False
    with socket.create_server(("127.0.0.1", 0)) as tcp:
        port = tcp.getsockname()[1]
        if port > 6000:
            assert display_answers("xcb", {"DISPLAY": f"127.0.0.1:{port - 6000}"}) is True
    assert display_answers("xcb", {"DISPLAY": "garbage"}) is None
