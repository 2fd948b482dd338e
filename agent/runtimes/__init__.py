"""Runtime drivers (one file per runtime) and the catalog of runtime executables."""
