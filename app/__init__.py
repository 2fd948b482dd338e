"""The MirbadLLM desktop app and tray icon (PySide6 + qasync)."""
