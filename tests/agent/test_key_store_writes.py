"""A private key is written 0600 through a temp file of its own, whatever is already beside it."""

from __future__ import annotations

import os
from pathlib import Path

from core.key_store import read_key, write_key
from daemon.pki import new_key


def test_a_leftover_temp_file_or_a_link_beside_the_key_changes_nothing(tmp_path: Path) -> None:
    key_path = tmp_path / "ca.key"
    wide = tmp_path / "ca.key.tmp"
    wide.write_text("left by something else")
    os.chmod(wide, 0o644)
    write_key(key_path, new_key())
    assert key_path.stat().st_mode & 0o777 == 0o600

    key_path.unlink()
    wide.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    os.chmod(elsewhere, 0o644)
    wide.symlink_to(elsewhere)  # a planted link where the old code wrote its temp file
    key = new_key()
    write_key(key_path, key)
    assert not key_path.is_symlink() and key_path.stat().st_mode & 0o777 == 0o600
    assert elsewhere.read_text() == ""  # the key did not go through the link
    assert read_key(key_path).private_numbers() == key.private_numbers()  # type: ignore[union-attr]
