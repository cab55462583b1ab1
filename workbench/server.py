"""The web server: the workbench UI at ``/``, playgrounds beside it, the embedded worker in its lifespan.

The UI sits behind ``WORKBENCH_AUTH`` when it is set. Playground routes are
registered on the outer FastAPI app *before* the UI is mounted at ``/``, so they
are matched first and never pass through the workbench login (a colleague with
a playground link sees the playground and nothing else).

``uvicorn_options`` is how every server of the workbench is started: uvicorn believes
``X-Forwarded-For`` only from the proxies named in ``WORKBENCH_FORWARDED_ALLOW_IPS`` (none by
default), so a client cannot pick the address the sign-in throttle counts.
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from pathlib import Path
from typing import AsyncIterator

from storage.context import Workbench
from workbench.asgi import HideApiInfoFromVisitors, RefuseLoneSurrogates
# parse_auth moved to the services (the WORKBENCH_AUTH bootstrap imports its users); still importable here.
from workbench.services.bootstrap import parse_auth  # noqa: F401

log = logging.getLogger(__name__)


def uvicorn_options(settings) -> dict:
    """Keyword arguments for ``uvicorn.run``/``uvicorn.Config`` serving the workbench under ``settings``.

    uvicorn's own default trusts proxy headers from 127.0.0.1 (and ``FORWARDED_ALLOW_IPS``), so any
    local process, or a proxy that passes on what the client sent, could choose the client address.
    Here proxy headers are read only when ``forwarded_allow_ips`` names the proxies to believe.
    """
    trusted = settings.forwarded_allow_ips
    return {"host": settings.host, "port": settings.port, "log_level": "warning",
            "proxy_headers": bool(trusted), "forwarded_allow_ips": trusted or ""}


def _playgrounds_available() -> bool:
    return importlib.util.find_spec("workbench.playground.mount") is not None


def create_app(wb: Workbench, *, worker: bool = True):
    """The FastAPI app: playground routes, then the Gradio workbench at ``/``.

    With ``worker=True`` one embedded worker runs for the lifetime of the app
    (started and stopped by the lifespan), so ``workbench serve`` alone trains runs.
    """
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr
    from fastapi import FastAPI

    from workbench.ui.app import CSS, THEME, build_ui

    users = parse_auth(wb.settings.auth)

    @contextlib.asynccontextmanager
    async def lifespan(_app) -> AsyncIterator[None]:
        handle = None
        if worker:
            from workbench.services.workers import start_embedded_worker

            handle = start_embedded_worker(wb)
            log.info("embedded worker started")
        try:
            yield
        finally:
            if handle is not None:
                handle.stop()
                log.info("embedded worker stopped")

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict:
        return {"ok": True}

    # A lone surrogate in a UI call would abort the caller's event stream inside Gradio: refused before it.
    app.add_middleware(RefuseLoneSurrogates)
    if users:
        from workbench.throttle import LoginThrottle, LoginThrottleMiddleware

        app.add_middleware(LoginThrottleMiddleware, throttle=LoginThrottle())
        app.add_middleware(HideApiInfoFromVisitors)
    if _playgrounds_available():
        from workbench.playground.mount import mount_playgrounds

        mount_playgrounds(app, wb)
    blocks = build_ui(wb)
    from workbench.services.datasets import EXAMPLES_DIR

    gr.mount_gradio_app(
        app, blocks, path="/", auth=users or None, auth_message="BERT Workbench: please sign in.",
        theme=THEME, css=CSS, ssr_mode=False, show_error=True,
        max_file_size=f"{wb.settings.max_upload_mb}mb", footer_links=["gradio"],
        # Served to logged-in users: run artifacts (the model zip) and the shipped example files.
        allowed_paths=[str(wb.settings.runs_dir.resolve()), str(EXAMPLES_DIR)],
        blocked_paths=_secret_paths(wb),
    )
    # A mounted app never sets has_launched, and Gradio then skips its own check that a file handed
    # to an event handler was uploaded by a browser. Switch it on; workbench/ui/uploads.py checks again.
    blocks.has_launched = True
    return app


def _secret_paths(wb: Workbench) -> list[str]:
    """Files no Gradio route may ever serve, whatever else is allowed: the database and the password file."""
    paths = [wb.settings.home / "workbench.db"]
    auth = Path((wb.settings.auth or "").strip()).expanduser()
    if wb.settings.auth and auth.is_file():
        paths.append(auth)
    return [str(p.resolve()) for p in paths]
