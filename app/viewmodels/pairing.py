"""The pairing wizard, Qt-free: pick an agent (seen on the LAN, or looked up by address), compare
its fingerprint with the one it printed, type its code, pair.

The fingerprint the wizard shows comes from the daemon, which read it off the agent's TLS
certificate; the pairing request pins exactly that certificate, so what the user compared is what
gets paired. The code only travels in that one request, and the wizard forgets it afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError
from daemon.api.contracts import format_code, normalize_code
from daemon.api.nodes import DiscoveredNode, NodeView
from daemon.api.protocol import DaemonApi


class WizardStep(str, Enum):
    CHOOSE = "choose"
    CONFIRM = "confirm"   # compare the fingerprint, type the code
    DONE = "done"


@dataclass(frozen=True)
class WizardState:
    step: WizardStep = WizardStep.CHOOSE
    candidate: DiscoveredNode | None = None
    busy: bool = False
    error: str | None = None
    paired: NodeView | None = None


class PairingWizard:
    def __init__(self, client: DaemonApi) -> None:
        self.client = client
        self.state: Observable[WizardState] = Observable(WizardState())

    def reset(self) -> None:
        self.state.set(WizardState())

    def choose(self, entry: DiscoveredNode) -> None:
        self.state.set(WizardState(step=WizardStep.CONFIRM, candidate=entry))

    def back(self) -> None:
        self.state.set(WizardState())

    async def look_up(self, address: str) -> None:
        """Ask the daemon what answers at ``address`` (when the agent was not seen on the LAN)."""
        if not address.strip():
            self.state.set(replace(self.state.value, error="Type the agent's address, e.g. 192.168.1.20:9443."))
            return
        self.state.set(replace(self.state.value, busy=True, error=None))
        try:
            result = await self.client.add_node_address(address.strip())
        except DaemonError as exc:
            self.state.set(replace(self.state.value, busy=False, error=exc.message))
            return
        if result.discovered is not None:
            self.choose(result.discovered)
        else:
            name = result.node.name if result.node is not None else address
            self.state.set(replace(self.state.value, busy=False, error=f"{address} is “{name}”, already paired."))

    async def pair(self, code: str) -> NodeView | None:
        state = self.state.value
        if state.candidate is None:
            return None
        try:
            normalized = normalize_code(code)
        except ValueError as exc:
            self.state.set(replace(state, error=f"That is not a pairing code: {exc}."))
            return None
        self.state.set(replace(state, busy=True, error=None))
        try:
            node: NodeView = await self.client.pair_node(state.candidate.address, format_code(normalized),
                                                         state.candidate.fingerprint)
        except DaemonError as exc:
            self.state.set(replace(self.state.value, busy=False, error=exc.message))
            return None
        self.state.set(WizardState(step=WizardStep.DONE, candidate=state.candidate, paired=node))
        return node
