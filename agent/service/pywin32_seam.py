"""The few pywin32 pieces the Windows service uses, behind one seam so tests can hand in a fake.

``load()`` imports the real modules (Windows only; pywin32 is a dependency there only). Tests on
Linux build a ``Pywin32`` from ``tests/fakes/fake_pywin32.py``, which records every status sent to
the Service Control Manager and every Event Log message.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Any

_LOGGER = logging.getLogger(__name__)

ERROR_FAILED_SERVICE_CONTROLLER_CONNECT = 1063  # StartServiceCtrlDispatcher outside the SCM


@dataclass(frozen=True)
class Pywin32:
    """``win32serviceutil.ServiceFramework``, the ``win32service`` constants and ``SetServiceStatus``,
    ``servicemanager`` (dispatcher, Event Log) and ``pywintypes.error``."""

    service_framework: type[Any]
    win32service: Any
    servicemanager: Any
    error: type[Exception]


def load() -> Pywin32:
    """The real pywin32; ImportError off Windows or where it is not installed."""
    import pywintypes  # type: ignore[import-not-found,unused-ignore]
    import servicemanager  # type: ignore[import-not-found,unused-ignore]
    import win32service  # type: ignore[import-not-found,unused-ignore]
    import win32serviceutil  # type: ignore[import-not-found,unused-ignore]

    return Pywin32(win32serviceutil.ServiceFramework, win32service, servicemanager, pywintypes.error)


def event_message_file() -> str | None:
    """The file holding servicemanager's Event Log message texts (``servicemanager.pyd``), which the
    installer registers for the service's event source; None where pywin32 is not installed."""
    try:
        spec = importlib.util.find_spec("servicemanager")
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.origin else None
