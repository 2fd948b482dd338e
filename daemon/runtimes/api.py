"""Handlers of the llama.cpp build rollout (admin token required; the routes are in ``daemon.routes``).

    GET  /api/nodes/runtime-upgrade   -> RuntimeRolloutView   # state idle until the first rollout
    POST /api/nodes/runtime-upgrade   -> RuntimeRolloutView   # body: RuntimeUpgradeRequest (optional); 202,
                                                              # 409 runtime_upgrade_running, 422 runtime_build_refused
"""

from __future__ import annotations

from daemon.api.runtime_upgrades import RuntimeUpgradeRequest
from daemon.runtimes.manager import RuntimeUpgradeManager
from daemon.upgrades.api import RolloutApi


class RuntimeUpgradesApi(RolloutApi):
    def __init__(self, runtime_upgrades: RuntimeUpgradeManager) -> None:
        super().__init__(runtime_upgrades, RuntimeUpgradeRequest)
