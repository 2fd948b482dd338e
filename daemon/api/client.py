"""``DaemonClient``: the typed client of the daemon's admin API, used by the app, the CLI and tests.

Route table (admin token as ``Authorization: Bearer``):

    GET    /api/status                      -> StatusResponse
    GET    /api/events                      -> EventsPage       # ?since=ID&timeout=S (long-poll)
    GET    /api/models                      -> list[ModelView]
    POST   /api/models                      -> ModelView        # body: ModelDefinition; 201, 409 on clash
    GET    /api/models/{id}                 -> ModelView
    PUT    /api/models/{id}                 -> ModelView        # body: ModelDefinition
    DELETE /api/models/{id}                 -> 204              # stops it first
    POST   /api/models/{id}/start           -> ModelStatus      # ?wait=0|1
    POST   /api/models/{id}/stop            -> ModelStatus
    POST   /api/models/{id}/restart         -> ModelStatus
    GET    /api/models/{id}/logs            -> text/event-stream  # ?tail=N&follow=0|1
    GET    /api/models/{id}/history         -> HistorySeries    # ?range=5m|1h|24h|7d
    GET    /api/nodes/{id}/history          -> HistorySeries    # ?range=5m|1h|24h|7d
    GET    /api/keys                        -> list[ApiKeyInfo]
    POST   /api/keys                        -> ApiKeyCreated    # body: ApiKeyCreate; 201
    DELETE /api/keys/{id}                   -> 204
    GET    /api/settings                    -> DaemonSettings
    PUT    /api/settings                    -> DaemonSettings
    GET    /api/requests                    -> list[RequestRecord]  # ?limit=N
    GET    /healthz                         -> {"status": "ok"}  (no token)
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agent.api.client import iter_sse_data
from daemon.api.models import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    DaemonSettings,
    EventsPage,
    HistoryRange,
    HistorySeries,
    ModelDefinition,
    ModelStatus,
    ModelView,
    RequestRecord,
    StatusResponse,
)

_LOGGER = logging.getLogger(__name__)

_CALL_TIMEOUT = aiohttp.ClientTimeout(total=60, connect=5)


class DaemonError(Exception):
    """The daemon answered with an error, or could not be reached (``status`` 0)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({status} {code})")
        self.status = status
        self.code = code
        self.message = message


