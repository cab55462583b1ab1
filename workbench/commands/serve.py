"""`workbench serve`: the web UI plus one embedded worker."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer

from workbench.cli import app

log = logging.getLogger(__name__)


def _addresses(value: Optional[str]) -> Optional[str]:
    from storage.settings import parse_addresses

    try:
        return None if value is None else parse_addresses(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@app.command()
def serve(
    host: Optional[str] = typer.Option(None, help="Interface to listen on (default: WORKBENCH_HOST, 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, help="Port (default: WORKBENCH_PORT, 7860)."),
    home: Optional[Path] = typer.Option(None, help="Folder of the database, datasets, runs and logs (default: "
                                                   "WORKBENCH_HOME, ./.workbench)."),
    no_worker: bool = typer.Option(False, "--no-worker",
                                   help="Serve the UI only; runs wait for a separate `workbench worker`."),
    forwarded_allow_ips: Optional[str] = typer.Option(
        None, "--forwarded-allow-ips", callback=_addresses,
        help="Reverse proxies whose X-Forwarded-For is believed, comma separated (default: "
             "WORKBENCH_FORWARDED_ALLOW_IPS, none)."),
) -> None:
    """Start the web workbench (and one embedded worker unless --no-worker)."""
    import uvicorn

    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.server import create_app, uvicorn_options

    settings = Settings.from_env(host=host, port=port, home=home, forwarded_allow_ips=forwarded_allow_ips)
    wb = open_workbench(settings)
    web_app = create_app(wb, worker=not no_worker)
    shown_host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    typer.echo(f"BERT Workbench on http://{shown_host}:{settings.port}/"
               + ("" if not no_worker else "  (no worker: start `workbench worker` to train)"))
    from workbench.playground.cache import configure_serving_threads

    configure_serving_threads()  # playground predictions must not fight the worker's training for cores
    try:
        uvicorn.run(web_app, **uvicorn_options(settings))
    finally:
        wb.close()
