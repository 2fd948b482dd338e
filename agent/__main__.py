"""``python -m agent``: the node agent."""

import logging
import sys

from agent.main import main

_LOGGER = logging.getLogger(__name__)

if __name__ == "__main__":
    sys.exit(main())
