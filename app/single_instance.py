"""One app per user and data directory: a second launch asks the first to show its window, then exits.

A ``QLocalServer`` named after the user and the home directory; the second instance connects,
writes ``raise`` and leaves. A stale socket left by a crashed app is removed and taken over.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

_LOGGER = logging.getLogger(__name__)

RAISE = b"raise\n"


def server_name(home: Path) -> str:
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return f"mirbadllm-app-{getpass.getuser()}-{digest}"


class SingleInstance(QObject):
    """``activated`` fires when another launch asked us to come forward."""

    activated = Signal()

    def __init__(self, home: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = server_name(home)
        self.server: QLocalServer | None = None

    def ask_existing_to_raise(self, timeout_ms: int = 500) -> bool:
        """True when another instance answered (and was asked to show itself)."""
        socket = QLocalSocket()
        socket.connectToServer(self.name)
        if not socket.waitForConnected(timeout_ms):
            return False
        socket.write(RAISE)
        socket.flush()
        socket.waitForBytesWritten(timeout_ms)
        socket.disconnectFromServer()
        if socket.state() != QLocalSocket.LocalSocketState.UnconnectedState:
            socket.waitForDisconnected(timeout_ms)
        return True

    def listen(self) -> bool:
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not server.listen(self.name):
            QLocalServer.removeServer(self.name)  # a crashed app's socket file
            if not server.listen(self.name):
                _LOGGER.warning("single-instance socket unavailable: %s", server.errorString())
                return False
        server.newConnection.connect(self._on_connection)
        self.server = server
        return True

    def _on_connection(self) -> None:
        assert self.server is not None
        while (socket := self.server.nextPendingConnection()) is not None:
            # The message is one short line written right after connecting: read it here.
            arrived = socket.bytesAvailable() or socket.waitForReadyRead(500)
            if arrived and bytes(socket.readAll().data()).startswith(RAISE.strip()):
                self.activated.emit()
            socket.abort()
            socket.deleteLater()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
