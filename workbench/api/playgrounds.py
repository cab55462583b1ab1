"""``/api/v1/playgrounds``: list, publish a succeeded run, unpublish (``workbench.playground.service``, as
``workbench publish`` does). Predicting through a playground stays ``POST /api/v1/predict/<slug>``
(``workbench.playground.api``), which this API never shadows."""
from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from workbench.api import auth, schemas
from workbench.api.bodies import json_object, only_keys
from workbench.api.routing import Api, actor
from workbench.errors import ConfigError
from workbench.playground import service
from workbench.services import runs as runs_service

PUBLISH_KEYS = ("run_id", "token", "generate_token", "runtime")


def add_routes(api: Api) -> None:
    wb = api.wb

    @api.route("GET", "/playgrounds", "read", summary="List published playgrounds (?all=true: unpublished too)",
               tag="playgrounds")
    async def list_playgrounds(request: Request, all: str = "false") -> JSONResponse:
        rows = await run_in_threadpool(service.list_playgrounds, wb, all.lower() in ("true", "1", "yes"))
        return JSONResponse(await run_in_threadpool(auth.with_owners, wb, "playground", [r.to_dict() for r in rows],
                                                    "slug"))

    @api.route("POST", "/playgrounds", "create", summary="Publish a succeeded run as a playground", tag="playgrounds",
               status_code=201, body=schemas.json_body(schemas.PUBLISH_REQUEST, "the run to publish",
                                                       {"run_id": 7, "generate_token": True}))
    async def publish(request: Request) -> JSONResponse:
        who = actor(request)
        body = await json_object(request)
        only_keys(body, PUBLISH_KEYS)
        run_id = body.get("run_id")
        if not isinstance(run_id, int) or isinstance(run_id, bool):
            raise ConfigError('"run_id" is missing or not a whole number: name the succeeded run to publish')
        token = body.get("token")
        if token is not None and not isinstance(token, str):
            raise ConfigError('"token" is a string of 8 or more characters')
        if token and body.get("generate_token"):
            raise ConfigError('give "token" or "generate_token", not both')
        runtime = body.get("runtime") or "pytorch"
        if not isinstance(runtime, str):
            raise ConfigError('"runtime" is pytorch, onnx-fp32, onnx-int8 or onnx-fp16')

        def work():
            info = service.publish(wb, run_id, token=service.new_token() if body.get("generate_token") else token,
                                   runtime=runtime, owner_id=auth.owner_id(who))
            auth.record(wb, request, who, "publish", "playground", info.slug, {"run_id": run_id})
            payload = info.to_dict()
            payload["warning"] = runs_service.learned_warning(wb, run_id) or None
            return payload

        return JSONResponse(await run_in_threadpool(work), status_code=201)

    @api.route("DELETE", "/playgrounds/{slug}", "change", owned="playground", summary="Unpublish a playground",
               tag="playgrounds")
    async def unpublish(request: Request, slug: str) -> JSONResponse:
        who = actor(request)

        return JSONResponse(await run_in_threadpool(auth.change_owned, wb, request, who, "playground", slug,
                                                    "unpublish", lambda: service.unpublish(wb, slug).to_dict()))
