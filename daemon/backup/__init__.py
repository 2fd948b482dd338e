"""Backup and restore: the document, its encryption, the preview and the restore, the daily schedule."""
