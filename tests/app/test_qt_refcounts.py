"""The Qt binding must not steal references to None or True.

PySide6 6.12.0 on CPython 3.11 returns ``None`` from every void method (``setText``, ``hide``,
``processEvents``) and ``True`` from ``Signal.emit`` without a reference of their own; each call
lowers the interpreter's count, and once it reaches zero the app dies with ``Fatal Python error:
none_dealloc`` (or ``bool_dealloc``), usually at exit. Python 3.12's immortal objects hide it.
"""

from __future__ import annotations

import sys

import pytest
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QLabel

pytestmark = pytest.mark.gui

CALLS = 200


class _Emitter(QObject):
    fired = Signal()


def _drop(obj: object, call) -> int:  # type: ignore[no-untyped-def]
    before = sys.getrefcount(obj)
    for _ in range(CALLS):
        call()
    return before - sys.getrefcount(obj)


def test_void_qt_methods_do_not_steal_none(qapp: QApplication) -> None:
    label = QLabel("x")
    assert _drop(None, lambda: label.setText("y")) < CALLS // 2
    assert _drop(None, qapp.processEvents) < CALLS // 2


def test_emitting_a_signal_does_not_steal_true(qapp: QApplication) -> None:
    emitter = _Emitter()
    assert _drop(True, emitter.fired.emit) < CALLS // 2
