"""The add-model wizard's state: where the model comes from, will it fit, and the transfer's progress.

Qt-free. A local file is registered directly; a Hugging Face file is downloaded and an Ollama
model imported on the chosen node, and the daemon registers them when the transfer is done (LM
Studio's models: ``app.viewmodels.lmstudio_import``, its own tab with its own Import). The
fit estimate comes from the node before anything is downloaded (only the file's header is read).
Progress arrives as daemon events (``transfer.state``, ``transfer.progress``).

The node is typed (a name, an id or ``local``; on a daemon without a local agent the first node
it has, not ``local``) and sent as the node's id. Its runtimes are shown (``runtime_badges``) and the
runtime is picked among the ones it offers (``runtime_choices``; llama.cpp by default). A downloaded or imported model is a GGUF
file: llama.cpp only. For vLLM and MLX the local model may be a folder (a Hugging Face snapshot:
config.json and safetensors) as well as a file; vLLM also asks for the container image, by default
the one the node's vLLM offer names (``image_default``). The saved definition carries the runtime,
the image and the runtime's settings: the context field is llama.cpp's ``ctx_size`` and vLLM's
``max_model_len``; MLX has no context setting (``mlx_lm.server`` sizes its cache by itself), so
the field is not asked for there.

"How it runs here": for a GGUF file on the node, or one on Hugging Face before it is downloaded (its
header read over HTTP ranges by each node), for llama.cpp, the wizard asks the daemon's plan
(``DaemonApi.plan``, every online node) and lists each option (``plan_rows``: the node, GPU, split,
offload or CPU, the context that fits, free now or needs room, the flags). The best one is picked
at first; the user may pick another that fits now or once room is made. The saved definition takes
the picked option's node and the llama.cpp settings it names (``n_gpu_layers``, ``gpus``,
``split_mode``, ``tensor_split``, ``main_gpu``, ``ctx_size``); an option across nodes gives its
helper nodes too (``rpc_nodes``). A Hugging Face file is downloaded to the picked option's node,
and the daemon registers it with those settings and helpers (``DownloadQuery.settings``,
``rpc_nodes``). A plan that fails is shown (``plan_error``) and adding still works, with the fields
as typed.

An external endpoint (source ``external``, runtime ``external``) is no file and is placed on no
node: its base URL, the provider's model name and, optionally, the path of a file on the daemon's
machine holding the API key (a path, never the key itself). It carries no runtime settings.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import ValidationError

from app.viewmodels.downloads import byte_share, event_transfer, in_flight
from app.viewmodels.nodes import RuntimeBadge, available_runtimes, runtime_badges
from app.viewmodels.observable import Emitter, Observable
from app.viewmodels.settings_form import plain_validation
from daemon.api.client import DaemonError
from daemon.api.contracts import (
    DEFAULT_RUNTIME,
    RUNTIME_LABELS,
    FitReport,
    HfFileRef,
    LlamaCppSettings,
    OllamaModelInfo,
    RuntimeId,
    VllmSettings,
    profile,
    runtime_among,
    settings_type,
    settings_update,
)
from daemon.api.models import Event, ModelDefinition
from daemon.api.nodes import NodeView
from daemon.api.plan import STATE_LABELS, Plan, PlanOption, PlanQuery
from daemon.api.protocol import DaemonApi
from daemon.api.sources import DownloadQuery, FitQuery, OllamaImportQuery, Transfer

_LOGGER = logging.getLogger(__name__)

SourceKind = Literal["file", "hf", "ollama", "lmstudio", "external"]
GiB = 1 << 30
_SLUG_RE = re.compile(r"[^a-z0-9]+")
FIELDS = ("node", "path", "hf_repo", "hf_file", "ollama_store", "ollama_model", "model_id", "ctx_size", "image",
          "base_url", "provider_model", "api_key_file")
# The llama.cpp settings a plan option names: the saved definition takes them from the picked option.
PLACEMENT_SETTINGS = ("n_gpu_layers", "gpus", "split_mode", "tensor_split", "main_gpu", "ctx_size")
PICKABLE_STATES = ("free", "needs_room")
KIND_LABELS = {"gpu": "GPU", "split": "split across GPUs", "partial": "partial offload", "cpu": "CPU",
               "unified": "unified memory", "nodes": "across nodes"}

# The dialog's names for a definition's fields, in what it says of a refusal.
ADD_LABELS = {"id": "Model id", "served_name": "Model id", "model_path": "File", "node": "Node", "runtime": "Runtime",
              "settings.ctx_size": "Context", "settings": "Context", "base_url": "Base URL",
              "provider_model": "Provider's model", "api_key_file": "Key file", "memory_budget_gib": "Memory budget"}


def _is_absolute(path: str) -> bool:
    """Absolute on the daemon's machine, whatever its system: /x, C:\\x or \\\\server\\x."""
    return path.startswith(("/", "\\\\")) or bool(re.match(r"^[A-Za-z]:[\\/]", path))


