"""The Discover page: find a model on the Hugging Face hub, see its quants and whether each fits a
node, and download one; with no search, the curated catalog (short names, and what fits this machine).

Everything goes through the daemon (``DaemonApi.hub_search``, ``hub_repo_files``, ``hub_catalog``);
"will it fit" is the daemon's fit API asked per online node for the quant's file read by ranges on the
hub (``fit`` with ``hf``), and a download is the daemon's download API (``download``), the same transfer
the add-model wizard starts: its progress shows on the Models page, and the model is registered when
it is done. A search started while another runs wins: the older answer is dropped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace

from app.viewmodels.fleet import FleetViewModel
from app.viewmodels.observable import Observable
from daemon.api.client import DaemonError
from daemon.api.contracts import HfFileRef
from daemon.api.hub import CatalogEntry, CatalogView, HubRepo, HubRepoFiles
from daemon.api.protocol import DaemonApi
from daemon.api.sources import DownloadQuery, FitQuery, Transfer

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeFit:
    """Whether one quant fits one node: the daemon's fit report in a line."""

    node: str
    node_name: str
    fits: bool | None  # None: the node could not say (the reason is in ``text``)
    text: str


@dataclass(frozen=True)
class DiscoverState:
    query: str = ""
    searching: bool = False
    results: tuple[HubRepo, ...] = ()
    message: str | None = None          # no hits, or why the search failed
    catalog: CatalogView | None = None
    catalog_error: str | None = None
    repo: str | None = None             # the repository opened
    files: HubRepoFiles | None = None
    files_error: str | None = None
    loading_files: bool = False
    fit_file: str | None = None         # the quant whose fit is shown
    fits: tuple[NodeFit, ...] = ()
    checking: bool = False
    downloaded: str | None = None       # what the last download started, in a line
    download_error: str | None = None


class DiscoverViewModel:
    def __init__(self, fleet: FleetViewModel) -> None:
        self.fleet = fleet
        self.client: DaemonApi = fleet.client
        self.state: Observable[DiscoverState] = Observable(DiscoverState())
        self._search_seq = 0

    def _set(self, **changes: object) -> None:
        self.state.set(replace(self.state.value, **changes))  # type: ignore[arg-type]

    async def load_catalog(self) -> None:
        try:
            catalog = await self.client.hub_catalog()
        except DaemonError as exc:
            self._set(catalog_error=exc.message)
            return
        self._set(catalog=catalog, catalog_error=None)

    async def search(self, query: str) -> None:
        """Search the hub; an empty query clears the results (the catalog shows)."""
        query = query.strip()
        self._search_seq += 1
        seq = self._search_seq
        if not query:
            self._set(query="", results=(), message=None, searching=False)
            return
        self._set(query=query, searching=True, message=None)
        try:
            found = await self.client.hub_search(query)
        except DaemonError as exc:
            if seq == self._search_seq:
                self._set(searching=False, results=(), message=exc.message)
            return
        if seq == self._search_seq:
            self._set(searching=False, results=tuple(found.repos), message=found.message)

    async def open_repo(self, repo: str) -> None:
        self._set(repo=repo, files=None, files_error=None, loading_files=True, fit_file=None, fits=())
        try:
            files = await self.client.hub_repo_files(repo)
        except DaemonError as exc:
            if self.state.value.repo == repo:
                self._set(loading_files=False, files_error=exc.message)
            return
        if self.state.value.repo == repo:
            self._set(loading_files=False, files=files)

    def open_entry(self, entry: CatalogEntry) -> asyncio.Future[None]:
        """A catalog entry opens its repository, and checks its file's fit."""
        async def both() -> None:
            await self.open_repo(entry.repo)
            await self.check_fit(entry.repo, entry.file)
        return asyncio.ensure_future(both())

    async def check_fit(self, repo: str, file: str) -> None:
        """Ask every online node whether the file fits it (the header read by ranges on the hub)."""
        hosts = [h for h in self.fleet.snapshot.value.hosts if h.online] or []
        self._set(fit_file=file, fits=(), checking=True)
        ref = HfFileRef(repo=repo, file=file)

        async def one(node: str, name: str) -> NodeFit:
            try:
                report = await self.client.fit(FitQuery(node=node, hf=ref))
            except DaemonError as exc:
                return NodeFit(node, name, None, exc.message)
            return NodeFit(node, name, report.fits, report.message or ("fits" if report.fits else "does not fit"))

        nodes = [(h.node, h.node_name or ("this machine" if h.node == "local" else h.node[:12])) for h in hosts]
        fits = await asyncio.gather(*(one(n, name) for n, name in nodes or [("local", "this machine")]))
        if self.state.value.fit_file == file:
            self._set(fits=tuple(fits), checking=False)

    async def download(self, repo: str, file: str, node: str = "local",
                       entry: CatalogEntry | None = None) -> Transfer | None:
        """Start the daemon's download of ``file`` (with its shards and the repo's vision projector),
        registered when done: a catalog entry as its short name, else named after the file."""
        query = DownloadQuery(hf=HfFileRef(repo=repo, file=file), node=node,
                              model_id=entry.model_id if entry else None, served_name=entry.name if entry else None)
        try:
            transfer = await self.client.download(query)
        except DaemonError as exc:
            self._set(download_error=exc.message, downloaded=None)
            return None
        self._set(downloaded=f"Downloading {file}: its progress is on the Models page; the model is added "
                             "when it is done.", download_error=None)
        return transfer
