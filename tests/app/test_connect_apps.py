"""Connect your apps, on the Access page at 1024×700: pick a tool and a model and the configuration
shown holds them and the daemon's URL; Copy puts it on the clipboard; a key created for the app is
filled in until the page is left; from another device, the LAN URL."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from fake_daemon import FakeDaemonClient, definition
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QApplication

from app.ui.pages.access import AccessPage
from daemon.api.models import ApiKeyInfo, DaemonSettings, StatusResponse

pytestmark = pytest.mark.gui

LAN_URL = "http://192.168.1.5:8484/v1"


class LanDaemon(FakeDaemonClient):
    """The fake daemon reporting this machine's LAN address while /v1 is open to the LAN, as the daemon does."""

    async def status(self) -> StatusResponse:
        status = await super().status()
        if self.settings.lan_access:
            status.daemon.lan_urls = [LAN_URL]
            status.daemon.host = "0.0.0.0"
        return status


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
        fake: FakeDaemonClient, open_main_window: Callable[..., Any], qtbot: Any, qapp: QApplication) -> None:
    window = open_main_window(fake, size=(1024, 700))
    window.show_page("access")
    page: AccessPage = window.access
    card = page.connect_card
    assert [card.model.itemText(i) for i in range(card.model.count())] == ["alpha", "Beta-7B"]
    assert not card.origin.isEnabled()  # /v1 is not open to the LAN: this machine only

    _pick(card.tool, "Zed")
    _pick(card.model, "Beta-7B")
    zed = json.loads(card.text.toPlainText())["language_models"]["openai_compatible"]["MirbadLLM"]
    assert zed["api_url"] == "http://127.0.0.1:8484/v1" and zed["available_models"][0]["name"] == "Beta-7B"
    assert "settings.json" in card.where.text()

    _pick(card.tool, "aider")
    assert "--model openai/Beta-7B --openai-api-base http://127.0.0.1:8484/v1" in card.text.toPlainText()
    assert "needs no key" in card.key_note.text()
    card.copy.click()
    assert QApplication.clipboard().text() == card.text.toPlainText()
    assert card.copy.text() == "Copied"
    for widget in (card.tool, card.model, card.origin, card.copy, card.new_key, card.text):
        assert _fits(page, widget), f"{widget.objectName()} is cut off at 1024×700"


def test_a_key_made_for_the_app_is_filled_in_until_the_page_is_left(
        fake: FakeDaemonClient, open_main_window: Callable[..., Any], qtbot: Any) -> None:
    fake.settings = DaemonSettings(require_api_keys=True)
    window = open_main_window(fake, size=(1024, 700))
    window.show_page("access")
    card = window.access.connect_card
    qtbot.waitUntil(lambda: 'apiKey: "YOUR_API_KEY"' in card.text.toPlainText())  # Continue, keys required
    assert "shown once" in card.key_note.text()

    window.access.ask_name = lambda _parent: "continue"
    card.new_key.click()
    qtbot.waitUntil(lambda: bool(fake.issued_secrets) and fake.issued_secrets[-1] in card.text.toPlainText())
    secret = fake.issued_secrets[-1]
    assert yaml.safe_load(card.text.toPlainText())["models"][0]["apiKey"] == secret
    assert "continue" in card.key_note.text() and secret not in card.key_note.text()

    window.show_page("models")  # leaving the page: the secret goes, as with the new-key dialog
    assert secret not in card.text.toPlainText()
    window.show_page("access")
    assert 'apiKey: "YOUR_API_KEY"' in card.text.toPlainText()


def test_from_another_device_the_configuration_has_the_lan_url(
        open_main_window: Callable[..., Any], qtbot: Any) -> None:
    lan = LanDaemon([definition("coder")])
    lan.keys["k1"] = ApiKeyInfo(id="k1", name="editor", prefix="sk-mirbad-ab12", created_at=0.0)
    lan.settings = DaemonSettings(lan_access=True, require_api_keys=True)
    window = open_main_window(lan, size=(1024, 700))
    window.show_page("access")
    card = window.access.connect_card
    _pick(card.tool, "OpenAI Python")
    assert 'base_url="http://127.0.0.1:8484/v1"' in card.text.toPlainText()  # here: loopback still works
    assert card.origin.isEnabled()
    _pick(card.origin, "Another device (LAN)")
    shown = card.text.toPlainText()
    assert f'base_url="{LAN_URL}"' in shown and 'api_key="YOUR_API_KEY"' in shown and 'model="coder"' in shown