def slug(text: str) -> str:
    return _SLUG_RE.sub("-", text.lower()).strip("-")[:40].strip("-") or "model"


def gib(value: int) -> str:
    return f"{value / GiB:.2f} GiB"


def describe_fit(report: FitReport) -> str:
    """One or two sentences a person can act on."""
    est = report.estimate
    head = "Fits" if report.fits else "Does not fit"
    text = (f"{head}: needs {gib(est.host_bytes)} of memory (weights {gib(est.weights_bytes)}, KV cache "
            f"{gib(est.kv_cache_bytes)}) with {est.ctx_size} tokens of context; {gib(report.memory_available)} "
            f"available, {gib(report.reserve_bytes)} kept in reserve.")
    for gpu in report.gpus:
        text += f" GPU {gpu.index}: {gib(gpu.needed_bytes)} of {gib(gpu.budget_bytes)}."
    text += f" Largest context that fits: {report.max_ctx_size} tokens."
    if report.max_gpu_layers is not None:
        text += f" GPU layers that fit: {report.max_gpu_layers}."
    trained = report.summary.context_length
    if trained and est.ctx_size > trained * max(1, est.parallel):  # per slot, beyond what it learned
        text += (f" Note: the model was trained on {trained} tokens of context; beyond that its answers "
                 "degrade (it fits in memory, but it is not a context it can use well).")
    return text


