"""Keychains of the tests' own: keyring backends (the real ``keyring.backend.KeyringBackend`` API)
that keep secrets in memory, or refuse. Installed with ``keyring.set_keyring`` by the ``keychain``
fixture of tests/conftest.py, which also sets ``MIRBADLLM_KEYRING=os`` for the test."""

from __future__ import annotations

from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked, PasswordDeleteError, PasswordSetError


class MemoryKeychain(KeyringBackend):
    """Secrets in a dict, by (service, user)."""

    priority = 1.0  # type: ignore[assignment]  # a classproperty in the base class

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.entries.pop((service, username), None) is None:
            raise PasswordDeleteError(f"no secret for {username}")


class RefusingKeychain(KeyringBackend):
    """A keychain that is there but refuses everything (locked, access denied)."""

    priority = 1.0  # type: ignore[assignment]

    def get_password(self, service: str, username: str) -> str | None:
        raise KeyringLocked("the keychain is locked")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise PasswordSetError("the keychain is locked")

    def delete_password(self, service: str, username: str) -> None:
        raise PasswordDeleteError("the keychain is locked")


class ForgetfulKeychain(MemoryKeychain):
    """A keychain that says yes to a secret and keeps nothing (a broken backend)."""

    def set_password(self, service: str, username: str, password: str) -> None:
        return None
