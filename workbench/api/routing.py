"""The REST API's routes and their rules: every route is declared with the action it needs (``access``'s
``READ``, ``CREATE``, ``CHANGE``...), which is checked before the route reads its body, and a route without a
rule cannot be declared (deny by default). Errors become JSON here, for the checks and the routes alike."""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Optional

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from storage.context import Workbench
from workbench.api import auth
from workbench.api.errors import error_response
from workbench.errors import ConfigError, WorkbenchError
from workbench.services.access import ACTIONS, Actor

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
PUBLIC = "public"  # no actor needed: only the fallback that answers 404/405 to a path the API does not have
ERRORS = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}


class ApiRoute(APIRoute):
    """An APIRoute whose dependencies and handler answer a WorkbenchError (and FastAPI's own validation of a path
    or query parameter) with the API's JSON error."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Any:
            try:
                return await handler(request)
            except WorkbenchError as exc:
                return error_response(exc)
            except RequestValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {}
                where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "path"))
                return error_response(ConfigError(f"{where or 'the request'}: {first.get('msg', 'invalid')}"))

        return answer


@dataclasses.dataclass(frozen=True)
class Rule:
    """What a route needs: ``action`` (an ``access`` action, or PUBLIC) and, for a change, the kind of thing whose
    owner it checks (``owned``)."""

    method: str
    path: str
    action: str
    owned: Optional[str] = None


class Api:
    """The router of ``/api/v1`` over one workbench, with the rule of each route."""

    def __init__(self, wb: Workbench):
        self.wb = wb
        self.router = APIRouter(prefix=PREFIX, route_class=ApiRoute)
        self.rules: dict[tuple[str, str], Rule] = {}

    def route(self, method: str, path: str, action: str, *, summary: str, owned: Optional[str] = None,
              body: Optional[dict] = None, status_code: int = 200, tag: str = "", responses: Optional[dict] = None,
              include_in_schema: bool = True) -> Callable:
        """Declare ``method path`` with its rule; the handler finds its actor in ``request.state.actor``."""
        if action not in (*ACTIONS, PUBLIC):
            raise ValueError(f"route {method} {path}: unknown action {action!r}")
        if owned and action != "change":
            raise ValueError(f"route {method} {path}: only a change checks an owner")

        def declare(handler: Callable) -> Callable:
            extra = {"requestBody": body} if body else None
            known = {401: {"description": "no session or token, or a token that does not work", "content": ERRORS},
                     403: {"description": "the role, the token's scope or ownership does not allow it",
                           "content": ERRORS}} if action != PUBLIC else {}
            known.update({404: {"description": "not found", "content": ERRORS},
                          422: {"description": "the request is invalid", "content": ERRORS}})
            known.update(responses or {})
            self.router.add_api_route(
                path, handler, methods=[method], summary=summary, status_code=status_code, tags=[tag] if tag else None,
                dependencies=[Depends(self._guard(action))], openapi_extra=extra, responses=known,
                include_in_schema=include_in_schema, description=f"Needs: {_needs(action, owned)}.")
            self.rules[(method, PREFIX + path)] = Rule(method, PREFIX + path, action, owned)
            return handler

        return declare

    def _guard(self, action: str) -> Callable:
        wb = self.wb

        async def guard(request: Request) -> None:
            # Before FastAPI reads any parameter of the route and before the route reads its body.
            request.state.actor = None if action == PUBLIC else await run_in_threadpool(auth.check, wb, request,
                                                                                          action)

        return guard

    def path_matches(self, path: str) -> list[str]:
        """The methods of the API's routes whose path pattern matches ``path``."""
        found: set[str] = set()
        for route in self.router.routes:
            if isinstance(route, APIRoute) and route.path_regex.match(path) and ("*", route.path) not in self.rules:
                found.update(route.methods or ())
        return sorted(found - {"HEAD"})


def actor(request: Request) -> Actor:
    """The actor the route's guard checked."""
    return request.state.actor


def _needs(action: str, owned: Optional[str]) -> str:
    if action == PUBLIC:
        return "nothing"
    words = {"read": "any signed-in user or token (viewer and up)",
             "create": "an editor or admin, with a write token or a session",
             "change": f"the {owned or 'thing'}'s owner (an editor) or an admin, with a write token or a session",
             "server_folder": "an admin", "administer": "an admin"}
    return words[action]


def whole_number(value: str, what: str) -> int:
    """A path or query value as a positive whole number (ConfigError, 422, otherwise)."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ConfigError(f"{what} must be a whole number, not {str(value)[:40]!r}") from None
    if number < 0:
        raise ConfigError(f"{what} must not be negative (got {number})")
    return number
