"""CLI command modules; importing this package registers every command on ``workbench.cli.app``."""
from workbench.commands import (activity, data, export, label, predict, publish, runs, serve, sweep,  # noqa: F401
                                tokens, train, users, worker)
