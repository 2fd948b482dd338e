"""The LM Studio tab's view-model without Qt: an import that runs a while is followed by its events,
and once done the rows say what each file is added as; another node is a fresh look."""

from __future__ import annotations

import time

from fake_daemon import FakeDaemonClient, definition
from helpers import until
from memory_daemon.lmstudio import LMSTUDIO_HOME

from app.viewmodels.lmstudio_import import LmStudioImportViewModel
from app.viewmodels.observable import Emitter
from daemon.api.contracts import TransferState
from daemon.api.models import Event
from daemon.api.sources import LmStudioImportQuery, Transfer

PHI = f"{LMSTUDIO_HOME}/bartowski/Phi-4-mini-instruct-GGUF/Phi-4-mini-instruct-Q6_K.gguf"


async def test_a_running_import_is_followed_then_the_rows_say_what_they_are_added_as() -> None:
    fake = FakeDaemonClient([definition("phi", model_path=PHI)])
    events: Emitter[Event] = Emitter()
    vm = LmStudioImportViewModel(fake, events)
    vm.look_once()
    vm.look_once()  # the tab shown twice before the answer: one look
    await until(lambda: vm.state.value.loaded)
    assert fake.called("lmstudio_models") == [("local", None)]
    assert [m.registered_as for m in vm.state.value.listed] == [None, None, "phi"]
    assert vm.state.value.rows[2].endswith("— added as 'phi'  (bartowski/Phi-4-mini-instruct-GGUF)")

    running = Transfer(id="t9", kind="folder", label="LM Studio Phi", state=TransferState.RUNNING)

    async def slow_import(query: LmStudioImportQuery) -> Transfer:
        return running

    fake.import_lmstudio = slow_import  # type: ignore[method-assign]
    vm.set_selected({PHI, "/not/listed.gguf"})
    assert vm.state.value.selected == {PHI}
    await vm.import_selected()
    assert vm.state.value.status_text == "Importing LM Studio Phi…" and not vm.state.value.can_import
    done = running.model_copy(update={"state": TransferState.DONE, "existing": ["phi"]})
    events.emit(Event(id=1, ts=time.time(), type="transfer.state", data=done.model_dump(mode="json")))
    assert vm.state.value.status_text == "already added as model 'phi' (not added again)"
    await until(lambda: len(fake.called("lmstudio_models")) == 2)  # asked again once it is done
    await until(lambda: not vm.state.value.loading and not vm.state.value.selected)

    vm.set_node("box")
    assert vm.state.value.listed == () and not vm.state.value.loaded
    vm.close()
