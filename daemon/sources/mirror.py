"""The daemon as the fleet's checked mirror: push a model version this machine has to another node.

``POST /api/mirror`` (``daemon.api.mirror.MirrorQuery``) names a registered model on ``local``, or
files on ``local``; ``Mirror.start`` checks the request at once and answers a ``Transfer`` of kind
``mirror`` (``daemon.sources.transfers``: listed, evented with ``transfer.state`` /
``transfer.progress``, but run here rather than followed on an agent). In the background:

1. **read**: the daemon reads the files itself, from the local agent's models folder
   (``DaemonPaths.local_agent_home / "models"``): it is the same machine and the same user, so the
   local agent need not stream them, and the mirror works while that agent restarts. A path is
   resolved (links followed) and must lie inside that folder, its name relative to it passing
   ``core.safe_names``; nothing outside the folder is ever opened. A file whose download still
   runs here (its ``.{name}.partial`` beside it, as ``agent.sources.fetch`` writes it, or an
   unfinished local download naming it) is refused, 409 ``download_in_progress``.
2. **hash**: each file's size and SHA-256, stated to the node with the bytes.
3. **push** each file (``agent.api.mirror``): the node says what it has (``GET /mirror/{name}``);
   bytes there whose SHA-256 matches the same prefix here are kept and the push goes on from them
   (a cut transfer resumes), else it starts again from 0. A cut push is tried again, up to
   ``MAX_TRIES`` times, each from what the node has by then. The node hashes every file once it has
   it and refuses another SHA-256; then every partial of the version is dropped there and the
   transfer fails, with nothing placed.
4. **commit**: the node renames the version's files into place only once all of them verified.
5. **register** (unless asked not to): a registered model is copied to the node (its settings, the
   new paths, its ``--mmproj`` rewritten; adapters are not mirrored and are left off); files named by
   path are registered as a download's are (``daemon.sources.registration``).

**cancel** (``POST /api/transfers/{id}/cancel``, ``Mirror.cancel``): the push task is stopped, its
connection closes, the node drops every partial of the version (``DELETE /mirror/{name}``) and the
transfer is ``cancelled``. Once the version is being placed (commit, register) it is let finish:
whole or nothing. **pause** (``Mirror.pause``) stops the push the same way but the node keeps its
partials; **resume** and **retry** (``Mirror.again``) run the mirror again from step 1, so each file
goes on from the bytes the node has (none after a cancel or a checksum refusal: from 0). The request
is kept in memory: after a daemon restart a finished mirror is started anew instead.

Test seams: ``cut_at`` (the next push breaks once its stream passes that byte, after the node has
received the bytes before it), ``tamper_at`` (that byte of the next push is flipped, once),
``hold_at`` (the next push stops at that byte, once the node holds the bytes before it, and waits
until cancelled; ``held`` is set then), ``chunk`` and ``pushes`` (where each push began: name and offset).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from agent.api.client import AgentError
from agent.api.mirror import MirrorClient, MirrorFile
from agent.api.sources import (
    FINISHED_TRANSFERS,
    SETTLED_TRANSFERS,
    ImportedModel,
    TransferInfo,
    TransferState,
)
from core.hashing import file_sha256
from core.safe_names import UnsafeName, check_relative_name, commonpath_inside
from daemon.api.mirror import MirrorQuery
from daemon.api.models import LOCAL_NODE, ModelDefinition
from daemon.api.sources import Registration, Transfer
from daemon.errors import DaemonProblem, json_response, read_body
from daemon.events import EventBus
from daemon.history import History
from daemon.models.registry import Registry, RegistryError
from daemon.nodes.links import Links
from daemon.sources.registration import Registered, model_id_from, register_models
from daemon.sources.transfers import Transfers

_LOGGER = logging.getLogger(__name__)

CHUNK = 1 << 20
MAX_TRIES = 5
PROGRESS_S = 0.5
MMPROJ_FLAGS = ("--mmproj", "-mm")
RETRYABLE = {"unreachable", "timeout", "mirror_busy", "mirror_offset_mismatch"}
DISCARD_WAIT_S = 10.0  # a node lets go of a cut push once it sees its connection close
Spawn = Callable[[Coroutine[Any, Any, None]], None]


class MirrorFailed(Exception):
    """The mirror stopped; the message says why, in the user's words."""


class _Cut(Exception):
    """The test seam's break in a push's stream."""


@dataclass(frozen=True)
class SourceFile:
    path: Path  # resolved, inside the models folder
    name: str  # relative to the models folder; the same name on the node
    size: int


