"""``Drivers``: the runtime drivers one agent has, by runtime id, and which one a spec or run uses.

The agent composes one driver per runtime it can drive (``agent.deps``); the instance manager and
the telemetry pick the one a launch spec names (``LaunchSpec.runtime``) or a run was started by
(``ProcessRecord.runtime``). A spec for a runtime this agent has no driver for is refused with
``NoRuntime``, saying which runtimes it has.
"""

from __future__ import annotations

from collections.abc import Iterator

from agent.api.runtimes import RUNTIME_LABELS, RuntimeOffer
from agent.runtimes.driver import NoRuntime, RuntimeDriver


class Drivers:
    def __init__(self, *drivers: RuntimeDriver) -> None:
        if not drivers:
            raise ValueError("an agent needs at least one runtime driver")
        self._by_runtime: dict[str, RuntimeDriver] = {}
        for driver in drivers:
            if driver.runtime in self._by_runtime:
                raise ValueError(f"two drivers for runtime {driver.runtime!r}")
            self._by_runtime[driver.runtime] = driver
        self.default = drivers[0]  # llama.cpp in the product: records written before runtimes had ids are its

    def __iter__(self) -> Iterator[RuntimeDriver]:
        return iter(self._by_runtime.values())

    def get(self, runtime: str) -> RuntimeDriver:
        driver = self._by_runtime.get(runtime)
        if driver is None:
            have = ", ".join(RUNTIME_LABELS.get(r, r) for r in self._by_runtime)
            raise NoRuntime(f"this agent has no {RUNTIME_LABELS.get(runtime, runtime)} driver (it has: {have})")
        return driver

    async def offers(self) -> list[RuntimeOffer]:
        """What each driver says about itself here, for ``AgentStatus.runtime_offers``."""
        return [await driver.offer() for driver in self]
