"""`workbench serve`: the web UI plus one embedded worker."""
