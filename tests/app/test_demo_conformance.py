"""The in-memory daemon answers every call of ``DaemonClient`` (but those of ``ON_THE_REAL_DAEMON``),
with its signatures and its types.

The app's tests run it (``tests/app/memory_daemon``) as ``FakeDaemonClient``, a bare
``DemoDaemon(models)`` that only records calls and injects failures; ``mirbadllm --demo`` runs the real
daemon. A method the client gains and the fake lacks would fail a page's test with an
``AttributeError`` rather than with what it checks; these tests name it. The pages whose tests all
run the real daemon (``real_daemon.py``) need no fake: their calls are ``ON_THE_REAL_DAEMON``.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest
from fake_daemon import FakeDaemonClient, definition
from memory_daemon import DemoDaemon

from agent.api.llamacpp import LlamaCppSettings
from daemon.api import client as client_module
from daemon.api.client import DaemonClient
from daemon.api.contracts import TransferState
from daemon.api.conversations import ConversationCreate, ConversationMessage
from daemon.api.jobs import BenchmarkRequest, TuneRequest
from daemon.api.mirror import MirrorQuery
from daemon.api.models import (
    ApiKeyLimits,
    DaemonSettings,
    ModelDefinition,
    ModelSource,
    ModelStatus,
)
from daemon.api.plan import PlanQuery
from daemon.api.services import ServiceNames
from daemon.api.sources import (
    DownloadQuery,
    FitQuery,
    FolderImportQuery,
    LmStudioImportQuery,
    OllamaImportQuery,
    Transfer,
)


def _public_calls(cls: type) -> dict[str, Any]:
    return {name: fn for name, fn in inspect.getmembers(cls)
            if not name.startswith("_") and (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn))}


ON_THE_REAL_DAEMON = frozenset({"requests", "request"})  # the Requests page's calls
CLIENT_CALLS = {name: fn for name, fn in _public_calls(DaemonClient).items() if name not in ON_THE_REAL_DAEMON}


def _shape(fn: Any) -> list[tuple[str, Any, Any, str]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default, str(p.annotation)) for p in sig.parameters.values()] + [
        ("->", None, None, str(sig.return_annotation))]


def _differences(cls: type) -> list[str]:
    """What ``cls`` lacks of ``DaemonClient``'s calls, and where a call's signature or kind differs."""
    theirs = _public_calls(cls)
    found = [f"{cls.__name__} lacks {name}" for name in sorted(set(CLIENT_CALLS) - set(theirs))]
    for name, fn in CLIENT_CALLS.items():
        if name in theirs and (_shape(theirs[name]) != _shape(fn)
                               or inspect.isasyncgenfunction(theirs[name]) != inspect.isasyncgenfunction(fn)):
            found.append(f"{cls.__name__}.{name} differs from DaemonClient.{name}")
    return found


def _bare() -> tuple[DemoDaemon, str, tuple[str, str, str]]:
    pulled = ModelSource(hf_repo="acme/gamma-GGUF", hf_file="gamma.gguf", revision="a" * 40)
    bare = DemoDaemon([definition("alpha"), definition("beta", served_name="Beta-7B"),
                       definition("gamma", sources=pulled)])
    bare.publish_revision("acme/gamma-GGUF")  # an update waits (memory_daemon.model_updates)
    waiting = bare.add_waiting_agent("box", "ABCD-EFGH")
    bare.add_node_file("local", "/models/alpha.gguf", 4_000_000)
    bare.add_node_file("local", "/models/old/unused.gguf", 2_000_000)
    return bare, "alpha", (waiting.address, "ABCD-EFGH", waiting.fingerprint)


DAEMONS: dict[str, Callable[[], tuple[DemoDaemon, str, tuple[str, str, str]]]] = {"bare": _bare}


def _calls(model: str, pairing: tuple[str, str, str]) -> list[tuple[str, Callable[[dict[str, Any]], tuple[Any, ...]]]]:
    """Every client call in an order that works on one daemon, each with arguments built from
    what the calls before it returned (``r``)."""
    new = ModelDefinition(id="conformance", served_name="conformance", model_path="/models/c.gguf")
    return [
        ("healthz", lambda r: ()), ("status", lambda r: ()), ("events", lambda r: (0, 0.01)),
        ("list_models", lambda r: ()), ("get_model", lambda r: (model,)), ("create_model", lambda r: (new,)),
        ("update_model", lambda r: (new.model_copy(update={"tags": ["x"]}),)),
        ("start_model", lambda r: ("conformance",)), ("stop_model", lambda r: ("conformance",)),
        ("restart_model", lambda r: ("conformance",)), ("delete_model", lambda r: ("conformance",)),
        ("logs", lambda r: (model, 5, False)), ("model_history", lambda r: (model, "1h")),
        ("node_history", lambda r: ("local", "5m")), ("list_keys", lambda r: ()),
        ("create_key", lambda r: ("conformance",)),
        ("set_key_limits", lambda r: (r["create_key"].info.id, ApiKeyLimits(requests_per_minute=60))),
        ("revoke_key", lambda r: (r["create_key"].info.id,)),
        ("get_settings", lambda r: ()), ("put_settings", lambda r: (DaemonSettings(require_api_keys=True),)),
        ("audit", lambda r: ()), ("shutdown", lambda r: (False,)),
        ("fit", lambda r: (FitQuery(model_path="/models/x.gguf", settings=LlamaCppSettings(ctx_size=4096)),)),
        ("plan", lambda r: (PlanQuery(model_path="/models/x.gguf", ctx_size=4096),)),
        ("download", lambda r: (DownloadQuery(url="https://example.com/x.gguf", sha256="0" * 64),)),
        ("ollama_models", lambda r: ()), ("lmstudio_models", lambda r: ("local",)),
        ("import_ollama", lambda r: (OllamaImportQuery(model="llama3.2:3b"),)),
        ("import_folder", lambda r: (FolderImportQuery(folder="/models/more"),)),
        ("import_lmstudio", lambda r: (LmStudioImportQuery(paths=[r["lmstudio_models"][0].path]),)),
        ("transfers", lambda r: ()), ("transfer", lambda r: (r["download"].id,)),
        ("cancel_transfer", lambda r: (r["download"].id,)),
        ("pause_transfer", lambda r: ("dl-running",)), ("resume_transfer", lambda r: ("dl-running",)),
        ("retry_transfer", lambda r: ("dl-failed",)),
        ("mirror", lambda r: (MirrorQuery(model_id=model, target_node="box"),)),
        ("list_nodes", lambda r: ()), ("get_node", lambda r: ("local",)), ("discovered_nodes", lambda r: ()),
        ("add_node_address", lambda r: (pairing[0],)), ("pair_node", lambda r: pairing),
        ("gpu_history", lambda r: (r["pair_node"].id, "0", "5m")), ("start_upgrade", lambda r: ()),
        ("list_services", lambda r: ("local", True)), ("service_action", lambda r: ("local", "ollama", "start")),
        ("services_policy", lambda r: ("local",)),
        ("set_services_policy", lambda r: (ServiceNames(allow=["nginx"]), "local")),
        ("upgrade_status", lambda r: ()), ("start_runtime_upgrade", lambda r: ("/builds/llamacpp-demo", None)),
        ("runtime_upgrade_status", lambda r: ()), ("set_node_backend", lambda r: ("local", "cpu")),
        ("rotate_ca", lambda r: ()), ("remove_node", lambda r: (r["pair_node"].id,)),
        ("plan_tune", lambda r: (TuneRequest(model=model),)),
        ("start_benchmark", lambda r: (BenchmarkRequest(model=model),)),
        ("get_job", lambda r: (r["start_benchmark"].id,)), ("cancel_job", lambda r: (r["start_benchmark"].id,)),
        ("start_tune", lambda r: (TuneRequest(model=model),)), ("list_jobs", lambda r: (model, "tune")),
        ("apply_job", lambda r: (_apply_target(r),)),
        ("save_backup", lambda r: ("demo passphrase",)), ("list_backups", lambda r: ()),
        ("download_backup", lambda r: (r["save_backup"].name,)), ("create_backup", lambda r: (None,)),
        ("preview_restore", lambda r: (r["download_backup"], "demo passphrase", False)),
        ("restore_backup", lambda r: (r["create_backup"], None, False)),
        ("hub_search", lambda r: ("qwen3", "gguf", 5)),
        ("hub_repo_files", lambda r: (r["hub_search"].repos[0].id if r["hub_search"].repos else "acme/x-GGUF",)),
        ("hub_catalog", lambda r: ()),
        ("model_updates", lambda r: (True,)),
        ("update_model_files", lambda r: (next(u.model for u in r["model_updates"] if u.state == "available"),)),
        ("rollback_model", lambda r: (r["update_model_files"].registered[0],)),
        ("node_files", lambda r: ("local",)),
        ("remove_node_file", lambda r: ("local", next(f.path for f in r["node_files"].files if f.unused))),
        ("delete_model_with_files", lambda r: (model,)),
        ("create_conversation", lambda r: (ConversationCreate(model=model, messages=[ConversationMessage(role="user", content="hi")]),)),
        ("append_messages", lambda r: (r["create_conversation"].id, [ConversationMessage(role="assistant", content="hello")])),
        ("rename_conversation", lambda r: (r["create_conversation"].id, "Greeting")),
        ("list_conversations", lambda r: ()), ("get_conversation", lambda r: (r["create_conversation"].id,)),
        ("export_conversation", lambda r: (r["create_conversation"].id, "json")),
        ("delete_conversation", lambda r: (r["create_conversation"].id,)),
        ("close", lambda r: ()),
    ]


def _apply_target(r: dict[str, Any]) -> str:
    """A finished tuning run with a winner: the demo's seeded one, or a fake's, finished by hand."""
    return next((j.id for j in r["list_jobs"] if j.state.value == "succeeded"), r["start_tune"].id)


def _check_type(value: Any, declared: Any, name: str) -> None:
    origin = typing.get_origin(declared)
    if declared is type(None):
        assert value is None, f"{name} returned {value!r}, not None"
    elif origin is list:
        (item,) = typing.get_args(declared)
        assert isinstance(value, list), f"{name} returned {type(value).__name__}, not a list"
        for element in value:
            _check_type(element, item, name)
    elif origin is None:
        assert isinstance(value, declared), f"{name} returned {type(value).__name__}, not {declared.__name__}"


def test_every_client_method_exists_with_the_same_signature() -> None:
    assert _differences(DemoDaemon) == []


def test_the_check_names_a_missing_method_and_a_different_signature() -> None:
    lacking = type("Lacking", (), {n: f for n, f in _public_calls(DemoDaemon).items() if n != "fit"})

    class Drifted(DemoDaemon):
        async def start_model(self, model_id: str, wait: bool = True, force: bool = False) -> ModelStatus:
            return await super().start_model(model_id, wait, force)

        async def logs(self, model_id: str, tail: int = 200, follow: bool = False) -> list[str]:  # type: ignore[override]
            return []

    assert _differences(lacking) == ["Lacking lacks fit"]
    assert _differences(Drifted) == ["Drifted.logs differs from DaemonClient.logs",
                                     "Drifted.start_model differs from DaemonClient.start_model"]


def test_the_tests_fake_daemon_is_the_demo_daemon() -> None:
    """The tests' fake adds controls, and answers no call with code of its own."""
    assert issubclass(FakeDaemonClient, DemoDaemon)
    own = sorted(name for name in CLIENT_CALLS if name in vars(FakeDaemonClient))
    assert own == [], f"FakeDaemonClient answers {own} itself; fix DemoDaemon instead"


