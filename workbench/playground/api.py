"""REST edge: ``POST /api/v1/predict/<slug>``; workbench errors become JSON errors here, and only here."""
from __future__ import annotations

import json
import logging
from typing import Optional

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from workbench.errors import ConfigError, ModelUnavailable, NotFound, WorkbenchError
from workbench.playground import service
from workbench.playground.runtime import Playgrounds
from workbench.playground.service import API_PREFIX, AccessDenied

log = logging.getLogger(__name__)


def error_status(exc: WorkbenchError) -> int:
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
    log.warning("predict refused (%d): %s", status, " ".join(str(exc).split()))
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": str(exc), "status": status}, status_code=status, headers=headers)


def request_token(request: Request) -> Optional[str]:
    """The token from ``Authorization: Bearer <token>``, else from ``?token=``."""
    return service.bearer_token(request.headers.get("authorization", "")) or request.query_params.get("token") or None


def build_router(runtime: Playgrounds, only_slug: Optional[str] = None) -> APIRouter:
    router = APIRouter()

    @router.post(API_PREFIX + "/{slug}", include_in_schema=False)
    async def predict(slug: str, request: Request) -> JSONResponse:
        if only_slug is not None and slug != only_slug:
            return error_response(NotFound(f"playground {slug!r} does not exist"))
        body = await request.body()
        try:
            try:
                # Auth before parsing: a caller without the token learns nothing about the inputs.
                await run_in_threadpool(runtime.target, slug, request_token(request))
                payload = json.loads(body or b"null")
            except ValueError as exc:
                raise ConfigError(f"the request body is not valid JSON: {exc}") from None
            if not isinstance(payload, dict) or "inputs" not in payload:
                raise ConfigError('the request body must be a JSON object like {"inputs": ...}')
            result = await run_in_threadpool(runtime.predict, slug, payload["inputs"], request_token(request))
        except WorkbenchError as exc:
            return error_response(exc)
        return JSONResponse(result)

    return router