class DaemonClient:
    """Typed admin client. One instance per daemon; close it when done."""

    def __init__(self, base_url: str, token: str, session: aiohttp.ClientSession | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._own_session = session is None
        self._session = session

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None and self._own_session:
            await self._session.close()
        self._session = None

    async def _call(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                    body: Any = None, timeout: aiohttp.ClientTimeout = _CALL_TIMEOUT) -> Any:
        try:
            async with self.session.request(method, self.base_url + path, params=params, json=body,
                                            headers=self._headers, timeout=timeout) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    raise _error_from(resp.status, text)
                return json.loads(text) if text else None
        except aiohttp.ClientError as exc:
            raise DaemonError(0, "unreachable", f"cannot reach the daemon at {self.base_url}: {exc}") from exc
        except TimeoutError as exc:
            raise DaemonError(0, "timeout", f"the daemon at {self.base_url} did not answer in time") from exc

    async def healthz(self) -> bool:
        try:
            async with self.session.get(self.base_url + "/healthz",
                                        timeout=aiohttp.ClientTimeout(total=3)) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def status(self) -> StatusResponse:
        return StatusResponse.model_validate(await self._call("GET", "/api/status"))

    async def events(self, since: int, timeout: float = 30.0) -> EventsPage:
        call_timeout = aiohttp.ClientTimeout(total=timeout + 15, connect=5)
        data = await self._call("GET", "/api/events", params={"since": since, "timeout": timeout},
                                timeout=call_timeout)
        return EventsPage.model_validate(data)

    async def list_models(self) -> list[ModelView]:
        return [ModelView.model_validate(m) for m in await self._call("GET", "/api/models")]

    async def get_model(self, model_id: str) -> ModelView:
        return ModelView.model_validate(await self._call("GET", f"/api/models/{model_id}"))

    async def create_model(self, definition: ModelDefinition) -> ModelView:
        data = await self._call("POST", "/api/models", body=definition.model_dump(mode="json"))
        return ModelView.model_validate(data)

    async def update_model(self, definition: ModelDefinition) -> ModelView:
        data = await self._call("PUT", f"/api/models/{definition.id}", body=definition.model_dump(mode="json"))
        return ModelView.model_validate(data)

    async def delete_model(self, model_id: str) -> None:
        await self._call("DELETE", f"/api/models/{model_id}")

    async def start_model(self, model_id: str, wait: bool = False) -> ModelStatus:
        timeout = aiohttp.ClientTimeout(total=3700 if wait else 60, connect=5)
        data = await self._call("POST", f"/api/models/{model_id}/start", params={"wait": int(wait)},
                                timeout=timeout)
        return ModelStatus.model_validate(data)

    async def stop_model(self, model_id: str) -> ModelStatus:
        return ModelStatus.model_validate(await self._call("POST", f"/api/models/{model_id}/stop"))

    async def restart_model(self, model_id: str) -> ModelStatus:
        return ModelStatus.model_validate(await self._call("POST", f"/api/models/{model_id}/restart"))

    async def logs(self, model_id: str, tail: int = 200, follow: bool = False) -> AsyncIterator[str]:
        """Log lines of a model: the last ``tail``, then new ones while ``follow``."""
        timeout = aiohttp.ClientTimeout(total=None, connect=5, sock_read=None)
        params = {"tail": tail, "follow": int(follow)}
        try:
            async with self.session.get(f"{self.base_url}/api/models/{model_id}/logs", params=params,
                                        headers=self._headers, timeout=timeout) as resp:
                if resp.status >= 400:
                    raise _error_from(resp.status, await resp.text())
                async for data in iter_sse_data(resp.content):
                    yield json.loads(data)
        except aiohttp.ClientError as exc:
            raise DaemonError(0, "unreachable", f"cannot reach the daemon at {self.base_url}: {exc}") from exc

    async def model_history(self, model_id: str, range_: HistoryRange = "5m") -> HistorySeries:
        data = await self._call("GET", f"/api/models/{model_id}/history", params={"range": range_})
        return HistorySeries.model_validate(data)

    async def node_history(self, node_id: str = "local", range_: HistoryRange = "5m") -> HistorySeries:
        data = await self._call("GET", f"/api/nodes/{node_id}/history", params={"range": range_})
        return HistorySeries.model_validate(data)

    async def list_keys(self) -> list[ApiKeyInfo]:
        return [ApiKeyInfo.model_validate(k) for k in await self._call("GET", "/api/keys")]

    async def create_key(self, name: str) -> ApiKeyCreated:
        data = await self._call("POST", "/api/keys", body=ApiKeyCreate(name=name).model_dump())
        return ApiKeyCreated.model_validate(data)

    async def revoke_key(self, key_id: str) -> None:
        await self._call("DELETE", f"/api/keys/{key_id}")

    async def get_settings(self) -> DaemonSettings:
        return DaemonSettings.model_validate(await self._call("GET", "/api/settings"))

    async def put_settings(self, settings: DaemonSettings) -> DaemonSettings:
        data = await self._call("PUT", "/api/settings", body=settings.model_dump())
        return DaemonSettings.model_validate(data)

    async def requests(self, limit: int = 100) -> list[RequestRecord]:
        return [RequestRecord.model_validate(r) for r in await self._call("GET", "/api/requests", params={"limit": limit})]


def _error_from(status: int, text: str) -> DaemonError:
    try:
        err = json.loads(text)["error"]
        return DaemonError(status, str(err.get("code") or err.get("type") or "error"), str(err.get("message", text)))
    except (ValueError, KeyError, TypeError):
        return DaemonError(status, "error", text[:500])
