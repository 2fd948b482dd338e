"""Qt-free view-models: plain asyncio objects holding immutable snapshots that widgets render."""