@pytest.mark.parametrize("which", list(DAEMONS))
async def test_every_client_method_answers_with_its_declared_type(which: str) -> None:
    daemon, model, pairing = DAEMONS[which]()
    plan = _calls(model, pairing)
    assert sorted(name for name, _ in plan) == sorted(CLIENT_CALLS), "a client method is missing from this test"
    results: dict[str, Any] = {}
    for transfer_id, state in (("dl-running", TransferState.RUNNING), ("dl-failed", TransferState.FAILED)):
        daemon.add_transfer(Transfer(id=transfer_id, kind="hf", label="acme/x-GGUF", state=state, pausable=True))
    for name, make_args in plan:
        if name == "apply_job" and which == "bare":  # a bare daemon's jobs run until the test finishes them
            _finish_with_winner(daemon, results["start_tune"].id, model)
        args = make_args(results)
        fn = getattr(daemon, name)
        if inspect.isasyncgenfunction(CLIENT_CALLS[name]):
            value = [line async for line in fn(*args)]
            assert all(isinstance(line, str) for line in value), name
        else:
            value = await fn(*args)
            declared = typing.get_type_hints(CLIENT_CALLS[name], vars(client_module))["return"]
            _check_type(value, declared, name)
        results[name] = value


def _finish_with_winner(daemon: DemoDaemon, job_id: str, model: str) -> None:
    from daemon.api.jobs import JobState, TuningResult

    saved = daemon.definitions[model].settings
    result = TuningResult(model=model, stamp="s", started_at=0.0, saved_settings=saved,
                          winner=1, winner_settings=saved.model_copy(update={"threads": 2}))
    daemon._job_book[job_id] = daemon._job_book[job_id].model_copy(
        update={"state": JobState.SUCCEEDED, "result": result})
