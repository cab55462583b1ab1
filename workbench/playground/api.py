"""REST edge: ``POST /api/v1/predict/<slug>``; workbench errors become JSON errors here, and only here.

Every refusal is a JSON error: a body over ``MAX_BODY`` bytes (413), one that is not JSON or is
nested too deeply to parse (422), a GET (405); a public playground's caller over the per-address
rate, a client with a prediction already in flight or over its tokens a minute (429) and a
prediction that finds every slot and the wait queue taken (503) come with ``Retry-After``. The server keeps serving whatever a caller sends.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Optional

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from workbench.errors import ConfigError, ModelUnavailable, NotFound, WorkbenchError
from workbench.playground import service
from workbench.playground.limits import Busy, RateLimited, Refused
from workbench.playground.predictors import expected_inputs
from workbench.playground.runtime import Playgrounds
from workbench.playground.service import API_PREFIX, AccessDenied
from workbench.ui.edge import RefusalLog

log = logging.getLogger(__name__)
MAX_BODY = 16 * 10**6  # 64 inputs of 20,000 characters, each escaped as \uXXXX, still fit
# A flood of refused calls (429s from one client, 401s of a token guesser) must not flood the log: at most
# workbench.ui.edge.REFUSAL_LINES_PER_MINUTE lines of each status a minute, the rest counted (docs/access.md).
REFUSALS = RefusalLog()


class BodyTooLarge(WorkbenchError):
    """The request body is longer than MAX_BODY (HTTP 413)."""


class MethodNotAllowed(WorkbenchError):
    """Only POST predicts (HTTP 405)."""


def error_status(exc: WorkbenchError) -> int:
    if isinstance(exc, BodyTooLarge):
        return 413
    if isinstance(exc, MethodNotAllowed):
        return 405
    if isinstance(exc, RateLimited):
        return 429
    if isinstance(exc, Busy):
        return 503
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, AccessDenied):
        return 401
    if isinstance(exc, ConfigError):
        return 422
    if isinstance(exc, ModelUnavailable):
        return 503
    return 400


def error_response(exc: WorkbenchError) -> JSONResponse:
    """The JSON answer to a refused request, and its one line in the server log (a caller's mistake, no traceback)."""
    status = error_status(exc)
    REFUSALS.warning(log, f"REST refusals {status}", "predict refused (%d): %s", status, " ".join(str(exc).split()))
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {"Allow": "POST"} if status == 405 else {}
    body = {"error": str(exc), "status": status}
    if isinstance(exc, Refused):
        headers["Retry-After"], body["retry_after"] = str(exc.retry_after), exc.retry_after
    return JSONResponse(body, status_code=status, headers=headers or None)


def request_token(request: Request) -> Optional[str]:
    """The token from ``Authorization: Bearer <token>``, else from ``?token=``."""
    return service.bearer_token(request.headers.get("authorization", "")) or request.query_params.get("token") or None


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request body, read no further than ``limit`` bytes (BodyTooLarge past that)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"the request body has {int(declared):,} bytes; the limit is {limit:,}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the request body is longer than {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
               bool: "true or false", type(None): "null"}


def parse_body(body: bytes, kind: str) -> Any:
    """The ``inputs`` of a predict request to a playground of ``kind``; ConfigError (422) for any other body,
    with a message that says what ``inputs`` should hold for that kind."""
    try:
        payload = json.loads(body or b"null")
    except RecursionError:
        raise ConfigError("the request body is nested too deeply to read") from None
    except ValueError as exc:
        raise ConfigError(f"the request body is not valid JSON: {exc}") from None
    holds = f'"inputs" holds {expected_inputs(kind)}, or a list of those for a batch'
    if not isinstance(payload, dict):
        raise ConfigError(f'the request body must be a JSON object like {{"inputs": ...}}, not '
                          f'{_JSON_TYPES.get(type(payload), "that")}; for this {kind} playground {holds}')
    if "inputs" not in payload:
        found = f"it has {', '.join(map(json.dumps, list(payload)[:5]))}" if payload else "the object is empty"
        raise ConfigError(f'"inputs" is missing from the request body ({found}); for this {kind} playground '
                          f'{holds}')
    return payload["inputs"]


def build_router(runtime: Playgrounds, only_slug: Optional[str] = None) -> APIRouter:
    router = APIRouter()

    @router.get(API_PREFIX + "/{slug}", include_in_schema=False)
    async def predict_get(slug: str) -> JSONResponse:
        return error_response(MethodNotAllowed(
            'predict with POST and a JSON body like {"inputs": "your text"}; a GET does not predict'))

    @router.post(API_PREFIX + "/{slug}", include_in_schema=False)
    async def predict(slug: str, request: Request) -> JSONResponse:
        if only_slug is not None and slug != only_slug:
            return error_response(NotFound(f"playground {slug!r} does not exist"))
        try:
            # Auth before reading: a caller without the token learns nothing about the inputs;
            # the rate and the client's bounds before reading too: a caller over them costs no body.
            target = await run_in_threadpool(runtime.target, slug, request_token(request))
            with runtime.admit(target, request.client.host if request.client else None) as meter:
                kind = await run_in_threadpool(runtime.kind, target)
                inputs = parse_body(await read_body(request), kind)
                result = await run_in_threadpool(runtime.predict, slug, inputs, request_token(request), True, meter)
        except WorkbenchError as exc:
            return error_response(exc)
        return JSONResponse(result)

    return router
