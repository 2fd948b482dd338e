"""`make system-deps`: on Debian 12 the Vulkan tests need Mesa from bookworm-backports (22.3's lavapipe
crashes at llama.cpp's first computation), and the Vulkan build's tools by their package names."""

from __future__ import annotations

from pathlib import Path

from installers import llamacpp_runtime, system_deps


def test_mesa_older_than_24_is_taken_from_backports_and_the_version_is_read_as_dpkg_writes_it() -> None:
    assert system_deps.mesa_major("25.0.7-2~bpo12+1") == 25
    assert system_deps.mesa_major("1:22.3.6-1+deb12u1") == 22
    assert system_deps.mesa_major(None) == system_deps.mesa_major("unknown") == 0
    assert system_deps.mesa_major("22.3.6-1+deb12u1") < system_deps.MESA_MIN_MAJOR <= 25


def test_the_codename_decides_the_backports_source(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n')
    assert system_deps.os_codename(release) == "bookworm"
    assert system_deps.os_codename(tmp_path / "missing") == ""
    assert "Suites: bookworm-backports" in system_deps.BACKPORTS_SOURCE


def test_the_packages_are_the_ones_the_vulkan_build_names_when_missing() -> None:
    named = {package for _what, package in llamacpp_runtime.VULKAN_DEPENDENCIES}
    assert named == set(system_deps.VULKAN_BUILD_PACKAGES) and named <= set(system_deps.PACKAGES)
    assert {"mesa-vulkan-drivers", "ninja-build", "docker.io"} <= set(system_deps.PACKAGES)
