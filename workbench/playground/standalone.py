"""One playground served on its own (``workbench publish RUN --standalone``), optionally with a Gradio share link."""
from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from typing import Optional

from storage.context import Workbench
from workbench.playground.mount import mount_playgrounds
from workbench.playground.service import PLAY_PREFIX

log = logging.getLogger(__name__)

SHARE_API_HOST = "api.gradio.app"
OFFLINE_MESSAGE = ("Sharing needs internet and {host} cannot be reached, so there is no public link; "
                   "the playground is served locally only.")


def standalone_app(wb: Workbench, slug: str):
    """A FastAPI app serving only ``slug``: its page, its predict API, and ``/`` redirecting to the page."""
    from fastapi import FastAPI
    from fastapi.responses import RedirectResponse

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    mount_playgrounds(app, wb, only_slug=slug)

    @app.get("/", include_in_schema=False)
    def root(token: Optional[str] = None) -> RedirectResponse:
        return RedirectResponse(f"{PLAY_PREFIX}/{slug}/" + (f"?token={token}" if token else ""))

    return app


def internet_reachable(host: str = SHARE_API_HOST, timeout_s: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def open_share_link(port: int) -> tuple[Optional[str], str]:
    """(public URL or None, a sentence for the user). Never waits more than a few seconds when offline."""
    if not internet_reachable():
        return None, OFFLINE_MESSAGE.format(host=SHARE_API_HOST)
    try:
        from gradio.networking import setup_tunnel

        url = setup_tunnel("127.0.0.1", port, secrets.token_urlsafe(32), None, None)
    except Exception as exc:  # the tunnel client fails in many ways; the user needs one line
        return None, f"Gradio could not create a share link ({exc}); the playground is served locally only."
    return url, f"Public link (valid for about a week): {url}{PLAY_PREFIX}/"


def serve_standalone(wb: Workbench, slug: str, host: str, port: int, share: bool, say=print) -> None:
    """Serve until interrupted; ``say`` prints the lines a user needs (local URL, share link or why none)."""
    import uvicorn

    from workbench.playground.cache import configure_serving_threads
    from workbench.server import uvicorn_options

    configure_serving_threads()
    # The workbench's proxy trust (none unless configured), so the per-address rate limit sees real clients.
    options = {**uvicorn_options(wb.settings), "host": host, "port": port}
    server = uvicorn.Server(uvicorn.Config(standalone_app(wb, slug), **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.05)
    if not thread.is_alive():
        raise OSError(f"could not listen on {host}:{port} (is the port in use?)")
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    say(f"Serving only this playground on http://{shown}:{port}{PLAY_PREFIX}/{slug}/  (Ctrl-C stops)")
    if share:
        url, message = open_share_link(port)
        say(message if url is None else f"{message}{slug}/")
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        server.should_exit = True
        thread.join(10)
