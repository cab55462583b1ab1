"""CLI command modules; importing this package registers every command on ``workbench.cli.app``."""
from workbench.commands import data, export, label, predict, publish, runs, serve, sweep, train, worker  # noqa: F401
