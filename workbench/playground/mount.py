"""``mount_playgrounds(app, wb)``: the REST API and the ``/play/<slug>/`` pages on the workbench's FastAPI app.

Pages are built on the first request for their slug, not at start-up, so a
playground published later (by the CLI, in another process) works without a
restart. Every request under ``/play/<slug>`` passes one gate first:

* unknown or unpublished slug → 404 page that says so;
* token-protected playground → the token from ``?token=``, ``Authorization:
  Bearer`` or the cookie set on the first visit, else 401 with a token form;
* those refusals are pages only for a visit to the page itself; the page's own calls (its queue,
  config, API) get them as JSON errors, whose message a page left open shows as it is ("This
  playground is no longer published.") where an HTML answer read "Could not parse server response";
* only the routes a playground page needs pass (``allowed_route``): the page, its assets, its
  config and API info, the queue and the calls of its own functions. Gradio's file routes and
  uploads answer 404/403 here, so a visitor reaches no file of the workbench (its uploads, model
  zips) and cannot store any; the heat-maps travel inline in the page instead of as files;
* a POST body is read once, at most ``MAX_BODY`` bytes, and must be JSON that names one of the
  playground's own functions — by index (``queue/join``, and ``run/``/``api/`` with a ``fn_index``,
  which the page uses to fill in an example) or by public API name (``call/<name>``, ``run/<name>``)
  — else a 4xx JSON error (Gradio itself answers 500 with a traceback to unknown ones);
* the playground's Gradio queue is bounded (``playground_queue`` waiting events, ``playground_concurrency``
  running per event) and its functions predict through the same forward-pass slots as the REST API;
  a full queue answers 503 with ``Retry-After``;
* then the request goes to that playground's own Gradio app and nowhere else.

The gate is an ASGI middleware (it sees ``/play/...`` before any route), so the
pages stay reachable when the workbench UI at ``/`` is behind WORKBENCH_AUTH,
and the playground apps never see the workbench's routes.
"""
from __future__ import annotations

import asyncio
import dataclasses
import html
import json
import logging
import re
from typing import Any, Optional
from urllib.parse import parse_qs, quote, unquote

from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from storage.context import Workbench
from workbench.asgi import read_body, replay
from workbench.errors import NotFound, WorkbenchError
from workbench.playground.api import REFUSALS, build_router, error_status
from workbench.playground.runtime import Playgrounds
from workbench.playground.service import PLAY_PREFIX, AccessDenied, bearer_token

log = logging.getLogger(__name__)

COOKIE = "playground_token"
_SLUG_PATH = re.compile(rf"^{PLAY_PREFIX}/([a-z0-9-]+)(/.*)?$")
MAX_BODY = 4 * 10**6  # a QA request of 20,000-character fields fits many times over
# What a playground page and its API clients (browser, gradio_client, curl) request; nothing else passes.
_PAGE_ROUTES = frozenset({
    "/", "/config", "/config/", "/theme.css", "/favicon.ico", "/manifest.json", "/robots.txt", "/pwa_icon",
    "/gradio_api/info", "/gradio_api/info/", "/gradio_api/queue/join", "/gradio_api/queue/data",
    "/gradio_api/startup-events", "/gradio_api/app_id", "/gradio_api/app_id/",
})
_PAGE_PREFIXES = ("/assets/", "/static/", "/svelte/", "/pwa_icon/", "/gradio_api/heartbeat/",
                  "/gradio_api/call/", "/gradio_api/run/", "/gradio_api/api/")
_QUEUE_JOIN = "/gradio_api/queue/join"
_DIRECT_PREFIXES = ("/gradio_api/run/", "/gradio_api/api/")  # Gradio runs these without its queue
_NAMED_PREFIXES = ("/gradio_api/call/v2/", "/gradio_api/call/", *_DIRECT_PREFIXES)
_UPLOAD_ROUTES = ("/gradio_api/upload", "/gradio_api/upload_progress", "/upload")


def allowed_route(rest: str) -> bool:
    """Whether ``/play/<slug><rest>`` is a route a playground serves (its page, assets, queue, own calls)."""
    if rest in _PAGE_ROUTES:
        return True
    return rest.startswith(_PAGE_PREFIXES) and ".." not in rest and "file=" not in rest


def _json_error(message: str, status: int) -> JSONResponse:
    REFUSALS.warning(log, f"playground refusals {status}", "playground request refused (%d): %s", status, message)
    return JSONResponse({"error": message, "status": status}, status_code=status)


@dataclasses.dataclass(frozen=True)
class PageFunctions:
    """What a call to a playground's Gradio app may name: any function by index, a public API by name."""

    indexes: frozenset[int] = frozenset()
    api_names: frozenset[str] = frozenset()


