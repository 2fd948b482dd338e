"""The demo's CA rotation (``rotate_ca``), mixed into ``memory_daemon.DemoDaemon``.

It does what the daemon's ``daemon.nodes.ca_rotation`` reports: every online node is rotated, every
other one named offline, and the old CA retired. ``ca_rotation_refusal`` (a test sets it) refuses
the next rotation as the daemon does while a node is being paired or another rotation runs.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

from daemon.api.ca_rotation import CaRotationResult, NodeRotation
from daemon.api.client import DaemonError
from daemon.api.nodes import NodeState

if TYPE_CHECKING:
    from daemon.api.nodes import NodeView


class DemoCaRotation:
    if TYPE_CHECKING:
        nodes: list[NodeView]

        def _publish(self, type_: str, model: str | None = None, **data: Any) -> Any: ...
        def _record(self, name: str, *args: Any) -> None: ...

    ca_rotation_refusal: DaemonError | None = None
    _ca_generation = 0

    async def rotate_ca(self) -> CaRotationResult:
        self._record("rotate_ca")
        if self.ca_rotation_refusal is not None:
            refusal, self.ca_rotation_refusal = self.ca_rotation_refusal, None
            raise refusal
        began = time.monotonic()
        old = hashlib.sha256(f"demo-ca-{self._ca_generation}".encode()).hexdigest()
        self._ca_generation += 1
        new = hashlib.sha256(f"demo-ca-{self._ca_generation}".encode()).hexdigest()
        result = CaRotationResult(old_ca=old, new_ca=new, retired=True)
        for node in self.nodes:
            online = node.state in (NodeState.ONLINE, NodeState.DEGRADED)
            result.nodes.append(NodeRotation(
                node=node.id, name=node.name, outcome="rotated" if online else "offline",
                certificate_id=hashlib.sha256(f"{node.id}-{new}".encode()).hexdigest() if online else None,
                message="" if online else "not reached: pair it again (`mirbadllm agent --unpair` there, "
                                          "remove it here, pair it)", seconds=0.03 if online else 0.0))
        result.offline = [n.name for n in result.nodes if n.outcome == "offline"]
        result.seconds = round(time.monotonic() - began + 0.03 * len(self.nodes), 3)
        self._publish("nodes.ca_rotation", None, retired=True, offline=result.offline)
        return result
