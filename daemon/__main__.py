"""``python -m daemon``: same as ``mirbadllm daemon``."""

import gc
import sys

from daemon.main import main

gc.freeze()  # as mirbadllm/__main__.py: the exit's last collection skips what the imports made (~0.4 s)
sys.exit(main(sys.argv[1:]))