@dataclass(frozen=True)
class AddModelState:
    source: SourceKind = "hf"
    node: str = "local"
    path: str = ""
    hf_repo: str = ""
    hf_file: str = ""  # a file name, a glob (*Q4_K_M*.gguf) or a quant (Q4_K_M)
    ollama_store: str = ""
    ollama_model: str = ""
    ollama_models: tuple[OllamaModelInfo, ...] = ()
    model_id: str = ""
    ctx_size: int | None = None
    checking: bool = False
    fit: FitReport | None = None
    fit_text: str = ""
    transfer: Transfer | None = None
    busy: bool = False
    error: str | None = None
    done_ids: tuple[str, ...] = ()
    nodes: tuple[NodeView, ...] = ()
    runtime: RuntimeId = DEFAULT_RUNTIME
    image: str = ""  # vLLM: the container image; empty: image_default
    # "How it runs here" (llama.cpp, a GGUF file): the daemon's plan and the option picked (an index
    # into ``plan_options``), or why there is no plan.
    planning: bool = False
    plan: Plan | None = None
    plan_error: str | None = None
    picked: int | None = None
    # An external endpoint: no node, no file, no runtime settings.
    base_url: str = ""
    provider_model: str = ""
    api_key_file: str = ""  # a path on the daemon's machine, never the key itself

    @property
    def external(self) -> bool:
        return self.source == "external"

    @property
    def external_problem(self) -> str:
        """Why the external endpoint cannot be added as typed; empty when it can."""
        url, key_file = self.base_url.strip(), self.api_key_file.strip()
        if not url:
            return "The server's base URL, e.g. https://api.openai.com/v1."
        if not url.lower().startswith(("http://", "https://")) or len(url.split("://", 1)[1]) == 0:
            return "The base URL starts with http:// or https:// and names a host."
        if not self.provider_model.strip():
            return "The model name the server knows, e.g. gpt-4o-mini."
        if key_file and not _is_absolute(key_file):
            return "The API key file is an absolute path on the daemon's machine (the key stays in that file)."
        return ""

    @property
    def can_plan(self) -> bool:
        """A GGUF file on the node or on Hugging Face, for llama.cpp: the plan reads its header on each
        node (a Hugging Face file's over HTTP ranges: nothing is downloaded)."""
        if not profile(self.runtime).reads_gguf or self.planning:
            return False
        if self.source == "hf":
            return bool(self.hf_repo.strip() and self.hf_file.strip())
        return self.source == "file" and self.path.strip().lower().endswith(".gguf")

    @property
    def plan_options(self) -> tuple[PlanOption, ...]:
        return tuple(self.plan.options()) if self.plan is not None else ()

    @property
    def picked_option(self) -> PlanOption | None:
        options = self.plan_options
        return options[self.picked] if self.picked is not None and self.picked < len(options) else None

    def node_name(self, node_id: str) -> str:
        found = next((n for n in self.nodes if node_id in (n.id, n.name) or (node_id == "local" and n.local)), None)
        if found is None:
            return node_id[:12] or "the fleet"
        return "This machine" if found.local else found.name

    def pickable(self, index: int) -> bool:
        options = self.plan_options
        return 0 <= index < len(options) and options[index].state in PICKABLE_STATES and bool(options[index].node)

    @property
    def plan_rows(self) -> tuple[str, ...]:
        """One line per option: where, how, the context that fits, free now or needs room, the flags."""
        rows = []
        for o in self.plan_options:
            where = self.node_name(o.node) if o.node else "Across nodes"
            context = f"{o.ctx_size} tokens of context" if o.ctx_size else "no context fits"
            if o.max_ctx_size or o.max_ctx_size_empty:
                context += f" (largest now {o.max_ctx_size}, empty {o.max_ctx_size_empty})"
            parts = [f"{where}: {o.label}", KIND_LABELS.get(o.kind, o.kind), context,
                     STATE_LABELS.get(o.state, o.state)]
            if o.shares:  # across nodes: what each node holds
                parts.append("layers: " + ", ".join(f"{sh.layers} on {self.node_name(sh.node)}" for sh in o.shares))
            if o.args:
                parts.append(" ".join(o.args))
            if o.message and o.state not in PICKABLE_STATES:
                parts.append(o.message)
            rows.append(" · ".join(parts))
        return tuple(rows)

    @property
    def main_share_gib(self) -> float | None:
        """Across nodes: what the main node holds (GiB, rounded up), saved as the model's memory
        budget so the main node is held to its part, not to the whole model."""
        option = self.picked_option
        main = next((sh for sh in option.shares if sh.role == "main"), None) if option is not None else None
        if main is None or option is None or option.kind != "nodes":
            return None
        return max(0.01, math.ceil(main.needed_bytes * 100 / GiB) / 100)

    @property
    def rpc_nodes(self) -> tuple[str, ...]:
        """The helper nodes the picked option runs with (across nodes): the definition's rpc_nodes."""
        option = self.picked_option
        return tuple(option.rpc_nodes) if option is not None and option.kind == "nodes" else ()

    @property
    def plan_note(self) -> str:
        """Why there is no plan, or the nodes that could not answer; and what adding will do."""
        if self.plan_error:
            return f"No plan: {self.plan_error} You can still add the model with the settings as typed."
        if self.plan is None:
            return ""
        notes = [f"{self.node_name(e.node)} could not say: {e.message}" for e in self.plan.errors]
        if not self.plan_options:
            notes.insert(0, "No node can run this file.")
        elif self.picked_option is None:
            notes.insert(0, "No option fits: adding keeps the settings as typed.")
        elif self.rpc_nodes:
            helpers = ", ".join(self.node_name(n) for n in self.rpc_nodes)
            notes.insert(0, f"Runs across nodes: {self.node_name(self.picked_option.node)} runs it and "
                         f"{helpers} hold part of its layers (llama.cpp RPC, inside the nodes' encrypted links); "
                         f"its memory budget is the main node's part, {self.main_share_gib:.2f} GiB.")
        return " ".join(notes)

    @property
    def takes_folder(self) -> bool:
        """The runtime serves a model folder (vLLM, MLX) as well as a file."""
        return profile(self.runtime).takes_folder

    @property
    def asks_image(self) -> bool:
        return profile(self.runtime).container

    @property
    def asks_context(self) -> bool:
        """llama.cpp's ctx_size and vLLM's max_model_len; MLX has no context setting."""
        return profile(self.runtime).context_setting is not None

    @property
    def image_default(self) -> str:
        """The image the chosen node's vLLM offer names (what its agent would run), or empty."""
        node = self.chosen_node
        offer = next((o for o in node.runtimes if profile(o.runtime).container), None) if node is not None else None
        return offer.location or "" if offer is not None else ""

    @property
    def chosen_image(self) -> str | None:
        """The image saved with a vLLM model: the one typed, else the node's; None for other runtimes."""
        if not self.asks_image:
            return None
        return self.image.strip() or self.image_default or None

    @property
    def chosen_node(self) -> NodeView | None:
        """The node ``node`` names: its id, its name, ``local``, or a unique id prefix."""
        wanted = self.node.strip() or "local"
        exact = [n for n in self.nodes if wanted in (n.id, n.name) or (wanted == "local" and n.local)]
        found = exact or [n for n in self.nodes if len(wanted) >= 4 and n.id.startswith(wanted.lower())]
        return found[0] if len(found) == 1 else None

    @property
    def node_id(self) -> str:
        """What the daemon is sent: the chosen node's id (its sources API takes ids, not the name
        typed), else what was typed, for the daemon to say what is wrong with it."""
        node = self.chosen_node
        return node.id if node is not None else self.node.strip() or "local"

    @property
    def runtime_badges(self) -> tuple[RuntimeBadge, ...]:
        node = self.chosen_node
        return runtime_badges(node) if node is not None else ()

    @property
    def runtime_choices(self) -> tuple[tuple[str, str], ...]:
        """(runtime id, label) of the runtimes the chosen node offers this source; a GGUF download, an
        Ollama or an LM Studio import is for a runtime that reads one .gguf (llama.cpp)."""
        offered = available_runtimes(self.chosen_node)
        if self.external:
            return ()
        if self.source != "file":
            offered = tuple(r for r in offered if profile(r).reads_gguf)
        return tuple((r, RUNTIME_LABELS.get(r, r)) for r in offered)

    @property
    def runtime_note(self) -> str:
        """Why the runtime cannot be picked freely: nothing offered, or the node has not reported."""
        node = self.chosen_node
        if self.external:
            return ""
        if node is None or not node.runtimes:
            return "The node has not reported its runtimes yet: llama.cpp, the default."
        if not self.runtime_choices:
            why = next((b.tooltip for b in self.runtime_badges if profile(b.runtime).default), "")
            return f"No runtime for this model there. {why}".strip()
        return ""

    @property
    def can_check(self) -> bool:
        if self.source == "file":  # the estimate reads a GGUF header: a folder has none
            path = self.path.strip()
            return bool(path) and (not self.takes_folder or path.lower().endswith(".gguf"))
        return self.source == "hf" and bool(self.hf_repo.strip() and self.hf_file.strip())

    @property
    def running(self) -> bool:
        return in_flight(self.transfer)

    @property
    def can_add(self) -> bool:
        if self.external:
            return not self.external_problem and not self.busy
        ready = {"file": bool(self.path.strip()), "hf": self.can_check,
                 "ollama": bool(self.ollama_model.strip()),
                 "lmstudio": False}[self.source]  # its own Import (app.viewmodels.lmstudio_import)
        placeable = self.runtime in dict(self.runtime_choices)
        imaged = not self.asks_image or self.source != "file" or bool(self.chosen_image)
        return ready and placeable and imaged and not self.busy and not self.running

    @property
    def progress(self) -> float | None:
        return byte_share(self.transfer)

    @property
    def progress_text(self) -> str:
        t = self.transfer
        if t is None:
            return ""
        parts = [t.state.value.capitalize() + (f" ({t.stage})" if t.stage and t.state.value == "running" else "")]
        if t.bytes_total:
            parts.append(f"{t.bytes_done / GiB:.2f} of {gib(t.bytes_total)}")
        if t.speed_bps:  # the daemon's, smoothed (daemon.sources.transfer_log.RateMeter)
            parts.append(f"{t.speed_bps / 2**20:.1f} MiB/s" + (f", {int(t.eta_s)} s left" if t.eta_s is not None else ""))
        if t.error:
            parts.append(t.error)
        if self.done_ids:
            parts.append("added " + ", ".join(self.done_ids))
        if t.existing:
            parts.append("already added as " + ", ".join(t.existing) + " (not added again)")
        return " — ".join(parts)


