"""``python -m daemon``: same as ``mirbadllm daemon``."""

import sys

from daemon.main import main

sys.exit(main(sys.argv[1:]))
