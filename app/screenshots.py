"""Screenshots of every page, light and dark, at 1280×800: ``python -m app.screenshots [OUT]``.

Runs offscreen against the demo (``mirbadllm.demo``: the real daemon and demo agents, in the process
the launcher starts: ``python -m mirbadllm.demo --screenshots OUT``) and writes PNGs to
``docs/screenshots/`` (or OUT), for the docs and for a person to check what the app looks like
(``make screenshots``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

SIZE = (1280, 800)
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "screenshots"


# How long each page is left to settle before it is grabbed is scaled by this: 1 for the docs'
# pictures (charts and logs drawn whole); a test that checks only that every picture is written
# sets MIRBADLLM_SCREENSHOT_SETTLE lower.
SETTLE_SCALE = float(os.environ.get("MIRBADLLM_SCREENSHOT_SETTLE") or 1.0)


async def _settle(seconds: float = 0.25) -> None:
    await asyncio.sleep(seconds * SETTLE_SCALE)  # Qt paints meanwhile: the loop runs inside Qt's


def _demo_conversation(ctx) -> None:  # type: ignore[no-untyped-def]
    from app.viewmodels.playground import AnswerStats, ChatMessage

    vm = ctx.playground
    model = vm.state.value.model
    messages = (
        ChatMessage("user", "In two sentences: why run models locally?"),
        ChatMessage("assistant", "Your prompts and data never leave your machines, and there is no per-token bill "
                    "or rate limit. With one OpenAI-compatible endpoint, every tool you already use just works.",
                    model, AnswerStats(182.0, 41, 88.6, "stop"),
                    reasoning="Two reasons people give: privacy and cost. Keep it to two sentences."),
        ChatMessage("user", "Show me a call from Python."),
        ChatMessage("assistant", "Point the `openai` client at this machine:\n\n```python\nfrom openai import OpenAI\n\n"
                    "client = OpenAI(base_url=\"http://127.0.0.1:8484/v1\", api_key=\"sk-local\")\n```\n\nThen call",
                    model, streaming=True),
    )
    vm.state.set(replace(vm.state.value, messages=messages, busy=True))


# Every page of the main window, a model's tabs, and every dialog, by file name (``{mode}-{name}.png``).
# tests/app/test_screenshots.py checks these cover main_window.PAGES and every QDialog in app.ui.
PAGE_SHOTS = ("overview", "models", "models-settings", "models-logs", "models-charts", "models-benchmarks",
              "discover", "nodes", "services", "playground", "playground-completion", "access", "requests", "audit",
              "backup", "releases", "downloads", "settings")
DIALOG_SHOTS = {"NewKeyDialog": "new-key-dialog", "PairDialog": "pair-dialog", "TuningWizard": "tuning-wizard",
                "AddModelDialog": "add-model-dialog", "DaemonFailedDialog": "daemon-failed-dialog",
                "KeyLimitsDialog": "key-limits-dialog", "ServiceConfirmDialog": "service-confirm-dialog"}
EXTRA_SHOTS = ("tuning-wizard-progress", "tray-menu", "add-model-lmstudio")


# The demo's models (mirbadllm.demo): its ready one, one that failed to start, one on a paired node.
DEMO_MODEL, BROKEN, ON_NODE, GPU_NODE = "gemma-3-270m", "gemma-3-270m-broken", "gemma-3-270m-gpu-box", "gpu-box"


def _served(ctx, model_id: str) -> str:  # type: ignore[no-untyped-def]
    found = [m.definition.served_name for m in ctx.fleet.snapshot.value.models if m.definition.id == model_id]
    return found[0] if found else model_id


async def _settle_until(condition, seconds: float = 3.0) -> None:  # type: ignore[no-untyped-def]
    """Let the loop and Qt run until ``condition()`` holds (or ``seconds`` pass: shoot what is there)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition() and loop.time() < deadline:
        await _settle(0.05)
    await _settle(0.2)


