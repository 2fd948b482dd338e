"""``python -m mirbadllm.updates``: see ``cli.py``."""

import sys

from mirbadllm.updates.cli import main

sys.exit(main())
