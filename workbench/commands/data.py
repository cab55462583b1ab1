"""`workbench data ...` commands (filled in by the datasets work)."""
