"""The LM Studio tab's view-model without Qt, over the real daemon and its local agent reading a
temporary LM Studio folder: an import is followed by its events, and once done the rows say what each
file is added as; another node is a fresh look."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import definition, until
from real_daemon import RealDaemon, daemon_on_a_machine

from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.lmstudio_import import LmStudioImportViewModel
from daemon.api.client import DaemonClient
from daemon.api.sources import LmStudioModel
from tests.fakes.gguf_files import write_gguf

PHI_MODEL = "bartowski/Phi-4-mini-instruct-GGUF/Phi-4-mini-instruct-Q6_K.gguf"


class LookingClient(DaemonClient):
    """The app's client of the real daemon, noting each look in LM Studio's folders (node, folder)."""

    looks: list[tuple[str, str | None]]

    async def lmstudio_models(self, node: str = "local", folder: str | None = None) -> list[LmStudioModel]:
        self.looks.append((node, folder))
        return await super().lmstudio_models(node, folder)


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealDaemon, Path]]:
    """The daemon and LM Studio's models folder on its machine: Phi, Qwen and Gemma."""
    root = tmp_path_factory.mktemp("lmstudio")
    lms = root / "user" / ".lmstudio" / "models"
    write_gguf(lms / PHI_MODEL)
    write_gguf(lms / "lmstudio-community" / "Qwen3-4B-Instruct-2507-GGUF" / "Qwen3-4B-Instruct-2507-Q4_K_M.gguf")
    write_gguf(lms / "lmstudio-community" / "gemma-3-4b-it-GGUF" / "gemma-3-4b-it-Q4_K_M.gguf")
    with daemon_on_a_machine(root) as found:
        yield found, lms


@pytest.fixture
async def client(machine: tuple[RealDaemon, Path]) -> AsyncIterator[LookingClient]:
    daemon, _lms = machine

    async def only_phi(deps: Any) -> None:
        for held in deps.registry.all():
            await deps.registry.remove(held.id)
        await deps.registry.add(definition("phi", model_path=str(_lms / PHI_MODEL), node="local"))

    daemon.call(only_phi)
    found = LookingClient(*daemon, client_name="app")
    found.looks = []
    yield found
    await found.close()


async def test_an_import_is_followed_then_the_rows_say_what_they_are_added_as(
        client: LookingClient, machine: tuple[RealDaemon, Path]) -> None:
    _daemon, lms = machine
    phi, qwen = str(lms / PHI_MODEL), next(str(p) for p in lms.rglob("Qwen3-*.gguf"))
    fleet = FleetViewModel(client, host_refresh_s=3600, poll_timeout=1)
    fleet.start()
    vm = LmStudioImportViewModel(client, fleet.events)
    try:
        vm.look_once()
        vm.look_once()  # the tab shown twice before the answer: one look
        await until(lambda: vm.state.value.loaded, timeout=30)
        assert client.looks == [("local", None)]
        added = {m.path: m.registered_as for m in vm.state.value.listed}
        assert added == {phi: "phi", qwen: None, str(next(lms.rglob("gemma-*.gguf"))): None}
        [phi_row] = [r for r in vm.state.value.rows if r.startswith("Phi-4-mini-instruct-Q6_K.gguf")]
        assert phi_row.endswith("— added as 'phi'  (bartowski/Phi-4-mini-instruct-GGUF)")

        vm.set_selected({phi, qwen, "/not/listed.gguf"})
        assert vm.state.value.selected == {phi, qwen}
        await vm.import_selected()
        assert vm.state.value.status_text == f"Importing LM Studio {PHI_MODEL} and 1 more…"
        assert not vm.state.value.can_import
        # the daemon's transfer events bring the outcome: phi is there already, Qwen is added
        await until(lambda: not vm.state.value.running, timeout=30)
        assert vm.state.value.status_text == ("Added 'qwen3-4b-instruct-2507-q4-k-m'; "
                                              "already added as model 'phi' (not added again)")
        await until(lambda: len(client.looks) == 2, timeout=30)  # asked again once it is done
        await until(lambda: not vm.state.value.loading and not vm.state.value.selected, timeout=30)
        added = {m.path: m.registered_as for m in vm.state.value.listed}
        assert added[qwen] == "qwen3-4b-instruct-2507-q4-k-m" and added[phi] == "phi"

        vm.set_node("box")
        assert vm.state.value.listed == () and not vm.state.value.loaded
    finally:
        vm.close()
        await fleet.stop()
