"""The web workbench: one module per tab, built on the service layer (never the other way round)."""
