"""The files in the agent's models folder: listed with their sizes, removed one at a time (``agent.api.files``)."""