async def _pages(window, ctx, save) -> None:  # type: ignore[no-untyped-def]
    from app.ui.pages.model_panel import BENCHMARKS, CHARTS, LOGS, OVERVIEW, SETTINGS

    tabs = {"models": OVERVIEW, "models-settings": SETTINGS, "models-logs": LOGS, "models-charts": CHARTS,
            "models-benchmarks": BENCHMARKS}
    for name in PAGE_SHOTS:
        window.show_page(name.split("-")[0])
        tab = tabs.get(name)
        if tab is not None:
            window.models.select({OVERVIEW: BROKEN, SETTINGS: ON_NODE}.get(tab, DEMO_MODEL))
            window.models.panel.tabs.setCurrentIndex(tab)
        if name == "playground":
            ctx.playground.configure(model=_served(ctx, DEMO_MODEL))
            _demo_conversation(ctx)
        if name == "playground-completion":
            ctx.playground.clear()
            ctx.playground.configure(model=_served(ctx, DEMO_MODEL))
            await _settle_until(lambda: ctx.playground.state.value.base_model)
            _demo_completion(ctx)
        if name == "nodes":  # a paired node with a GPU
            await ctx.nodes.refresh()
            ctx.nodes.select(next((n.id for n in ctx.nodes.state.value.nodes if n.name == GPU_NODE), None))
        if name == "services":
            await window.services.vm.refresh()
        if name == "backup":
            await window.backup.vm.refresh()
        if name == "downloads":  # the running download selected: Pause and Cancel enabled
            await window.downloads.vm.refresh()
            window.downloads.vm.select(next((t.id for t in window.downloads.vm.state.value.transfers
                                             if t.state.value == "running"), None))
        if name == "requests":  # the failed Llama answered by its fallback, in full below the list
            await window.requests.vm.refresh()
            await window.requests.vm.read_keys()
            await window.requests.vm.open(next((r.id for r in window.requests.vm.state.value.rows
                                                if r.answered_by), ""))
        if name == "audit":  # the demo's model edit selected: its change shows below the log
            await window.audit.vm.refresh()
            window.audit.vm.select(next((e.id for e in window.audit.vm.state.value.entries
                                         if e.action == "model.update"), None))
        wait = {LOGS: 0.6, CHARTS: 0.6, BENCHMARKS: 0.6}.get(tab, 0.4 if name == "nodes" else 0.2)  # type: ignore[arg-type]
        await _settle(wait)
        save(name, window)


async def _dialogs(window, ctx, demo, save) -> None:  # type: ignore[no-untyped-def]
    from app.bootstrap import BootstrapError
    from app.ui.dialogs import DaemonFailedDialog, NewKeyDialog
    from app.viewmodels.tuning import Step

    created = await demo.create_key("vs-code")
    dialog = NewKeyDialog(created, window)
    dialog.show()
    await _settle()
    save(DIALOG_SHOTS["NewKeyDialog"], dialog)
    dialog.close()
    await demo.revoke_key(created.info.id)  # the next mode makes it again
    from app.ui.pages.access import KeyLimitsDialog
    from daemon.api.models import ApiKeyLimits

    limited = created.info.model_copy(update={"limits": ApiKeyLimits(requests_per_minute=60, tokens_per_day=200_000)})
    limits = KeyLimitsDialog(limited, window)
    limits.show()
    await _settle()
    save(DIALOG_SHOTS["KeyLimitsDialog"], limits)
    limits.close()

    from app.ui.pages.services import ServiceConfirmDialog
    from daemon.api.services import ServiceInfo

    listed = (await demo.list_services("local")).services
    service = next((s for s in listed if s.protected), listed[0] if listed else ServiceInfo(name="docker.service"))
    confirm = ServiceConfirmDialog(service, "restart", "this machine", window)
    confirm.name.setText(service.name[:4])
    confirm.show()
    await _settle()
    save(DIALOG_SHOTS["ServiceConfirmDialog"], confirm)
    confirm.close()

    window.show_page("nodes")
    pairing = window.nodes.open_pairing(next(iter(await demo.discovered_nodes()), None))
    pairing.code.setText("KXT7-M4QP")
    await _settle()
    save(DIALOG_SHOTS["PairDialog"], pairing)
    pairing.close()

    window.open_model(DEMO_MODEL)
    tab = window.models.panel.benchmarks
    tab.open_wizard()
    wizard = tab.wizard
    wizard.resize(820, 600)
    await wizard.vm.make_plan()
    await _settle_until(lambda: wizard.vm.state.value.step == Step.PLAN)
    save(DIALOG_SHOTS["TuningWizard"], wizard)
    await wizard.vm.start()
    await _settle_until(lambda: wizard.vm.state.value.step == Step.PROGRESS)
    save("tuning-wizard-progress", wizard)
    await wizard.vm.cancel()
    wizard.close()

    adder = window.open_add_model()
    adder.resize(720, 640)
    adder.vm.set_source("hf")
    for edit, field, text in ((adder.hf_repo, "hf_repo", "Qwen/Qwen2.5-7B-Instruct-GGUF"),
                              (adder.hf_file, "hf_file", "Q4_K_M"), (adder.model_id, "model_id", "qwen25-7b"),
                              (adder.ctx_size, "ctx_size", "8192")):
        edit.setText(text)  # as typed: the dialog's fields feed the view-model
        adder.vm.set_field(field, text)
    await adder.vm.check_fit()
    await _settle()
    save(DIALOG_SHOTS["AddModelDialog"], adder)
    adder.vm.set_source("lmstudio")  # LM Studio's models on the node, two ticked
    await _settle_until(lambda: adder.lmstudio_vm.state.value.loaded)
    adder.lmstudio_vm.set_selected({m.path for m in adder.lmstudio_vm.state.value.listed[:2]})
    await _settle()
    save("add-model-lmstudio", adder)
    adder.close()

    failed = DaemonFailedDialog(BootstrapError(
        "The daemon exited before it was ready (exit code 1)",
        "Port 8484 is in use by another program. Stop it, or start MirbadLLM with --port 8485.",
        "INFO daemon: home is ~/.local/share/mirbadllm\n"
        "ERROR daemon: cannot listen on 127.0.0.1:8484: [Errno 98] Address already in use"), window)
    failed.show()
    await _settle()
    save(DIALOG_SHOTS["DaemonFailedDialog"], failed)
    failed.close()


