"""config.toml as the user wrote it survives a settings change from the app."""

from __future__ import annotations

import tomllib
from pathlib import Path

from daemon.api.models import DaemonSettings
from daemon.config import load_config
from daemon.paths import DaemonPaths
from tests.daemon.harness import running_daemon

USER_CONFIG = """\
# Tuned by hand: slower restarts, one interface for mDNS.
require_api_keys = false
seed_demo_model = false

[health]
backoff_s = [5.0, 20.0]  # faster than the default
crash_limit = 5

[nodes]
mdns_interfaces = ["192.168.1.20", "10.0.0.2"]
interval_s = 3.0
"""


async def test_a_settings_change_from_the_app_keeps_tables_lists_and_comments(tmp_path: Path) -> None:
    home = tmp_path / "daemon"
    home.mkdir()
    config_path = DaemonPaths(home).config
    config_path.write_text(USER_CONFIG, encoding="utf-8")
    async with running_daemon(home, None, local_agent=False) as rd:
        saved = await rd.client.put_settings(DaemonSettings(lan_access=False, require_api_keys=True))
        assert saved.require_api_keys is True

    text = config_path.read_text(encoding="utf-8")
    assert "# Tuned by hand: slower restarts, one interface for mDNS." in text
    assert "# faster than the default" in text
    values = tomllib.loads(text)
    assert values["require_api_keys"] is True and values["lan_access"] is False
    assert values["health"] == {"backoff_s": [5.0, 20.0], "crash_limit": 5}
    assert values["nodes"] == {"mdns_interfaces": ["192.168.1.20", "10.0.0.2"], "interval_s": 3.0}

    again = load_config(config_path)  # the next start reads the same policy back
    assert again.require_api_keys is True and again.health.backoff_s == (5.0, 20.0)
    assert again.health.crash_limit == 5 and again.nodes.mdns_interfaces == ["192.168.1.20", "10.0.0.2"]
