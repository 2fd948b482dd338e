"""What the Nodes page says about a CA rotation: the question before it and the result after it.

``daemon.nodes.ca_rotation`` does the work (``DaemonApi.rotate_ca``); these are plain texts the page
renders, tested without widgets.
"""

from __future__ import annotations

import logging

from daemon.api.ca_rotation import CaRotationResult

_LOGGER = logging.getLogger(__name__)

CONFIRM_ROTATION = ("Rotate the CA? A new certificate authority is made; every online node gets a certificate "
                    "from it, then the old one is retired and refused everywhere. Nodes offline now must be "
                    "paired again afterwards.")


def rotation_summary(result: CaRotationResult) -> str:
    """``CA rotated: 2 nodes switched (0.12 s). Offline, pair again: beta`` and the like."""
    rotated = [n.name for n in result.nodes if n.outcome == "rotated"]
    failed = [f"{n.name} ({n.message})" for n in result.nodes if n.outcome == "failed"]
    if result.retired:
        head = f"CA rotated: {len(rotated)} node{'s' if len(rotated) != 1 else ''} switched ({result.seconds:.2f} s)."
    else:
        head = f"CA not rotated: {result.problem or 'the old CA is still in use'}"
    lines = [head]
    if failed:
        lines.append("Failed: " + ", ".join(failed))
    if result.offline:
        lines.append("Offline, pair again: " + ", ".join(result.offline))
    return "\n".join(lines)
