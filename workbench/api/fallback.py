"""The last route under ``/api/v1``: a JSON 404 for a path the API does not have, and a 405 naming the methods
of one it has. It never matches ``/api/v1/predict/...`` (the playgrounds' API, registered elsewhere)."""
from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.routing import Match

from workbench.api.errors import ApiError, error_response
from workbench.api.routing import PREFIX, PUBLIC, Api, ApiRoute
from workbench.errors import NotFound

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
PLAYGROUND_API = PREFIX + "/predict/"


class FallbackRoute(ApiRoute):
    def matches(self, scope: dict) -> tuple[Match, dict[str, Any]]:
        if scope.get("type") == "http" and str(scope.get("path", "")).startswith(PLAYGROUND_API):
            return Match.NONE, {}
        return super().matches(scope)


def add_fallback(api: Api) -> None:
    async def fallback(request: Request, rest: str) -> JSONResponse:
        path = request.url.path
        methods = api.path_matches(path)
        if methods:
            return error_response(ApiError(f"{request.method} is not a method of {path}; use "
                                           f"{' or '.join(methods)}", 405, {"Allow": ", ".join(methods)}))
        return error_response(NotFound(f"{path} is not a route of the REST API; GET {PREFIX}/docs lists them"))

    api.router.routes.append(FallbackRoute(PREFIX + "/{rest:path}", fallback, methods=METHODS,
                                           include_in_schema=False))
    api.rules[("*", PREFIX + "/{rest:path}")] = api.rules.get(("*", PREFIX + "/{rest:path}")) or \
        _public(PREFIX + "/{rest:path}")


def _public(path: str):
    from workbench.api.routing import Rule

    return Rule("*", path, PUBLIC)