def called_api(rest: str) -> Optional[str]:
    """The API name a POST to ``call/<name>``, ``call/v2/<name>``, ``run/<name>`` or ``api/<name>`` names."""
    prefix = next((p for p in _NAMED_PREFIXES if rest.startswith(p)), None)
    return rest.removeprefix(prefix).strip("/") if prefix else None


def check_call_body(rest: str, body: bytes, functions: PageFunctions) -> Optional[JSONResponse]:
    """None when a POST body is a JSON object Gradio can run for this playground, else the 4xx answer."""
    try:
        payload = json.loads(body or b"null")
    except (ValueError, RecursionError):
        return _json_error("the request body is not valid JSON (or is nested too deeply)", 400)
    if not isinstance(payload, dict) or not isinstance(payload.get("data", []), list):
        return _json_error('the request body must be a JSON object like {"data": [...]}', 422)
    if rest == _QUEUE_JOIN or (rest.startswith(_DIRECT_PREFIXES) and payload.get("fn_index") is not None):
        index = payload.get("fn_index")
        if isinstance(index, bool) or not isinstance(index, int) or index not in functions.indexes:
            return _json_error(f"fn_index {index!r} is not a function of this playground", 422)
        return None
    api = called_api(rest)
    if api is not None and api not in functions.api_names:
        known = ", ".join(f"/{name}" for name in sorted(functions.api_names)) or "none"
        return _json_error(f"{api!r} is not an API of this playground (it has: {known})", 404)
    return None


def mount_playgrounds(app: Any, wb: Workbench, only_slug: Optional[str] = None) -> Playgrounds:
    """Add the predict API and the playground pages to ``app``; ``only_slug`` serves just that one (standalone)."""
    runtime = Playgrounds(wb)
    app.include_router(build_router(runtime, only_slug))
    app.add_middleware(PlaygroundGate, wb=wb, runtime=runtime, only_slug=only_slug)
    app.state.playgrounds = runtime
    return runtime


def _message_page(title: str, text: str, status: int, token_form: bool = False) -> HTMLResponse:
    form = ("<form method='get'><input name='token' type='password' placeholder='access token' autofocus> "
            "<button type='submit'>Open</button></form>") if token_form else ""
    body = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body style='font-family:sans-serif;max-width:36em;margin:4em auto'>"
            f"<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>{form}</body></html>")
    return HTMLResponse(body, status_code=status)


def is_page_visit(rest: Optional[str]) -> bool:
    """Whether ``/play/<slug><rest>`` is the page itself (a refusal is a page) rather than one of the page's
    own calls (a refusal is a JSON error, which Gradio's client shows; an HTML one it cannot parse)."""
    return rest in (None, "", "/")


def _refusal(rest: Optional[str], title: str, text: str, status: int) -> Response:
    """A refused request's answer: a page with ``title`` for a page visit, else the JSON error ``text``."""
    return _message_page(title, text, status) if is_page_visit(rest) else _json_error(text, status)


