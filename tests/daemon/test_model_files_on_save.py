"""A model is saved only with a file its node can read, and a saved model is one a request can start.

Broken files are refused when saved, on the node that will run them (422 ``invalid_model`` with the
agent's reason; ``ctl models add`` exits non-zero): a path that does not exist, a text file named
``.gguf``, random bytes. A model saved without saying otherwise starts on its first request, so
``/v1/models`` lists it while stopped (as LM Studio and Ollama do).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
import pytest_asyncio

from daemon.api.client import DaemonError
from daemon.api.models import ModelDefinition, ModelState
from mirbadllm import ctl
from tests.daemon.harness import RunningDaemon, model, running_daemon
from tests.fakes import write_fake_runtime

IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")  # the tests that share its daemon


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def refusing(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningDaemon]:
    """One daemon for the saves that are refused: each test asserts it saved nothing, so none can
    leave anything for the next."""
    home = tmp_path_factory.mktemp("refusals")
    async with running_daemon(home / "daemon", write_fake_runtime(home / "bin")) as d:
        yield d


@IN_MODULE_LOOP
async def test_a_file_the_node_cannot_read_is_refused_and_nothing_is_saved(tmp_path: Path,
                                                                            refusing: RunningDaemon) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("these are my notes, not a model\n")
    noise = tmp_path / "random.bin"
    noise.write_bytes(os.urandom(4096))
    rd = refusing
    for path, why in ((tmp_path / "missing.gguf", "missing.gguf"), (text, "notes.gguf"), (noise, "random.bin")):
        with pytest.raises(DaemonError) as refused:
            await rd.client.create_model(model("broken", str(path)))
        assert (refused.value.status, refused.value.code) == (422, "invalid_model")
        assert refused.value.message.startswith("model_path: ") and why in refused.value.message
    placeholder = ModelDefinition(id="placeholder", served_name="placeholder",
                                  model_path="/path/to/model.gguf")  # the Add form's hint
    with pytest.raises(DaemonError):
        await rd.client.create_model(placeholder)
    assert await rd.client.list_models() == []


@IN_MODULE_LOOP
async def test_ctl_models_add_of_a_broken_file_is_refused_naming_why(tmp_path: Path, refusing: RunningDaemon) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("not a model\n")
    rd = refusing
    with pytest.raises(DaemonError) as refused:
        await ctl.run(ctl.parse_args(["models", "add", "notes", str(text)]), rd.client)
    assert refused.value.status == 422 and "notes.gguf" in refused.value.message
    assert await rd.client.list_models() == []


async def test_a_saved_model_starts_on_its_first_request_and_is_listed_while_stopped(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "daemon", fake_runtime) as rd:
        saved = ModelDefinition(id="m", served_name="m", model_path=str(model_file))  # nothing said of starting
        assert (await rd.client.create_model(saved)).definition.start_on_request
        client = openai.AsyncOpenAI(base_url=rd.v1, api_key="unused", max_retries=0, timeout=60)
        try:
            assert [m.id for m in (await client.models.list()).data] == ["m"], "listed while stopped"
            assert (await rd.client.get_model("m")).status.state == ModelState.STOPPED
            answer = await client.completions.create(model="m", prompt="Hello", max_tokens=4)
            assert answer.choices[0].text
            assert (await rd.client.get_model("m")).status.state == ModelState.READY

            await rd.client.create_model(model("manual", str(model_file), start_on_request=False))
            assert "manual" not in [m.id for m in (await client.models.list()).data]
        finally:
            await client.close()


async def test_a_start_the_node_refuses_shows_as_failed_with_why_and_is_not_retried(
        tmp_path: Path, fake_runtime: Path, model_file: Path) -> None:
    async with running_daemon(tmp_path / "daemon", fake_runtime) as rd:
        await rd.client.create_model(model("m", str(model_file)))
        since = (await rd.client.events(0, timeout=0)).last_id
        hidden = model_file.with_name("moved-away.gguf")
        model_file.rename(hidden)  # the file went away after it was saved

        with pytest.raises(DaemonError) as refused:
            await rd.client.start_model("m")
        assert refused.value.status == 422 and "fake.gguf" in refused.value.message
        status = (await rd.client.get_model("m")).status
        assert status.state == ModelState.FAILED, "not 'stopped', as if nothing had happened"
        assert status.error is not None and status.error.startswith("The start was refused: ")
        assert "fake.gguf" in status.error and status.crash_count == 0
        page = await rd.client.events(since, timeout=5)
        assert any(e.type == "model.state" and e.model == "m" and e.data["state"] == "failed" for e in page.events)
        page = await rd.client.events(page.last_id, timeout=0.5)  # nothing retries it as a crash
        assert not any(e.type in ("model.crashed", "model.state") for e in page.events)

        hidden.rename(model_file)
        ready = await rd.client.start_model("m", wait=True)
        assert ready.state == ModelState.READY and ready.error is None
