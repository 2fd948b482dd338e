"""``mirbadllm [daemon|agent|ctl|run] ...``: no sub-command opens the desktop app.

Each sub-command's module is imported only when chosen, so ``mirbadllm agent`` on a headless
machine never loads Qt.
"""

from __future__ import annotations

import gc
import sys

USAGE = """usage: mirbadllm [daemon|agent|ctl|run] [options]

  mirbadllm            open the desktop app (starts the daemon if needed)
  mirbadllm daemon     run the daemon: /v1 router, admin API, local agent
  mirbadllm agent      run a node agent on this machine
  mirbadllm ctl        talk to the daemon from a terminal (status, models, keys)
  mirbadllm run MODEL  chat with a model in the terminal (starts it if needed)
"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args and not args[0].startswith("-") else ""
    rest = args[1:] if command else args
    if command == "daemon":
        from daemon.main import main as run
    elif command == "agent" and rest[:1] == ["ctrl-break"]:  # the frozen program's Ctrl-Break helper
        from agent.runtimes.process import ctrl_break_main
        return ctrl_break_main(rest[1:])
    elif command == "agent":
        from agent.main import main as run
    elif command == "ctl":
        from mirbadllm.ctl import main as run
    elif command == "run":
        from mirbadllm.chat import main as run
    elif command in ("", "app"):
        if rest and rest[0] in ("-h", "--help"):
            print(USAGE)
            return 0
        if "--demo" in rest:  # the real daemon and demo agents in this process (mirbadllm.demo)
            from mirbadllm.demo import main as run
        else:
            from app.main import main as run
    else:
        print(USAGE, file=sys.stderr)
        return 2
    gc.freeze()  # what the imports made lives as long as we do: no collection, not the exit's, walks it again
    return int(run(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