def _request_token(scope: dict) -> tuple[Optional[str], bool]:
    """(token, came from the query string) from ?token=, Authorization: Bearer, or the cookie."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if query.get("token"):
        return query["token"][0], True
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    bearer = bearer_token(headers.get("authorization", ""))
    if bearer:
        return bearer, False
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return unquote(value), False
    return None, False


class PlaygroundGate:
    """ASGI middleware: routes ``/play/<slug>/...`` to that playground's Gradio app after the checks above."""

    def __init__(self, app: Any, wb: Workbench, runtime: Playgrounds, only_slug: Optional[str] = None):
        self.app, self.wb, self.runtime, self.only_slug = app, wb, runtime, only_slug
        self._apps: dict[str, Any] = {}
        self._functions: dict[str, PageFunctions] = {}
        self._build_lock = asyncio.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        match = _SLUG_PATH.match(scope.get("path", "")) if scope["type"] in ("http", "websocket") else None
        if match is None:
            await self.app(scope, receive, send)
            return
        slug, rest = match.group(1), match.group(2)
        response = await self._check(slug, scope, rest)
        if response is None and not rest:
            # Gradio pages live at a trailing slash; keep the query (the token) across the redirect.
            query = scope.get("query_string", b"").decode("latin-1")
            response = RedirectResponse(f"{PLAY_PREFIX}/{slug}/" + (f"?{query}" if query else ""), status_code=307)
        if response is None and rest and (scope["type"] != "http" or not allowed_route(rest)):
            response = (_json_error("playgrounds take no file uploads", 403) if rest.startswith(_UPLOAD_ROUTES)
                        else _json_error("not found", 404))
        if response is not None:
            if scope["type"] == "http":
                await response(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        try:
            sub_app = await self._app_for(slug)
        except WorkbenchError as exc:
            await _refusal(rest, "Playground unavailable", str(exc), error_status(exc))(scope, receive, send)
            return
        if scope.get("method") == "POST":
            body = await read_body(receive, MAX_BODY)
            refusal = (_json_error(f"the request body is larger than {MAX_BODY:,} bytes", 413) if body is None
                       else check_call_body(rest, body, self._functions.get(slug, PageFunctions())))
            if refusal is not None:
                await refusal(scope, receive, send)
                return
            receive = replay(body, receive)
            send = _retry_after_when_full(send, self.runtime.slots.retry_after)
        token, from_query = _request_token(scope)
        if from_query and token:
            send = _with_cookie(send, slug, token)
        if scope["type"] == "http" and rest == "/":
            send = _relative_root_links(send)
        await sub_app(scope, receive, send)

    async def _check(self, slug: str, scope: dict, rest: Optional[str]) -> Optional[Response]:
        """None when ``slug`` is served here and the request may open it, else the refusal to answer with."""
        token, _ = _request_token(scope)
        try:
            if self.only_slug is not None and slug != self.only_slug:
                raise NotFound(f"playground {slug!r} is not served here")
            await run_in_threadpool(self.runtime.target, slug, token)
        except NotFound as exc:
            self._apps.pop(slug, None)
            self._functions.pop(slug, None)
            return _refusal(rest, "Playground not found", str(exc), 404)
        except AccessDenied as exc:
            if not is_page_visit(rest):
                return _json_error(str(exc), 401)
            return _message_page("Access token needed", f"{exc}. Ask the person who shared the link for it.",
                                 401, token_form=True)
        return None

    async def _app_for(self, slug: str) -> Any:
        if slug in self._apps:
            return self._apps[slug]
        async with self._build_lock:
            if slug not in self._apps:
                self._apps[slug], self._functions[slug] = await self._build(slug)
        return self._apps[slug]

    async def _build(self, slug: str) -> tuple[Any, PageFunctions]:
        """A holder FastAPI app with the playground's Blocks mounted at /play/<slug> (so Gradio sees its root),
        and the Blocks' functions (what a queue/join and a call/<name> may name)."""
        import gradio as gr
        from fastapi import FastAPI

        from workbench.playground.page import build_playground

        blocks = build_playground(self.wb, slug, self.runtime)
        holder = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
        gr.mount_gradio_app(holder, blocks, path=f"{PLAY_PREFIX}/{slug}", ssr_mode=False, footer_links=["api"],
                            show_error=True, run_history=False, mcp_server=False)
        # The holder is never started by a server, so run what its lifespan would run.
        blocks.run_startup_events()
        await blocks.run_extra_startup_events()
        log.info("playground %s ready at %s/%s/", slug, PLAY_PREFIX, slug)
        public = frozenset(fn.api_name for fn in blocks.fns.values() if fn.api_name and fn.api_visibility == "public")
        return holder, PageFunctions(indexes=frozenset(blocks.fns), api_names=public)


def _retry_after_when_full(send: Any, seconds: Any) -> Any:
    """Add ``Retry-After`` to Gradio's 503 (its queue is full), which comes without one."""

    async def wrapped(message: dict) -> None:
        if message["type"] == "http.response.start" and message["status"] == 503:
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"retry-after"]
            message = {**message, "headers": [*headers, (b"retry-after", str(max(1, seconds())).encode())]}
        await send(message)

    return wrapped


def _with_cookie(send: Any, slug: str, token: str) -> Any:
    """Remember a token given in the link, so the page's own requests carry it."""
    cookie = (f"{COOKIE}={quote(token, safe='')}; Path={PLAY_PREFIX}/{slug}/; HttpOnly; SameSite=Lax").encode()

    async def wrapped(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
        await send(message)

    return wrapped


_ROOT_LINK = re.compile(rb'((?:href|src)=")/(?!/)')


def _relative_root_links(send: Any) -> Any:
    """Make the page's root-absolute links (Gradio's ``/manifest.json``) relative, so none points into the workbench."""
    start: dict = {}
    chunks: list[bytes] = []

    async def wrapped(message: dict) -> None:
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers", []))
            if b"text/html" not in headers.get(b"content-type", b"") or b"content-encoding" in headers:
                start["passthrough"] = True
                await send(message)
            else:
                start["message"] = message
            return
        if start.get("passthrough") or message["type"] != "http.response.body":
            await send(message)
            return
        chunks.append(message.get("body", b""))
        if message.get("more_body"):
            return
        body = _ROOT_LINK.sub(rb"\1./", b"".join(chunks))
        headers = [(k, v) for k, v in start["message"].get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start["message"], "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return wrapped
