"""The single-file agent build's entry point: ``mirbadllm-agent [options]`` is ``mirbadllm agent [options]``.

This is what a node runs when the daemon's rollouts keep it up to date: one file, no desktop app,
no daemon, and it replaces itself (``agent.upgrade.FileInstaller``; its upgrade target defaults to
this very file). The frozen program's Ctrl-Break helper (``mirbadllm-agent agent ctrl-break PID``)
keeps its word ``agent`` (``agent.runtimes.process.ctrl_break_helper_argv``).
"""

import multiprocessing
import os
import sys

from agent.upgrade import UPGRADE_TARGET_ENV
from mirbadllm.__main__ import main

if __name__ == "__main__":
    multiprocessing.freeze_support()
    if getattr(sys, "frozen", False):
        os.environ.setdefault(UPGRADE_TARGET_ENV, sys.executable)  # a pushed build replaces this file
    args = sys.argv[1:]
    sys.exit(main(args if args[:1] == ["agent"] else ["agent", *args]))
