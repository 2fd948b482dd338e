"""Connect your apps, on the Access page at 1024×700: pick a tool and a model and the configuration
shown holds them and the daemon's URL; Copy puts it on the clipboard; a key created for the app is
filled in until the page is left; from another device, the LAN URL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QApplication

from app.ui.pages.access import AccessPage
from daemon import listener
from daemon.api.client import DaemonClient
from daemon.api.models import DaemonSettings, ModelDefinition

pytestmark = pytest.mark.gui

LAN_HOST = "192.168.1.5"  # this machine's LAN address, as the daemon finds it


def _model(model_id: str, served_name: str | None = None) -> ModelDefinition:
    return ModelDefinition(id=model_id, served_name=served_name or model_id, model_path=f"/models/{model_id}.gguf")


@pytest.fixture
def client(real_daemon: Any, qtbot: Any) -> Iterator[DaemonClient]:
    """The app's client of the real daemon holding alpha and beta (served as Beta-7B), with no keys and
    /v1 on loopback without keys again after the test."""
    real_daemon.hold_models(_model("alpha"), _model("beta", "Beta-7B"))
    client = DaemonClient(*real_daemon, client_name="app")
    yield client

    async def reset(deps: Any) -> None:
        await deps.listener.apply(DaemonSettings(lan_access=False, require_api_keys=False))
        for key in deps.keys.list():
            deps.keys.revoke(key.id)

    real_daemon.call(reset)


def _url(real_daemon: Any, host: str = "127.0.0.1") -> str:
    return f"http://{host}:{real_daemon.deps.config.port}/v1"


def _set(client: DaemonClient, qtbot: Any, settings: DaemonSettings) -> None:
    done = asyncio.ensure_future(client.put_settings(settings))
    qtbot.waitUntil(done.done, timeout=10_000)
    done.result()


def _pick(box: Any, text: str) -> None:
    index = box.findText(text)
    assert index >= 0, f"{text!r} is not offered"
    box.setCurrentIndex(index)


def _fits(page: AccessPage, widget: Any) -> bool:
    """``widget`` is shown whole across the page's width, with nothing to scroll sideways."""
    right = widget.mapTo(page.viewport(), QPoint(widget.width(), 0)).x()
    return (widget.isVisible() and page.horizontalScrollBar().maximum() == 0
            and right <= page.viewport().width())


def test_pick_a_tool_and_a_model_and_copy_its_configuration(
        client: DaemonClient, real_daemon: Any, open_main_window: Callable[..., Any], qtbot: Any,
        qapp: QApplication) -> None:
    window = open_main_window(client, size=(1024, 700))
    window.show_page("access")
    page: AccessPage = window.access
    card = page.connect_card
    assert [card.model.itemText(i) for i in range(card.model.count())] == ["alpha", "Beta-7B"]
    assert not card.origin.isEnabled()  # /v1 is not open to the LAN: this machine only

    _pick(card.tool, "Zed")
    _pick(card.model, "Beta-7B")
    zed = json.loads(card.text.toPlainText())["language_models"]["openai_compatible"]["MirbadLLM"]
    assert zed["api_url"] == _url(real_daemon) and zed["available_models"][0]["name"] == "Beta-7B"
    assert "settings.json" in card.where.text()

    _pick(card.tool, "aider")
    assert f"--model openai/Beta-7B --openai-api-base {_url(real_daemon)}" in card.text.toPlainText()
    assert "needs no key" in card.key_note.text()
    card.copy.click()
    assert QApplication.clipboard().text() == card.text.toPlainText()
    assert card.copy.text() == "Copied"
    for widget in (card.tool, card.model, card.origin, card.copy, card.new_key, card.text):
        assert _fits(page, widget), f"{widget.objectName()} is cut off at 1024×700"


def test_a_key_made_for_the_app_is_filled_in_until_the_page_is_left(
        client: DaemonClient, real_daemon: Any, open_main_window: Callable[..., Any], qtbot: Any) -> None:
    _set(client, qtbot, DaemonSettings(require_api_keys=True))
    window = open_main_window(client, size=(1024, 700))
    window.show_page("access")
    card = window.access.connect_card
    qtbot.waitUntil(lambda: 'apiKey: "YOUR_API_KEY"' in card.text.toPlainText())  # Continue, keys required
    assert "shown once" in card.key_note.text()

    window.access.ask_name = lambda _parent: "continue"
    card.new_key.click()
    qtbot.waitUntil(lambda: "YOUR_API_KEY" not in card.text.toPlainText())
    secret = yaml.safe_load(card.text.toPlainText())["models"][0]["apiKey"]
    made = real_daemon.call(lambda deps: deps.keys.verify(secret))  # a key the daemon issued, named for the app
    assert [k.name for k in real_daemon.call(lambda deps: deps.keys.list()) if k.id == made] == ["continue"]
    assert "continue" in card.key_note.text() and secret not in card.key_note.text()

    window.show_page("models")  # leaving the page: the secret goes, as with the new-key dialog
    assert secret not in card.text.toPlainText()
    window.show_page("access")
    assert 'apiKey: "YOUR_API_KEY"' in card.text.toPlainText()


def test_from_another_device_the_configuration_has_the_lan_url(
        client: DaemonClient, real_daemon: Any, open_main_window: Callable[..., Any], qtbot: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listener, "lan_hosts", lambda: [LAN_HOST])
    real_daemon.hold_models(_model("coder"))
    real_daemon.call(lambda deps: deps.keys.create("editor"))
    _set(client, qtbot, DaemonSettings(lan_access=True, require_api_keys=True))
    window = open_main_window(client, size=(1024, 700))
    window.show_page("access")
    card = window.access.connect_card
    _pick(card.tool, "OpenAI Python")
    assert f'base_url="{_url(real_daemon)}"' in card.text.toPlainText()  # here: loopback still works
    assert card.origin.isEnabled()
    _pick(card.origin, "Another device (LAN)")
    shown = card.text.toPlainText()
    assert f'base_url="{_url(real_daemon, LAN_HOST)}"' in shown and 'api_key="YOUR_API_KEY"' in shown and 'model="coder"' in shown
