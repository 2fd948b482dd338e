"""The in-memory daemon's Downloads: pause, resume, cancel and retry of its transfers.

Mixed into ``memory_daemon.DemoDaemon`` ahead of ``DemoSources`` (whose transfers finish at once).
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
