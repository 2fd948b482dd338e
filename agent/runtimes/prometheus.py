"""The Prometheus text exposition a runtime's ``/metrics`` answers, read into numbers."""

from __future__ import annotations


def parse_prometheus(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text exposition: name -> value."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) < 2 or "{" in parts[0]:
            continue
        try:
            values[parts[0]] = float(parts[1])
        except ValueError:
            continue
    return values
