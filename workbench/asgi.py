"""Small ASGI pieces that look at a request body or a page before the app does (or after it answered).

``read_body``/``replay`` let a middleware read a body and still hand it to the app.
``RefuseLoneSurrogates`` answers 422 to a Gradio API call whose JSON holds an unpaired UTF-16 surrogate.
``HideApiInfoFromVisitors`` drops the API description Gradio writes into the login page.
"""
from __future__ import annotations

import json
import logging
import re
from typing import Any, Optional

from starlette.responses import JSONResponse

log = logging.getLogger(__name__)


async def read_body(receive: Any, limit: Optional[int] = None) -> Optional[bytes]:
    """The whole request body, or None when it is longer than ``limit`` bytes (reading stops there)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def replay(body: bytes, receive: Any) -> Any:
    """A ``receive`` that hands the app the body already read, then passes on (disconnects)."""
    sent = False

    async def replayed() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _header(scope: dict, name: bytes) -> str:
    return next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == name), "")


# ------------------------------------------------------------------ lone surrogates

# The largest JSON call body read: as the predict API's (workbench/playground/api.py); files go as multipart.
MAX_JSON_BODY = 16 * 10**6

# A JSON escape of a UTF-16 surrogate, or one encoded as UTF-8 bytes (Python's json reads those too).
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}|\xed[\xa0-\xbf]")


def lone_surrogate(value: Any) -> Optional[tuple[str, str, int]]:
    """(where, the character, its index) of the first string in ``value`` (keys too) that is not valid
    Unicode, or None. ``where`` is a path such as ``data[1]``."""
    todo: list[tuple[str, Any]] = [("", value)]
    while todo:
        where, item = todo.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return where or "the body", item[exc.start], exc.start
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                todo.append((f"{where}.{key}" if where else str(key), child))
                todo.append((f"a key of {where}" if where else "a key", key))
        elif isinstance(item, list):
            todo.extend((f"{where}[{i}]", child) for i, child in reversed(list(enumerate(item))))
    return None


class RefuseLoneSurrogates:
    """ASGI middleware: a JSON ``POST`` under ``prefix`` holding a lone surrogate gets 422 and never reaches Gradio.

    Gradio would pass the string to the handler, and anything that echoes it (a dropdown's "not in
    the list of choices", an error message) cannot be encoded for the browser: the serialisation
    fails inside the session's event stream, which aborts, taking the session's other events with it.
    Refused here, the call gets its own error (the Gradio frontend shows ``detail``) and the stream
    is never involved. Bodies without a surrogate escape are passed on after one regex search.
    """

    def __init__(self, app: Any, prefix: str = "/gradio_api/", max_body: int = MAX_JSON_BODY):
        self.app, self.prefix, self.max_body = app, prefix, max_body

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        content_type = _header(scope, b"content-type").lower()
        if scope["type"] != "http" or scope.get("method") != "POST" or \
                not str(scope.get("path", "")).startswith(self.prefix) or \
                content_type.startswith(("multipart/", "application/x-www-form-urlencoded")):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, self.max_body)
        if body is None:  # read to look at, so bounded: the rest is never held
            message = f"the request body is larger than {self.max_body:,} bytes"
            log.warning("request refused (413): %s %s", scope.get("path"), message)
            await JSONResponse({"detail": message}, status_code=413)(scope, receive, send)
            return
        found = None
        if _SURROGATE_HINT.search(body):
            try:
                found = lone_surrogate(json.loads(body))
            except (ValueError, RecursionError):
                found = None  # not JSON Gradio can read either: it answers that itself
        if found is None:
            await self.app(scope, replay(body, receive), send)
            return
        where, char, index = found
        message = (f"{where} holds a lone surrogate {char!r} at character {index}: send valid Unicode text "
                   "(an unpaired UTF-16 surrogate is not a character)")
        log.warning("request refused (422): %s %s", scope.get("path"), message)
        await JSONResponse({"detail": message}, status_code=422)(scope, receive, send)


# ------------------------------------------------------------------ the login page

_PAGE_CONFIG = re.compile(rb"window\.gradio_config = (.*?);</script>", re.S)
_API_INFO = re.compile(rb"(window\.gradio_api_info = )(.*?)(;</script>)", re.S)


def hide_api_info(page: bytes) -> bytes:
    """``page`` without the API description when it is the login page (its config says ``auth_required``).

    Gradio's JSON in a page escapes ``<``, so ``;</script>`` ends each script. The frontend fetches
    ``/gradio_api/info`` (which requires the login) when it needs the description and finds none.
    """
    config = _PAGE_CONFIG.search(page)
    try:
        sign_in = bool(json.loads(config.group(1)).get("auth_required")) if config else False
    except ValueError:
        sign_in = True  # a page we cannot read is treated as the login page: it loses nothing but a prefetch
    return _API_INFO.sub(rb"\1null\3", page, count=1) if sign_in else page


def _decoded(body: bytes, encoding: bytes) -> Optional[bytes]:
    """``body`` without its content encoding (Gradio compresses pages with brotli or gzip), None if unknown."""
    if encoding in (b"", b"identity"):
        return body
    try:
        if encoding == b"br":
            import brotli

            return brotli.decompress(body)
        if encoding == b"gzip":
            import gzip

            return gzip.decompress(body)
    except Exception:  # noqa: BLE001 - a body we cannot decode is judged as undecodable, below
        return None
    return None


class HideApiInfoFromVisitors:
    """ASGI middleware: a ``GET`` that Gradio answers with its login page carries no API description.

    Gradio 6 writes the description of every endpoint (``window.gradio_api_info``, 140 of them
    here, parameters and all) into the page it serves to a visitor who has not signed in, although
    ``/gradio_api/info`` itself requires the login. Only HTML answers are buffered and looked at;
    a rewritten page is sent uncompressed (the login page is small), any other as it came.
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        start: dict = {}
        chunks: list[bytes] = []

        async def rewriting(message: dict) -> None:
            if message["type"] == "http.response.start":
                if dict(message.get("headers", [])).get(b"content-type", b"").startswith(b"text/html"):
                    start.update(message)
                    return
            elif message["type"] == "http.response.body" and start:
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                await self._send_page(start, b"".join(chunks), send)
                return
            await send(message)

        await self.app(scope, receive, rewriting)

    @staticmethod
    async def _send_page(start: dict, body: bytes, send: Any) -> None:
        headers = start.get("headers", [])
        page = _decoded(body, dict(headers).get(b"content-encoding", b"").strip().lower())
        hidden = hide_api_info(page) if page is not None else page
        if hidden is not None and hidden != page:
            body = hidden
            headers = [(k, v) for k, v in headers if k not in (b"content-length", b"content-encoding")]
            headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