def projector_of(args: list[str]) -> str | None:
    """The ``--mmproj`` file in a model's extra arguments, if it has one."""
    for n, arg in enumerate(args):
        if arg in MMPROJ_FLAGS and n + 1 < len(args):
            return args[n + 1]
        if arg.startswith("--mmproj="):
            return arg.split("=", 1)[1]
    return None


def with_projector(args: list[str], path: str) -> list[str]:
    """``args`` with the ``--mmproj`` file replaced by ``path``."""
    out, skip = [], False
    for n, arg in enumerate(args):
        if skip:
            skip = False
        elif arg in MMPROJ_FLAGS and n + 1 < len(args):
            out += [arg, path]
            skip = True
        elif arg.startswith("--mmproj="):
            out.append(f"--mmproj={path}")
        else:
            out.append(arg)
    return out


class Mirror:
    def __init__(self, links: Links, transfers: Transfers, registry: Registry, events: EventBus, history: History,
                 models_dir: Path, spawn: Spawn) -> None:
        self._links = links
        self._transfers = transfers
        self._registry = registry
        self._events = events
        self._history = history
        self.models_dir = models_dir  # the local agent's models folder: the only place read
        self._spawn = spawn
        self.chunk = CHUNK
        self.cut_at: int | None = None  # test seam
        self.tamper_at: int | None = None  # test seam
        self.pushes: list[tuple[str, int]] = []  # test seam: (name, offset) of each push
        self.hold_at: int | None = None  # test seam
        self.held = asyncio.Event()  # test seam: a push waits at hold_at
        self._tasks: dict[str, asyncio.Task[None]] = {}  # transfer id -> its running mirror
        self._placing: set[str] = set()  # past the push: let finish, not cancelled
        self._jobs: dict[str, tuple[list[SourceFile], MirrorQuery, ModelDefinition | None]] = {}  # for resume, retry

    # --- the request -----------------------------------------------------------------------------
    async def start(self, query: MirrorQuery) -> Transfer:
        """Check ``query`` and start its mirror; refusals are ``DaemonProblem``s, raised before anything moves."""
        if query.source_node != LOCAL_NODE:
            raise DaemonProblem(422, "mirror_source_not_local",
                                f"the daemon mirrors files of this machine (node '{LOCAL_NODE}'), not of "
                                f"'{query.source_node}'")
        source: ModelDefinition | None = None
        if query.model_id is not None:
            source = self._registry.require(query.model_id)
            if source.node != LOCAL_NODE:
                raise DaemonProblem(422, "mirror_source_not_local",
                                    f"model '{source.id}' runs on node '{source.node}'; the daemon mirrors "
                                    f"models of this machine ('{LOCAL_NODE}')")
            paths = [source.model_path, *filter(None, [projector_of(source.extra_args)])]
        else:
            paths = [p for p in (query.path, query.projector_path) if p]
        if query.target_node == LOCAL_NODE:
            raise DaemonProblem(422, "mirror_same_node", "the files are on this machine already")
        self._links.online_client(query.target_node)
        files = [self._source(p) for p in paths]
        if len({f.name for f in files}) != len(files):
            raise DaemonProblem(422, "invalid_request", "the model and its projector are one file")
        label = f"{files[0].name} -> {query.target_node}"
        info = TransferInfo(id="", kind="mirror", label=label[:300], state=TransferState.RUNNING, stage="checking",
                            bytes_total=sum(f.size for f in files), files=[f.name for f in files],
                            created_at=time.time(), pausable=True)
        transfer = await self._transfers.own(query.target_node, info)
        for gone in [t for t in self._jobs if self._transfers.get(t) is None]:  # no longer listed
            del self._jobs[gone]
        self._jobs[transfer.id] = (files, query, source)
        self._spawn(self._run(transfer.id, files, query, source))
        return transfer

    async def pause(self, transfer_id: str) -> None:
        """Stop a running mirror's push; the node keeps what it received for ``again`` to go on from."""
        transfer = self._transfers.get(transfer_id)
        if transfer is None or transfer.kind != "mirror" or transfer.state in SETTLED_TRANSFERS:
            return
        if transfer_id in self._placing:
            raise DaemonProblem(409, "transfer_refused", f"mirror {transfer_id} is being placed on the node; "
                                "it finishes whole (or not at all) and cannot be paused now")
        task = self._tasks.get(transfer_id)
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        current = self._transfers.get(transfer_id)
        if current is not None and current.state not in SETTLED_TRANSFERS:  # not finished before the pause
            await self._transfers.update(transfer_id, current.model_copy(update={"state": TransferState.PAUSED,
                                                                                "stage": "paused"}))

    async def again(self, transfer_id: str) -> None:
        """Run a paused, failed or cancelled mirror again: each file goes on from what the node has."""
        transfer = self._transfers.get(transfer_id)
        job = self._jobs.get(transfer_id)
        if transfer is None or job is None:
            raise DaemonProblem(409, "transfer_refused", f"the daemon restarted since mirror {transfer_id} began "
                                "and no longer has its request: start the mirror anew (what the node kept is "
                                "used again)")
        if transfer.state not in SETTLED_TRANSFERS:
            return  # running already
        if (finishing := self._tasks.get(transfer_id)) is not None:
            await asyncio.wait([finishing])  # its end is said before its task is over
            transfer = self._transfers.get(transfer_id) or transfer
        old_files, query, source = job
        files = [self._source(f.name) for f in old_files]  # checked again: still here, not being downloaded
        self._links.online_client(query.target_node)
        self._jobs[transfer_id] = (files, query, source)
        update = {"state": TransferState.RUNNING, "stage": "checking", "error": None, "finished_at": None,
                  "bytes_total": sum(f.size for f in files)}
        await self._transfers.update(transfer_id, transfer.model_copy(update=update))
        self._spawn(self._run(transfer_id, files, query, source))

    def _source(self, raw: str) -> SourceFile:
        """``raw`` (absolute, or relative to the models folder) as a file inside the models folder."""
        root = Path(os.path.realpath(self.models_dir))
        given = Path(raw).expanduser()
        candidate = given if given.is_absolute() else self.models_dir / given
        real = Path(os.path.realpath(candidate))
        if real == root or not commonpath_inside(root, real):
            raise DaemonProblem(422, "outside_models_folder",
                                f"{raw} is not in this machine's models folder ({self.models_dir}); the mirror "
                                "reads nothing else")
        name = real.relative_to(root).as_posix()
        try:
            check_relative_name(name, "file name")
        except UnsafeName as exc:
            raise DaemonProblem(422, "unsafe_name", str(exc)) from exc
        if self._downloading(real) or self._downloading(candidate):
            raise DaemonProblem(409, "download_in_progress",
                                f"{name} is still being downloaded on this machine; mirror it once that is done")
        if not real.is_file():
            raise DaemonProblem(404, "mirror_file_not_found", f"no file {name} in this machine's models folder")
        return SourceFile(real, name, real.stat().st_size)

    def _downloading(self, path: Path) -> bool:
        if path.with_name(f".{path.name}.partial").exists():  # agent.sources.fetch.partial_path
            return True
        return any(t.node == LOCAL_NODE and t.kind != "mirror" and t.state not in FINISHED_TRANSFERS
                   and any(f.rsplit("/", 1)[-1] == path.name for f in t.files) for t in self._transfers.all())

    # --- the work --------------------------------------------------------------------------------
    async def _run(self, transfer_id: str, files: list[SourceFile], query: MirrorQuery,
                   source: ModelDefinition | None) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks[transfer_id] = task
        try:
            current = self._transfers.get(transfer_id)
            if current is not None and current.state not in SETTLED_TRANSFERS:  # not cancelled/paused before it began
                await self._mirror(transfer_id, files, query, source)
        except Exception as exc:
            _LOGGER.exception("mirror %s failed", transfer_id)
            await self._finish(transfer_id, TransferState.FAILED, error=f"the mirror failed: {exc}")
        finally:
            self._tasks.pop(transfer_id, None)
            self._placing.discard(transfer_id)

    async def cancel(self, transfer_id: str) -> None:
        """Stop a running mirror: its push ends, the node drops what it received of the version, and the
        transfer is ``cancelled``. One already being placed is let finish (whole or nothing)."""
        transfer = self._transfers.get(transfer_id)
        if transfer is None or transfer.kind != "mirror" or transfer.state in FINISHED_TRANSFERS:
            return
        task = self._tasks.get(transfer_id)
        if task is not None:
            if transfer_id not in self._placing:
                task.cancel()
            await asyncio.wait([task])  # not ``await task``: its cancellation is not this caller's
        current = self._transfers.get(transfer_id)
        if current is None or current.state in FINISHED_TRANSFERS:
            return  # it finished (placed, or failed) before the cancel reached it
        kept: list[str] = []
        try:
            client = MirrorClient(self._links.online_client(transfer.node))
        except DaemonProblem as exc:
            kept, why = list(transfer.files), exc.message
        else:
            kept, why = await self._discard(client, transfer.files), ""
        error = None
        if kept:
            error = f"cancelled; the node kept what it received of {', '.join(kept)}" + (f": {why}" if why else "")
        await self._finish(transfer_id, TransferState.CANCELLED, error=error)

    async def _mirror(self, transfer_id: str, files: list[SourceFile], query: MirrorQuery,
                      source: ModelDefinition | None) -> None:
        version: list[MirrorFile] = []
        client: MirrorClient | None = None
        try:
            for f in files:
                sha = await asyncio.to_thread(file_sha256, f.path)
                if f.path.stat().st_size != f.size:
                    raise MirrorFailed(f"{f.name} changed while it was read; try again")
                version.append(MirrorFile(name=f.name, size=f.size, sha256=sha))
            client = MirrorClient(self._links.online_client(query.target_node))
            done = 0
            for f, file in zip(files, version, strict=True):
                await self._step(transfer_id, f"sending {file.name}", done)
                await self._send(transfer_id, client, f, file, done)
                done += file.size
            self._placing.add(transfer_id)
            await self._step(transfer_id, "placing", done)
            placed = (await client.commit(version)).paths
        except (MirrorFailed, AgentError, DaemonProblem, OSError) as exc:
            message = exc.message if isinstance(exc, AgentError | DaemonProblem) else str(exc)
            if client is not None and isinstance(exc, AgentError) and exc.code == "mirror_checksum_mismatch":
                await self._discard(client, [f.name for f in version])  # whole or nothing: no partial stays
            await self._finish(transfer_id, TransferState.FAILED, error=message)
            return
        result = ImportedModel(name=Path(placed[0]).name.removesuffix(".gguf"), model_path=placed[0],
                               projector_path=placed[1] if len(placed) > 1 else None, size=version[0].size,
                               sha256=version[0].sha256, origin=f"mirror of {files[0].name}")
        placed_as = Registered()
        if query.register_model:
            await self._step(transfer_id, "registering", sum(f.size for f in version))
            placed_as = await self._register(transfer_id, query, source, result)
        await self._finish(transfer_id, TransferState.DONE, result=[result], registered=placed_as.ids,
                           register_error=placed_as.error, existing=placed_as.existing)

    async def _send(self, transfer_id: str, client: MirrorClient, f: SourceFile, file: MirrorFile,
                    done_before: int) -> None:
        last_error = ""
        for attempt in range(MAX_TRIES):
            if attempt:
                await asyncio.sleep(min(0.2 * 2 ** attempt, 5.0))  # a node that restarts, a busy receiver
            try:
                state = await client.state(file.name)
                if state.complete:
                    if state.size == file.size and state.sha256 == file.sha256:
                        return  # the node has these bytes in place already
                    raise MirrorFailed(f"the node has another file at {file.name}; nothing was changed")
                offset = 0
                if 0 < state.size <= file.size and \
                        await asyncio.to_thread(file_sha256, f.path, limit=state.size) == state.sha256:
                    offset = state.size
                self.pushes.append((file.name, offset))
                answer = await client.push(file, offset, self._body(transfer_id, client, f, offset, done_before))
                if answer.size == file.size:
                    return
                last_error = f"the node has {answer.size} of {file.size} bytes"
            except _Cut:
                last_error = "the push was cut"
            except AgentError as exc:
                if exc.code not in RETRYABLE:
                    raise
                last_error = exc.message
            _LOGGER.info("mirror of %s: %s; going on from what the node has", file.name, last_error)
        raise MirrorFailed(f"{file.name} did not get through in {MAX_TRIES} tries: {last_error}")

    async def _body(self, transfer_id: str, client: MirrorClient, f: SourceFile, offset: int,
                    done_before: int) -> AsyncIterator[bytes]:
        position, shown = offset, 0.0
        with f.path.open("rb") as fh:
            fh.seek(offset)
            while position < f.size:
                block = await asyncio.to_thread(fh.read, min(self.chunk, f.size - position))
                if not block:
                    raise MirrorFailed(f"{f.name} shrank while it was sent")
                if self.tamper_at is not None and position <= self.tamper_at < position + len(block):
                    at = self.tamper_at - position
                    block = block[:at] + bytes([block[at] ^ 0xFF]) + block[at + 1:]
                    self.tamper_at = None
                if self.cut_at is not None and position + len(block) > self.cut_at:
                    await self._cut(client, f, position)
                if self.hold_at is not None and position + len(block) > self.hold_at:
                    await self._hold(client, f, position)
                yield block
                position += len(block)
                if time.monotonic() - shown >= PROGRESS_S or position == f.size:
                    shown = time.monotonic()
                    await self._step(transfer_id, None, done_before + position)

    @staticmethod
    async def _node_holds(client: MirrorClient, f: SourceFile, position: int) -> None:
        """Return once the node holds every byte of ``f`` before ``position`` (or after 500 looks)."""
        for _ in range(500):
            if (await client.state(f.name)).size >= position:
                return
            await asyncio.sleep(0.01)

    async def _cut(self, client: MirrorClient, f: SourceFile, position: int) -> None:
        """The seam's break: once the node holds every byte before ``position``, the stream stops."""
        self.cut_at = None
        await self._node_holds(client, f, position)
        raise _Cut(f"cut at {position}")

    async def _hold(self, client: MirrorClient, f: SourceFile, position: int) -> None:
        """The seam's pause: once the node holds every byte before ``position``, wait until cancelled."""
        self.hold_at = None
        await self._node_holds(client, f, position)
        self.held.set()
        await asyncio.Event().wait()

    async def _discard(self, client: MirrorClient, names: list[str]) -> list[str]:
        """Drop the node's partials of ``names``; the names it kept (it could not be reached, or still holds
        a push open past ``DISCARD_WAIT_S``)."""
        kept: list[str] = []
        for name in names:
            deadline = time.monotonic() + DISCARD_WAIT_S
            while True:
                try:
                    await client.discard(name)
                    break
                except AgentError as exc:
                    if exc.code == "mirror_busy" and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)  # the node has not yet seen the cut push's connection close
                        continue
                    _LOGGER.warning("could not drop the partial %s on the node: %s", name, exc.message)
                    kept.append(name)
                    break
        return kept

    # --- the transfer's view -----------------------------------------------------------------------
    async def _step(self, transfer_id: str, stage: str | None, bytes_done: int) -> None:
        current = self._transfers.get(transfer_id)
        if current is not None:
            update: dict[str, Any] = {"bytes_done": bytes_done}
            if stage is not None:
                update["stage"] = stage
            await self._transfers.update(transfer_id, current.model_copy(update=update))

    async def _finish(self, transfer_id: str, state: TransferState, **fields: Any) -> None:
        current = self._transfers.get(transfer_id)
        if current is None:
            return
        update = {"state": state, "stage": state.value, "finished_at": time.time(), **fields}
        await self._transfers.update(transfer_id, current.model_copy(update=update))
        await self._history.audit("admin", f"mirror.{state.value}", transfer_id, fields.get("error") or "")

    async def _register(self, transfer_id: str, query: MirrorQuery, source: ModelDefinition | None,
                        result: ImportedModel) -> Registered:
        transfer = self._transfers.get(transfer_id)
        assert transfer is not None
        if source is None:  # files named by path: registered as a download's are
            done = transfer.model_copy(update={"result": [result]})
            return await register_models(self._registry, self._events, self._history, done,
                                         Registration(model_id=query.register_id, served_name=query.served_name))
        taken = {m.id for m in self._registry.all()}
        model_id = query.register_id if query.register_id and query.register_id not in taken \
            else model_id_from(source.id, taken)
        served = query.served_name or model_id
        if self._registry.by_served_name(served) is not None:
            served = model_id
        args = with_projector(source.extra_args, result.projector_path) if result.projector_path \
            else list(source.extra_args)
        definition = ModelDefinition.model_validate({
            **source.model_dump(), "id": model_id, "served_name": served, "node": transfer.node,
            "model_path": result.model_path, "extra_args": args, "adapters": [], "auto_start": False,
            "description": f"Mirrored from {source.id}"[:500]})
        try:
            await self._registry.add(definition)
        except RegistryError as exc:
            return Registered(error=f"{model_id}: {exc.message}")
        self._events.publish("model.added", model_id)
        await self._history.audit("admin", "model.add", model_id, f"from mirror {transfer_id}")
        return Registered([model_id])


class MirrorApi:
    """``POST /api/mirror``: body ``MirrorQuery``; 202 ``Transfer``."""

    def __init__(self, mirror: Mirror) -> None:
        self._mirror = mirror

    async def start(self, request: web.Request) -> web.Response:
        query = await read_body(request, MirrorQuery, 64 * 1024)
        return json_response(await self._mirror.start(query), 202)
