"""The Downloads page's verbs on the daemon's transfers: pause, resume, cancel, retry; speed and ETA; history.

Every transfer (a hub or URL download, an Ollama, LM Studio or folder import, a mirror push to a
node) is a ``Transfer`` in ``daemon.sources.transfers``; the daemon owns the list, so it outlives the
add-model dialog and the app. Here:

- **pause** (a download or a mirror push: ``Transfer.pausable``): the node's agent stops it and keeps its
  partial file (``agent.sources.fetch``); **resume** runs the same download again on the agent, which goes
  on from the partial with an HTTP ``Range`` request and checks the whole file's SHA-256 at the end. A
  mirror push is the daemon's own (``Mirror.pause``/``again``): the node keeps what it received and the
  push goes on from it.
- **cancel**: a running or paused transfer stops and its partial files are deleted.
- **retry**: a failed or cancelled download runs again; when the agent no longer knows it (it
  restarted), the daemon sends the original request again (``Transfers.track``'s ``again``).
- **speed and ETA**, and the **history** of finished ones kept across daemon restarts:
  ``daemon.sources.transfer_log``.

Bad input answers in the API's shape: an unknown id 404 ``transfer_not_found``; a verb the state or
kind does not allow 409 ``transfer_refused``, the message saying why (a done one has nothing to resume).
"""

from __future__ import annotations

import logging

from agent.api.client import AgentError
from agent.api.sources import FINISHED_TRANSFERS, TransferState
from daemon.api.sources import Transfer
from daemon.errors import DaemonProblem
from daemon.history import History
from daemon.nodes.links import Links
from daemon.sources.mirror import Mirror
from daemon.sources.transfers import Transfers

_LOGGER = logging.getLogger(__name__)

def _refused(message: str) -> DaemonProblem:
    return DaemonProblem(409, "transfer_refused", message)


class Downloads:
    def __init__(self, links: Links, transfers: Transfers, history: History, mirror: Mirror | None) -> None:
        self._links = links
        self._transfers = transfers
        self._history = history
        self._mirror = mirror  # runs the daemon's own transfers (kind "mirror"), and cancels them

    def find(self, transfer_id: str) -> Transfer:
        found = self._transfers.get(transfer_id)
        if found is None:
            raise DaemonProblem(404, "transfer_not_found", f"no transfer '{transfer_id}'; "
                                "`mirbadllm ctl downloads` lists them")
        return found

    def _owns(self, transfer: Transfer) -> bool:
        """A transfer the daemon runs itself (a mirror push), paused and run again here."""
        return transfer.kind == "mirror" and not transfer.agent_id and self._mirror is not None

    async def cancel(self, transfer_id: str) -> Transfer:
        transfer = self.find(transfer_id)
        if transfer.state not in FINISHED_TRANSFERS and transfer.kind == "mirror":
            if self._mirror is None:
                raise DaemonProblem(409, "not_cancellable", "this daemon cannot cancel mirror transfers")
            await self._mirror.cancel(transfer.id)  # the daemon's own push: no agent transfer to ask
        elif transfer.state not in FINISHED_TRANSFERS:
            info = await self._links.online_client(transfer.node).cancel_transfer(transfer.agent_id)
            await self._transfers.update(transfer.id, info)
        await self._history.audit("admin", "transfer.cancel", transfer.id)
        return self.find(transfer.id)

    async def pause(self, transfer_id: str) -> Transfer:
        transfer = self.find(transfer_id)
        if not transfer.pausable or not (transfer.agent_id or self._owns(transfer)):
            raise _refused(f"a {transfer.kind} transfer cannot be paused, only cancelled")
        if transfer.state in FINISHED_TRANSFERS:
            raise _refused(f"transfer {transfer.id} is {transfer.state.value}: there is nothing to pause")
        if transfer.state is not TransferState.PAUSED and self._owns(transfer):
            assert self._mirror is not None
            await self._mirror.pause(transfer.id)
            await self._history.audit("admin", "transfer.pause", transfer.id)
        elif transfer.state is not TransferState.PAUSED:
            info = await self._links.online_client(transfer.node).pause_transfer(transfer.agent_id)
            await self._transfers.update(transfer.id, info)
            await self._history.audit("admin", "transfer.pause", transfer.id)
        return self.find(transfer.id)

    async def resume(self, transfer_id: str) -> Transfer:
        transfer = self.find(transfer_id)
        if transfer.state is TransferState.FAILED:
            raise _refused(f"transfer {transfer.id} failed ({transfer.error}); retry it instead")
        if transfer.state in FINISHED_TRANSFERS:
            raise _refused(f"transfer {transfer.id} is {transfer.state.value}: there is nothing to resume")
        if transfer.state is not TransferState.PAUSED:
            return transfer  # running already
        return await self._again(transfer, "transfer.resume")

    async def retry(self, transfer_id: str) -> Transfer:
        transfer = self.find(transfer_id)
        if transfer.state not in (TransferState.FAILED, TransferState.CANCELLED):
            what = "resume it" if transfer.state is TransferState.PAUSED else "there is nothing to retry"
            raise _refused(f"transfer {transfer.id} is {transfer.state.value}: {what}")
        return await self._again(transfer, "transfer.retry")

    async def _again(self, transfer: Transfer, action: str) -> Transfer:
        """The same download again on its node: the agent's own transfer if it still has it (its partial
        files), else the original request sent anew; a mirror push runs again from what the node kept."""
        if self._owns(transfer):
            assert self._mirror is not None
            await self._mirror.again(transfer.id)
            await self._history.audit("admin", action, transfer.id)
            return self.find(transfer.id)
        if not transfer.pausable or not transfer.agent_id:
            raise _refused(f"a {transfer.kind} transfer cannot be run again; start it anew")
        client = self._links.online_client(transfer.node)
        try:
            info = await client.resume_transfer(transfer.agent_id)
        except AgentError as exc:
            if exc.code != "transfer_not_found":
                raise
            anew = await self._transfers.start_again(transfer.id)
            if anew is None:
                raise _refused(f"node '{transfer.node}' no longer knows transfer {transfer.id} and the daemon "
                               "restarted since it began: start the download anew") from None
            info = anew
        await self._transfers.follow(transfer.id, info)
        await self._history.audit("admin", action, transfer.id)
        return self.find(transfer.id)
