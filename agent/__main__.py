"""``python -m agent``: the node agent."""

import gc
import sys

from agent.main import main

if __name__ == "__main__":
    gc.freeze()  # as mirbadllm/__main__.py: the exit's last collection skips what the imports made (~0.4 s)
    sys.exit(main())
