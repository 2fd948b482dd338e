"""``program_argv``: how the app and the daemon start this program again (see ``agent.api.program``)."""

from agent.api.program import is_frozen, program_argv

__all__ = ["is_frozen", "program_argv"]
