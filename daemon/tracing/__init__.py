"""OpenTelemetry tracing of ``/v1`` requests (``daemon.tracing.spans``).

This module imports no OpenTelemetry: the SDK and its exporter are loaded only when
``[tracing] enabled`` is set in config.toml, read at the daemon's start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.api.models import TracingSettings

if TYPE_CHECKING:
    from daemon.tracing.spans import RouterTracing


def router_tracing(settings: TracingSettings) -> RouterTracing | None:
    """The router's tracing for ``settings``; None (nothing traced, nothing imported) when off."""
    if not settings.enabled:
        return None
    from daemon.tracing.spans import RouterTracing

    return RouterTracing(settings)