def _demo_completion(ctx) -> None:  # type: ignore[no-untyped-def]
    from app.viewmodels.playground import AnswerStats, ChatMessage

    vm = ctx.playground
    model = vm.state.value.model
    messages = (
        ChatMessage("user", "The three things every good README has are", completion=True),
        ChatMessage("assistant", " a one-line summary of what the project does, a quick start that works on the "
                    "first try, and a short list of where to go next.", model, AnswerStats(41.0, 31, 212.4, "stop"),
                    completion=True),
    )
    vm.state.set(replace(vm.state.value, messages=messages, busy=False))


async def shoot(app, out: Path, demo, modes: tuple[str, ...] = ("light", "dark")) -> list[Path]:  # type: ignore[no-untyped-def]
    """Every picture, in each of ``modes``, of the app over the fleet ``demo()`` runs (one for all)."""
    from app.main import enter_while_loading

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    prefs = Path(tempfile.mkdtemp()) / "app.json"
    async with contextlib.AsyncExitStack() as stack:
        client, home = await enter_while_loading(stack, demo())  # the window's modules load as the fleet starts
        from PySide6.QtCore import QEvent

        from app.context import AppContext
        from app.ui import theme
        from app.ui.main_window import MainWindow
        from app.ui.tray import TrayController

        for mode in modes:
            theme.apply(app, mode)
            ctx = AppContext.create(client, home, prefs_path=prefs, platform="linux")
            await ctx.fleet.resync()
            await ctx.access.refresh()
            window = MainWindow(ctx, apply_theme=lambda m: theme.apply(app, m))
            window.resize(*SIZE)
            window.show()

            def save(name: str, widget, mode: str = mode) -> None:  # type: ignore[no-untyped-def]
                path = out / f"{mode}-{name}.png"
                widget.grab().save(str(path))
                written.append(path)

            await _pages(window, ctx, save)
            await _dialogs(window, ctx, client, save)
            tray = TrayController(ctx, open_window=window.show, quit_app=lambda: None, stop_all_and_quit=lambda: None)
            tray.rebuild_menu()
            tray.menu.adjustSize()
            save("tray-menu", tray.menu)
            tray.close()
            window.quitting = True
            window.close()
            await ctx.close()  # the client opens a new session for the next mode
            # Gone before the next theme: a style sheet set on the app restyles every widget alive
            # (this mode's window and dialogs took seconds to restyle for nothing).
            window.deleteLater()
            app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return written


def main(argv: list[str] | None = None, demo=None) -> int:  # type: ignore[no-untyped-def]
    """``demo``: the fleet to shoot (``mirbadllm.demo`` hands it in); without it, the launcher's demo
    process is started to do it, as the app starts the daemon (the app imports none of the daemon)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if demo is None:
        import subprocess

        return subprocess.call([sys.executable, "-m", "mirbadllm.demo", "--screenshots", *args])
    out = Path(args[0]) if args else DEFAULT_OUT
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    logging.basicConfig(level=logging.WARNING)
    import qasync
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)  # one mode's window closes before the next opens
    written = qasync.run(shoot(app, out, demo))
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
