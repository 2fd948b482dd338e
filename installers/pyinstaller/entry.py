"""The frozen program's entry point: ``mirbadllm [daemon|agent|ctl|run] ...`` (PyInstaller)."""

import multiprocessing
import sys

from mirbadllm.__main__ import main

if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
