"""The web server: the workbench UI at ``/``, playgrounds beside it, the embedded worker in its lifespan.

This app owns sign-in: once the database holds an account, the UI needs a session
(``POST /login`` sets its cookie, ``GET /logout`` ends it, it expires after ``session_hours``), and every
UI handler checks the role of whoever calls it (``workbench.ui.access``). With no account the workbench is
the single-user tool it always was. ``WORKBENCH_AUTH`` users are imported as admins at start. Playground
routes are registered on the outer FastAPI app *before* the UI is mounted at ``/``, so they are matched
first and never pass through the workbench login (a colleague with a playground link sees the playground
and nothing else).

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
from typing import AsyncIterator, Optional

from starlette.requests import Request

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
    """The FastAPI app: sign-in routes, the REST API, playground routes, then the Gradio workbench at ``/``.

    With ``worker=True`` one embedded worker runs for the lifetime of the app
    (started and stopped by the lifespan), so ``workbench serve`` alone trains runs.
    """
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio as gr
    from fastapi import FastAPI

    from workbench.throttle import LoginThrottle, LoginThrottleMiddleware
    from workbench.ui.app import CSS, THEME, build_ui

    _import_bootstrap_users(wb)

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

    # Sign-in is decided per request (an account added while the server runs locks the UI at once).
    app.add_middleware(SignInPage, login_page=_login_page(THEME, CSS),
                       signed_in=lambda cookies: _session_user(wb, cookies) is not None)
    add_signin_routes(app, wb)
    # A lone surrogate in a UI call would abort the caller's event stream inside Gradio: refused before it.
    app.add_middleware(RefuseLoneSurrogates)
    app.add_middleware(LoginThrottleMiddleware, throttle=LoginThrottle(),
                       on_locked=lambda address, user: _record_lock(wb, address, user))
    app.add_middleware(HideApiInfoFromVisitors)
    _mount_api(app, wb)
    if _playgrounds_available():
        from workbench.playground.mount import mount_playgrounds

        mount_playgrounds(app, wb)
    blocks = build_ui(wb)
    from workbench.services.datasets import EXAMPLES_DIR

    gr.mount_gradio_app(
        app, blocks, path="/", auth_dependency=lambda request: _session_user(wb, request.cookies),
        auth_message=AUTH_MESSAGE, theme=THEME, css=CSS, ssr_mode=False, show_error=True,
        max_file_size=f"{wb.settings.max_upload_mb}mb", footer_links=["gradio"],
        # Served to signed-in users: run artifacts (the model zip) and the shipped example files.
        allowed_paths=[str(wb.settings.runs_dir.resolve()), str(EXAMPLES_DIR)],
        blocked_paths=_secret_paths(wb),
    )
    # A mounted app never sets has_launched, and Gradio then skips its own check that a file handed
    # to an event handler was uploaded by a browser. Switch it on; workbench/ui/uploads.py checks again.
    blocks.has_launched = True
    return app


# ------------------------------------------------------------------ sign-in

AUTH_MESSAGE = "BERT Workbench: please sign in."
PAGE_PATHS = ("/", "/gradio_api/runs", "/gradio_api/runs/")  # the paths Gradio answers with its page


def _session_user(wb: Workbench, cookies) -> Optional[str]:
    """Gradio's ``auth_dependency``: the signed-in user's name; ``local`` with no account in the database;
    None (Gradio answers 401) without a live session."""
    from workbench.services import accounts
    from workbench.ui.access import SESSION_COOKIE

    actor = accounts.resolve(wb, session=(cookies or {}).get(SESSION_COOKIE) or None)
    return None if actor is None else actor.name


def _address(request) -> str:
    return request.client.host if request.client else ""


def add_signin_routes(app, wb: Workbench) -> None:
    """``POST /login`` (the form Gradio's login screen posts: ``username``, ``password``) and ``GET /logout``,
    on ``app`` before Gradio is mounted, so they answer instead of Gradio's own.

    A right password gets 200 and an HttpOnly, SameSite=Lax session cookie (Secure over https) that lasts as
    long as the session does; a wrong one 400, as Gradio answers (the login screen and the throttle count on
    it). Neither the password nor the name typed is logged (a password typed in the name box would be):
    a failed sign-in is one line with the address."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse, RedirectResponse

    from workbench.services import accounts
    from workbench.ui.access import SESSION_COOKIE

    async def login(request: Request):
        form = await request.form()
        name, password = str(form.get("username") or "").strip(), str(form.get("password") or "")
        await form.close()
        address = _address(request)
        actor = await run_in_threadpool(accounts.authenticate, wb, name, password, address=address) \
            if name and password else None
        if actor is None:
            log.warning("sign-in failed from %s (the activity log names the user tried)", address)
            return JSONResponse({"detail": "Incorrect credentials."}, status_code=400)
        raw = await run_in_threadpool(accounts.start_session, wb, actor, address=address)
        response = JSONResponse({"success": True})
        hours = float(getattr(wb.settings, "session_hours", 12) or 12)
        response.set_cookie(SESSION_COOKIE, raw, max_age=int(hours * 3600), path="/", httponly=True,
                            samesite="lax", secure=request.url.scheme == "https")
        return response

    def logout(request: Request):
        raw = request.cookies.get(SESSION_COOKIE)
        if raw:
            accounts.end_session(wb, raw)
        response = RedirectResponse(url=str(request.scope.get("root_path") or "") + "/", status_code=302)
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")
        return response

    for path in ("/login", "/login/"):
        app.add_api_route(path, login, methods=["POST"], include_in_schema=False)
    for path in ("/logout", "/logout/"):
        app.add_api_route(path, logout, methods=["GET"], include_in_schema=False)


def _record_lock(wb: Workbench, address: str, user: str) -> None:
    """A sign-in the throttle just locked, in the activity log (the name as typed, never a password)."""
    from workbench.services import accounts

    try:
        accounts.record(wb, None, "sign_in_locked", "user", user[:200] or None, address=address)
    except Exception:  # noqa: BLE001 - the lock holds whether or not the log could be written
        log.exception("could not record a sign-in lock")


def _login_page(theme, css):
    """Gradio's own login screen, served by a page-less Gradio app to a visitor without a session: Gradio
    mounted with ``auth_dependency`` would answer 401 JSON instead of a page. The screen posts to ``/login``."""
    import gradio as gr
    from fastapi import FastAPI

    with gr.Blocks(title="BERT Workbench", analytics_enabled=False) as empty:
        pass
    return gr.mount_gradio_app(FastAPI(), empty, path="/", auth=lambda _user, _password: False,
                               auth_message=AUTH_MESSAGE, theme=theme, css=css, ssr_mode=False)


class SignInPage:
    """ASGI middleware: a ``GET`` of the workbench page without a live session gets the login screen."""

    def __init__(self, app, login_page, signed_in):
        self.app, self.login_page, self.signed_in = app, login_page, signed_in

    async def __call__(self, scope: dict, receive, send) -> None:
        if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD") and scope.get("path") in PAGE_PATHS:
            from starlette.concurrency import run_in_threadpool
            from starlette.requests import HTTPConnection

            if not await run_in_threadpool(self.signed_in, HTTPConnection(scope).cookies):
                await self.login_page(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _import_bootstrap_users(wb: Workbench) -> None:
    """``WORKBENCH_AUTH``'s users imported once, hashed, as admins; while there is no account, a warning says the
    workbench is open and how to make the first admin."""
    from workbench.services.bootstrap import first_start_message, import_bootstrap_users

    import_bootstrap_users(wb)
    message = first_start_message(wb)
    if message:
        log.warning("%s", message)


def _mount_api(app, wb: Workbench) -> None:
    """The REST API under ``/api/v1`` (``workbench.api``, when this version has it)."""
    if importlib.util.find_spec("workbench.api") is None:
        return
    from workbench.api import mount_api

    mount_api(app, wb)


def _secret_paths(wb: Workbench) -> list[str]:
    """Files no Gradio route may ever serve, whatever else is allowed: the database and the password file."""
    paths = [wb.settings.home / "workbench.db"]
    auth = Path((wb.settings.auth or "").strip()).expanduser()
    if wb.settings.auth and auth.is_file():
        paths.append(auth)
    return [str(p.resolve()) for p in paths]