class AddModelViewModel:
    def __init__(self, client: DaemonApi, events: Emitter[Event] | None = None) -> None:
        """``events``: the fleet's event emitter, for transfer progress."""
        self.client = client
        self.state: Observable[AddModelState] = Observable(AddModelState())
        self._unsubscribe = events.subscribe(self.on_event) if events is not None else (lambda: None)

    def close(self) -> None:
        self._unsubscribe()

    def _set(self, **changes: Any) -> None:
        self.state.set(replace(self.state.value, **changes))

    def _settle_runtime(self) -> None:
        """Keep the runtime among the chosen node's: back to llama.cpp (or the first one) otherwise."""
        s = self.state.value
        choices = [r for r, _label in s.runtime_choices]
        if s.runtime not in choices and (wanted := runtime_among(choices)) != s.runtime:
            self._set(runtime=wanted)

    def set_source(self, source: SourceKind) -> None:
        self._set(source=source, fit=None, fit_text="", error=None, plan=None, plan_error=None, picked=None)
        self._settle_runtime()

    def set_field(self, name: str, value: Any) -> None:
        if name not in FIELDS:
            raise ValueError(f"no field {name!r}")
        if name == "ctx_size":
            value = int(value) if str(value).strip() else None
        changes: dict[str, Any] = {name: value, "fit": None, "fit_text": "", "error": None}
        if name in ("path", "hf_repo", "hf_file", "ctx_size"):  # another question: the old plan no longer answers it
            changes.update(plan=None, plan_error=None, picked=None)
        elif name == "node":  # a node typed by hand: no option picked any more (the plan stays listed)
            changes.update(picked=None)
        self._set(**changes)
        if name == "node":
            self._settle_runtime()

    def set_runtime(self, runtime: str) -> None:
        """Pick the runtime; only one the chosen node offers (``runtime_choices``) is taken."""
        choices = dict(self.state.value.runtime_choices)
        if runtime not in choices:
            raise ValueError(f"{RUNTIME_LABELS.get(runtime, runtime)} is not offered here "
                             f"(offered: {', '.join(choices.values()) or 'none'})")
        self._set(runtime=runtime, error=None, fit=None, fit_text="", plan=None, plan_error=None, picked=None)

    async def check_plan(self) -> Plan | None:
        """Ask every online node how the file runs there; the best option is picked. A failure is
        shown in ``plan_error`` and adding stays possible."""
        s = self.state.value
        if not s.can_plan:
            return None
        self._set(planning=True, plan=None, plan_error=None, picked=None, error=None)
        try:
            hf = self._hf_ref() if s.source == "hf" else None  # a Hugging Face file: only its header is read
            plan = await self.client.plan(PlanQuery(model_path=None if hf else s.path.strip(), hf=hf,
                                                    ctx_size=s.ctx_size, settings=self._settings()))
        except (DaemonError, ValueError) as exc:
            self._set(planning=False, plan_error=getattr(exc, "message", str(exc)))
            return None
        options = plan.options()
        best = plan.best()
        picked = next((i for i, o in enumerate(options) if o is best and o.node), None)
        self._set(planning=False, plan=plan)
        if picked is not None:
            self.pick_option(picked)
        return plan

    def pick_option(self, index: int | None) -> None:
        """Pick one of the plan's options (one that fits now or once room is made), or none."""
        s = self.state.value
        if index is None:
            self._set(picked=None)
            return
        if not s.pickable(index):
            option = s.plan_options[index] if 0 <= index < len(s.plan_options) else None
            why = STATE_LABELS.get(option.state, option.state) if option is not None else "no such option"
            raise ValueError(f"That option cannot be picked: {why}.")
        option = s.plan_options[index]
        self._set(picked=index, node=option.node, error=None)
        self._settle_runtime()

    async def load_nodes(self) -> None:
        """The nodes and what each offers (the wizard shows the chosen node's runtimes)."""
        try:
            nodes = tuple(await self.client.list_nodes())
        except DaemonError as exc:
            self._set(error=exc.message)
            return
        s = self.state.value
        if s.node.strip() in ("", "local") and nodes and not any(n.local for n in nodes):
            first = nodes[0]  # no local agent: "local" is no node here; the first the daemon has
            unique = sum(n.name == first.name for n in nodes) == 1
            self._set(nodes=nodes, node=first.name if unique else first.id)
        else:
            self._set(nodes=nodes)
        self._settle_runtime()

    def _hf_ref(self) -> HfFileRef:
        s = self.state.value
        wanted = s.hf_file.strip()
        looks_like_file = wanted.lower().endswith(".gguf") or any(c in wanted for c in "*?[")
        return HfFileRef(repo=s.hf_repo.strip(), file=wanted if looks_like_file else None,
                         quant=None if looks_like_file else wanted)

    def _settings(self) -> LlamaCppSettings:
        return LlamaCppSettings(ctx_size=self.state.value.ctx_size)

    def _placed_settings(self) -> LlamaCppSettings:
        """The typed settings with the picked option's placement (its GPUs, layers and context)."""
        settings = self._settings()
        option = self.state.value.picked_option
        if option is None:
            return settings
        placed = {k: getattr(option.settings, k) for k in PLACEMENT_SETTINGS}
        placed["n_gpu_layers"] = option.settings.n_gpu_layers if option.settings.n_gpu_layers is not None \
            else option.n_gpu_layers
        placed["ctx_size"] = settings.ctx_size or option.settings.ctx_size or option.ctx_size or None
        return settings.model_copy(update=placed)

    def _runtime_settings(self) -> dict[str, Any]:
        """The chosen runtime's settings from the wizard's fields (the others stay at their defaults)."""
        s = self.state.value
        if not profile(s.runtime).on_node:  # an endpoint's fields are the wizard's own
            return {}
        kind = settings_type(s.runtime)
        chosen = self._placed_settings() if kind is LlamaCppSettings else \
            VllmSettings(max_model_len=s.ctx_size) if kind is VllmSettings else kind()
        return settings_update(chosen)

    async def check_fit(self) -> FitReport | None:
        s = self.state.value
        if not s.can_check:
            return None
        self._set(checking=True, error=None)
        try:
            if s.source == "file":
                query = FitQuery(node=s.node_id, model_path=s.path.strip(), settings=self._settings())
            else:
                query = FitQuery(node=s.node_id, hf=self._hf_ref(), settings=self._settings())
            report = await self.client.fit(query)
        except (DaemonError, ValueError) as exc:
            self._set(checking=False, error=getattr(exc, "message", str(exc)))
            return None
        self._set(checking=False, fit=report, fit_text=describe_fit(report))
        return report

    async def load_ollama_models(self) -> None:
        s = self.state.value
        try:
            models = await self.client.ollama_models(s.node_id, s.ollama_store.strip() or None)
        except DaemonError as exc:
            self._set(error=exc.message, ollama_models=())
            return
        first = models[0].model if models and not s.ollama_model else s.ollama_model
        self._set(ollama_models=tuple(models), ollama_model=first, error=None)

    async def add(self) -> None:
        s = self.state.value
        if not s.can_add:
            return
        self._set(busy=True, error=None, done_ids=(), transfer=None)
        model_id = s.model_id.strip() or None
        try:
            if s.external:
                name = model_id or slug(s.provider_model.strip())
                view = await self.client.create_model(ModelDefinition(
                    id=name, served_name=name, runtime="external", model_path="(external)",  # no file: placed nowhere
                    base_url=s.base_url.strip(),
                    provider_model=s.provider_model.strip(), api_key_file=s.api_key_file.strip() or None))
                self._set(busy=False, done_ids=(view.definition.id,))
                return
            if s.source == "file":
                path = s.path.strip()
                name = model_id or slug(os.path.basename(path.rstrip("/\\")).removesuffix(".gguf"))
                view = await self.client.create_model(ModelDefinition(
                    id=name, served_name=name, node=s.node_id, model_path=path, runtime=s.runtime,
                    image=s.chosen_image, rpc_nodes=list(s.rpc_nodes), memory_budget_gib=s.main_share_gib,
                    **self._runtime_settings()))
                self._set(busy=False, done_ids=(view.definition.id,))
                return
            if s.source == "hf":  # registered when done, with the picked option's settings and helpers
                placed = self._placed_settings() if s.picked_option is not None or s.ctx_size else None
                transfer = await self.client.download(DownloadQuery(node=s.node_id, hf=self._hf_ref(), model_id=model_id,
                                                                    settings=placed, rpc_nodes=list(s.rpc_nodes)))
            else:
                transfer = await self.client.import_ollama(OllamaImportQuery(
                    node=s.node_id, model=s.ollama_model.strip(), store=s.ollama_store.strip() or None,
                    model_id=model_id))
        except ValidationError as exc:  # said as the dialog names its fields
            self._set(busy=False, error=plain_validation(exc, ADD_LABELS))
            return
        except DaemonError as exc:
            field, _, why = exc.message.partition(": ")
            self._set(busy=False, error=f"{ADD_LABELS[field]}: {why}" if field in ADD_LABELS and why else exc.message)
            return
        except ValueError as exc:
            self._set(busy=False, error=str(exc))
            return
        self._set(busy=False, transfer=transfer)

    async def cancel(self) -> None:
        t = self.state.value.transfer
        if t is not None and self.state.value.running:
            try:
                self._set(transfer=await self.client.cancel_transfer(t.id))
            except DaemonError as exc:
                self._set(error=exc.message)

    def on_event(self, event: Event) -> None:
        t = self.state.value.transfer
        transfer = event_transfer(event, t) if t is not None else None
        if transfer is None:
            return
        if event.type == "transfer.state":
            self._set(transfer=transfer, done_ids=tuple(transfer.registered),
                      error=transfer.error or transfer.register_error)
        else:
            self._set(transfer=transfer)
