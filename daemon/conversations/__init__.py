"""Saved chats (``/api/conversations``): the SQLite store (``store``) and its handlers (``api``)."""
