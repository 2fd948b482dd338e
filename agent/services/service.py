"""``HostServices``: the node's services as the daemon sees them, every action through the policy.

Each action and each refusal is one log line (``service action name=... action=... result=ok|failed|refused``),
whatever asked for it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from agent.api.services import (
    ACTION_FAILED,
    NO_MANAGER,
    NOT_FOUND,
    ServiceAction,
    ServiceActionRequest,
    ServiceActionResult,
    ServiceInfo,
    ServicesList,
)
from agent.services.manager import ServiceCommandFailed, ServiceManager
from agent.services.policy import ServicePolicy, ServiceRefused, normalise, valid_name

_LOGGER = logging.getLogger(__name__)


class HostServices:
    def __init__(self, manager: ServiceManager, policy: ServicePolicy) -> None:
        self.manager = manager
        self.policy = policy

    def _listing(self, services: list[ServiceInfo], error: str | None = None) -> ServicesList:
        errors = [e for e in (self.policy.file.error, error) if e]
        return ServicesList(manager=self.manager.kind, services=services, deny_patterns=self.policy.deny_patterns,
                            protected_patterns=self.policy.protected_patterns, error="; ".join(errors) or None)

    async def list(self, every: bool = False, allow: Sequence[str] = (), protect: Sequence[str] = ()) -> ServicesList:
        """The whitelisted services (each with its state), or with ``every`` all the manager knows."""
        try:
            known = await self.manager.list()
        except ServiceCommandFailed as exc:
            return self._listing([], exc.message)
        judged = [self.policy.judge(info, allow, protect) for info in known]
        if every:
            return self._listing(judged)
        shown = [info for info in judged if info.whitelisted]
        seen = {normalise(n) for info in shown for n in (info.name, *info.aliases)}
        wanted = sorted((self.policy.file.allow | {normalise(n) for n in allow}) - seen)
        for name in wanted:  # whitelisted but not loaded (a disabled unit): ask for it by name
            try:
                info = await self.manager.status(valid_name(name))
            except (ServiceCommandFailed, ServiceRefused):
                info = None
            if info is not None:
                shown.append(self.policy.judge(info, allow, protect, asked=name))
        return self._listing(sorted(shown, key=lambda i: i.name.lower()))

    async def act(self, name: str, action: ServiceAction, request: ServiceActionRequest) -> ServiceActionResult:
        """Run ``action`` on ``name`` when the policy lets it; the service's state afterwards."""
        try:
            valid_name(name)
            judged = self.policy.judge(ServiceInfo(name=name), request.allow, request.protect)
            self.policy.check(judged, action, name, request.confirm)  # refused before the OS is asked anything
            if self.manager.kind == "none":
                raise ServiceRefused(f"this node has no service manager the agent can drive: "
                                     f"{getattr(self.manager, 'why', '')}", status=503, code=NO_MANAGER)
            info = await self.manager.status(name)
            if info is None:
                raise ServiceRefused(f"there is no service {name!r} on this node", status=404, code=NOT_FOUND)
            judged = self.policy.judge(info, request.allow, request.protect, asked=name)
            self.policy.check(judged, action, name, request.confirm)  # its aliases too
        except ServiceRefused as exc:
            _LOGGER.warning("service action name=%s action=%s result=refused code=%s: %s", name, action,
                            exc.code, exc.message)
            raise
        try:
            await getattr(self.manager, action)(judged.name)
        except ServiceCommandFailed as exc:
            _LOGGER.warning("service action name=%s action=%s result=failed: %s", judged.name, action, exc.message)
            raise ServiceRefused(f"{action} {judged.name} failed: {exc.message}", status=502,
                                 code=ACTION_FAILED) from None
        after = await self.manager.status(judged.name) or judged
        _LOGGER.info("service action name=%s action=%s result=ok state=%s", judged.name, action, after.state.value)
        return ServiceActionResult(action=action, service=self.policy.judge(after, request.allow, request.protect,
                                                                            asked=name),
                                   message=f"{action} {judged.name}: {after.state.value}")
