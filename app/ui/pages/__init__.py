"""The main window's pages, one module each; every page renders view-model snapshots only."""
