"""Workbench errors as the REST API answers them: one JSON shape, ``{"error": message, "status": code}``, and one
status per kind of error, so a script reads the same sentence the CLI prints.

    401 SignInRequired   no session or token, or a token that is unknown, revoked or expired
    403 Forbidden        (AccessDenied) the role, the token's scope or ownership does not allow it
    404 NotFound         the dataset, run, job, sweep, audit, project or playground does not exist
    409 InvalidState     the thing is in the wrong state (cancel a finished run, delete a running one)
    413 BodyTooLarge     the body is longer than the route reads
    422 ConfigError, DataValidationError (with ``problems``: file, line, column and fix of each),
        ModelUnavailable: the request itself is wrong
    400 any other WorkbenchError
"""
from __future__ import annotations

import logging

from fastapi.responses import JSONResponse

from workbench.errors import (ConfigError, DataValidationError, Forbidden, InvalidState, ModelUnavailable, NotFound,
                              WorkbenchError)
from workbench.services.access import SignInRequired

log = logging.getLogger(__name__)


class ApiError(WorkbenchError):
    """A refusal of the REST edge itself, with its HTTP status (405, 413, 415)."""

    def __init__(self, message: str, status: int, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


_STATUSES = ((SignInRequired, 401), (Forbidden, 403), (NotFound, 404), (InvalidState, 409),
             (DataValidationError, 422), (ConfigError, 422), (ModelUnavailable, 422))


def error_status(exc: WorkbenchError) -> int:
    if isinstance(exc, ApiError):
        return exc.status
    return next((status for kind, status in _STATUSES if isinstance(exc, kind)), 400)


def error_response(exc: WorkbenchError) -> JSONResponse:
    """The JSON answer to a refused request, and its one line in the server log (a caller's mistake: no traceback;
    the messages never hold a password or a token value)."""
    status = error_status(exc)
    message = str(exc)
    log.info("REST API refused (%d): %s", status, " ".join(message.split())[:300])
    body: dict = {"error": message, "status": status}
    if isinstance(exc, DataValidationError):
        body["problems"] = [p.to_dict() for p in exc.problems]
    headers = dict(getattr(exc, "headers", {}) or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=headers or None)
