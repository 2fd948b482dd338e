"""The agent as a service of this OS: unit texts (``units``), install and remove (``install``),
and reading the pairing code of an agent that runs with no console (``pairing_code``)."""
