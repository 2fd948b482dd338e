"""``program_argv``: how the app and the daemon start this program again; ``program_version``: the
installed version (see ``agent.api.program``)."""

from agent.api.program import UNKNOWN_VERSION, is_frozen, program_argv, program_version

__all__ = ["UNKNOWN_VERSION", "is_frozen", "program_argv", "program_version"]
