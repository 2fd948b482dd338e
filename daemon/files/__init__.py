"""My models and disk: each node's model files, the models that use them, and removing them (``daemon.api.files``)."""
