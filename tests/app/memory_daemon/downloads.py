"""The in-memory daemon's Downloads: pause, resume, cancel and retry of its transfers.

Mixed into ``memory_daemon.DemoDaemon`` ahead of ``DemoSources`` (whose transfers finish at once). The
seeded demo lists a hub download running at a steady speed, a paused one, one that failed saying
why, a finished mirror push and an Ollama import, as the Downloads page's screenshot shows them;
``add_transfer`` puts any transfer in the list (the app's tests use it). The verbs answer as the
daemon does (``daemon.sources.downloads``): 404 ``transfer_not_found``, 409 ``transfer_refused``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from daemon.api.client import DaemonError
from daemon.api.contracts import TransferState
from daemon.api.nodes import NodeView
from daemon.api.sources import Transfer

_LOGGER = logging.getLogger(__name__)
MIB = 2**20
DEMO_SPEED = 38.5 * MIB
FINISHED_TRANSFERS = (TransferState.DONE, TransferState.FAILED, TransferState.CANCELLED)


def _refused(message: str) -> DaemonError:
    return DaemonError(409, "transfer_refused", message)


class DemoDownloads:
    if TYPE_CHECKING:  # provided by the daemon class this is mixed into (DemoSources, DemoNodes, DemoDaemon)
        nodes: list[NodeView]

        @property
        def _transfer_book(self) -> dict[str, Transfer]: ...
        def _find_transfer(self, transfer_id: str) -> Transfer: ...
        def _publish(self, type_: str, model: str | None = None, **data: Any) -> Any: ...
        def _record(self, name: str, *args: Any) -> None: ...

    def add_transfer(self, transfer: Transfer) -> Transfer:
        self._transfer_book[transfer.id] = transfer
        self._publish("transfer.state", None, **transfer.model_dump(mode="json"))
        return transfer

    def _seed_downloads(self, seeded: bool) -> None:
        if not seeded:
            return
        now = time.time()
        studio = next((n.id for n in self.nodes if n.name == "studio"), "local")
        total = int(4.68 * 1024 * MIB)
        done = int(total * 0.62)
        self.add_transfer(Transfer(
            id="x5", kind="hf", label="Qwen/Qwen3-8B-GGUF Q4_K_M", state=TransferState.RUNNING, stage="downloading",
            bytes_done=done, bytes_total=total, speed_bps=DEMO_SPEED, eta_s=(total - done) / DEMO_SPEED,
            created_at=now - 80, pausable=True, agent_id="t9"))
        self.add_transfer(Transfer(
            id="x4", kind="hf", label="unsloth/gemma-3-12b-it-GGUF Q4_K_M", state=TransferState.PAUSED,
            stage="paused", bytes_done=int(2.1 * 1024 * MIB), bytes_total=int(7.3 * 1024 * MIB),
            created_at=now - 900, pausable=True, node=studio, agent_id="t3"))
        self.add_transfer(Transfer(
            id="x3", kind="url", label="https://models.example.net/phi-4-mini-Q5_K_M.gguf", state=TransferState.FAILED,
            error="the connection failed 3 times: Response payload is not completed", bytes_done=0,
            bytes_total=int(2.8 * 1024 * MIB), created_at=now - 2400, finished_at=now - 2300, pausable=True,
            agent_id="t2"))
        self.add_transfer(Transfer(
            id="x2", kind="mirror", label="llama-3.2-3b -> studio", state=TransferState.DONE, stage="done",
            bytes_done=int(2.0 * 1024 * MIB), bytes_total=int(2.0 * 1024 * MIB), node=studio,
            registered=["llama-3.2-3b"], created_at=now - 5400, finished_at=now - 5300))
        self.add_transfer(Transfer(
            id="x1", kind="ollama", label="qwen3:8b", state=TransferState.DONE, stage="done",
            bytes_done=int(5.2 * 1024 * MIB), bytes_total=int(5.2 * 1024 * MIB), registered=["qwen3-8b"],
            created_at=now - 7000, finished_at=now - 6990, agent_id="t1"))

    def _move(self, transfer: Transfer, **changes: Any) -> Transfer:
        moved = transfer.model_copy(update=changes)
        return self.add_transfer(moved)

    async def pause_transfer(self, transfer_id: str) -> Transfer:
        self._record("pause_transfer", transfer_id)
        t = self._find_transfer(transfer_id)
        if not t.pausable:
            raise _refused(f"a {t.kind} transfer cannot be paused, only cancelled")
        if t.state in FINISHED_TRANSFERS:
            raise _refused(f"transfer {t.id} is {t.state.value}: there is nothing to pause")
        return self._move(t, state=TransferState.PAUSED, stage="paused", speed_bps=None, eta_s=None)

    async def resume_transfer(self, transfer_id: str) -> Transfer:
        self._record("resume_transfer", transfer_id)
        t = self._find_transfer(transfer_id)
        if t.state == TransferState.FAILED:
            raise _refused(f"transfer {t.id} failed ({t.error}); retry it instead")
        if t.state in FINISHED_TRANSFERS:
            raise _refused(f"transfer {t.id} is {t.state.value}: there is nothing to resume")
        return self._move(t, state=TransferState.RUNNING, stage="downloading")

    async def retry_transfer(self, transfer_id: str) -> Transfer:
        self._record("retry_transfer", transfer_id)
        t = self._find_transfer(transfer_id)
        if t.state not in (TransferState.FAILED, TransferState.CANCELLED) or not t.pausable:
            raise _refused(f"transfer {t.id} is {t.state.value}: there is nothing to retry")
        return self._move(t, state=TransferState.RUNNING, stage="downloading", error=None, finished_at=None)

    async def cancel_transfer(self, transfer_id: str) -> Transfer:
        self._record("cancel_transfer", transfer_id)
        t = self._find_transfer(transfer_id)
        if t.state in FINISHED_TRANSFERS:
            return t  # already finished: nothing to cancel
        return self._move(t, state=TransferState.CANCELLED, stage="cancelled", speed_bps=None, eta_s=None,
                          finished_at=time.time())
