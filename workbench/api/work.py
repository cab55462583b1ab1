"""``/api/v1/sweeps`` and ``/api/v1/audits``: create (a sweep from the JSON of ``workbench sweep --config``, an
audit from its settings), list, show and cancel (``workbench.services.sweeps`` and ``audits``)."""
from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from workbench.api import auth, schemas
from workbench.api.bodies import json_object, only_keys
from workbench.api.routing import Api, actor, whole_number
from workbench.errors import ConfigError
from workbench.services import audits, sweeps
from workbench.services.access import SERVER_FOLDER, Actor, require

AUDIT_KEYS = ("dataset", "folds", "model", "preset", "seed", "method", "lora", "name", "train")


def sweep_spec(wb, who: Actor, raw: dict[str, Any]):
    """The SweepSpec of a ``sweep --config`` mapping, built by the CLI's own builder (the same rules as a run
    spec for files and folders on the server, for the base and every model the space searches)."""
    from workbench.commands.sweep import build_sweep_spec
    from workbench.services.specs import check_sweep_mapping

    check_sweep_mapping(raw)  # typos and types first, as for a --config file
    if not isinstance(raw.get("base"), dict) or not raw["base"].get("data"):
        raise ConfigError('the sweep spec has no "base" with "data": upload the file to /api/v1/datasets and give '
                          '{"base": {"task": ..., "data": {"dataset_id": "<its id>"}}}')
    base = raw.get("base") if isinstance(raw.get("base"), dict) else {}
    data = base.get("data")
    if isinstance(data, dict) and any(data.get(key) for key in ("train_path", "validation_path", "predict_path")):
        require(who, SERVER_FOLDER, what="base.data.train_path names a file on the server; upload the file to "
                                         "/api/v1/datasets and give base.data.dataset_id")
    space = raw.get("space") if isinstance(raw.get("space"), dict) else {}
    searched = space.get("model")
    models = list(searched.get("choices") or []) if isinstance(searched, dict) else \
        list(searched) if isinstance(searched, list) else [searched]
    auth.require_models(who, [base.get("model"), *models])
    return build_sweep_spec(wb, raw, task=None, data=None, eval_data=None, model=None, lora=False, params=[],
                            trials=None, parallel=None, pruner=None, metric=None, direction=None, name=None,
                            seed=None)


def add_routes(api: Api) -> None:
    wb = api.wb

    @api.route("GET", "/sweeps", "read", summary="List sweeps, newest first", tag="sweeps")
    async def list_sweeps(request: Request) -> JSONResponse:
        rows = await run_in_threadpool(sweeps.list_sweeps, wb)
        return JSONResponse(await run_in_threadpool(auth.with_owners, wb, "sweep", rows))

    @api.route("POST", "/sweeps", "create", summary="Start a sweep from a sweep spec", tag="sweeps",
               status_code=201, body=schemas.json_body(schemas.SWEEP_SPEC, "a sweep spec"))
    async def create_sweep(request: Request) -> JSONResponse:
        who = actor(request)
        raw = await json_object(request, "the sweep spec")

        def work():
            spec = sweep_spec(wb, who, raw)
            sweep_id = sweeps.create_sweep(wb, spec, owner_id=auth.owner_id(who))
            auth.record(wb, request, who, "create", "sweep", sweep_id, {"trials": spec.n_trials})
            return sweeps.get_sweep(wb, sweep_id)

        return JSONResponse(await run_in_threadpool(work), status_code=201)

    @api.route("GET", "/sweeps/{sweep_id}", "read", summary="Show a sweep: state, best trial, every trial",
               tag="sweeps")
    async def show_sweep(request: Request, sweep_id: str) -> JSONResponse:
        record = await run_in_threadpool(sweeps.get_sweep, wb, whole_number(sweep_id, "sweep id"))
        return JSONResponse((await run_in_threadpool(auth.with_owners, wb, "sweep", [record]))[0])

    @api.route("POST", "/sweeps/{sweep_id}/cancel", "change", owned="sweep", summary="Cancel a sweep",
               tag="sweeps")
    async def cancel_sweep(request: Request, sweep_id: str) -> JSONResponse:
        who, number = actor(request), whole_number(sweep_id, "sweep id")

        return JSONResponse(await run_in_threadpool(
            auth.change_owned, wb, request, who, "sweep", number, "cancel",
            lambda: {"id": number, "status": sweeps.cancel_sweep(wb, number)}))

    @api.route("GET", "/audits", "read", summary="List audits, newest first", tag="audits")
    async def list_audits(request: Request, dataset: str | None = None) -> JSONResponse:
        rows = await run_in_threadpool(audits.list_audits, wb, dataset)
        return JSONResponse(await run_in_threadpool(auth.with_owners, wb, "audit", rows))

    @api.route("POST", "/audits", "create", summary="Audit a dataset's labels (k fold runs)", tag="audits",
               status_code=201, body=schemas.json_body(schemas.AUDIT_REQUEST, "what to audit and how",
                                                       {"dataset": "reviews", "folds": 5}))
    async def create_audit(request: Request) -> JSONResponse:
        who = actor(request)
        body = await json_object(request)
        only_keys(body, AUDIT_KEYS)
        if not isinstance(body.get("dataset"), str) or not body["dataset"].strip():
            raise ConfigError('"dataset" is missing: name the dataset to audit (its id, id prefix or name)')
        if "train" in body and not isinstance(body["train"], dict):
            raise ConfigError('"train" is a mapping of hyper-parameters, e.g. {"epochs": 2}')

        def work():
            if "model" in body:
                auth.require_models(who, [body["model"]])
            options = {k: v for k, v in body.items() if k != "dataset"}
            audit_id = audits.create_audit(wb, body["dataset"].strip(), owner_id=auth.owner_id(who), **options)
            auth.record(wb, request, who, "create", "audit", audit_id)
            return audits.get_audit(wb, audit_id)

        return JSONResponse(await run_in_threadpool(work), status_code=201)

    @api.route("GET", "/audits/{audit_id}", "read", summary="Show an audit: state, folds, ranking", tag="audits")
    async def show_audit(request: Request, audit_id: str) -> JSONResponse:
        record = await run_in_threadpool(audits.get_audit, wb, whole_number(audit_id, "audit id"))
        return JSONResponse((await run_in_threadpool(auth.with_owners, wb, "audit", [record]))[0])

    @api.route("POST", "/audits/{audit_id}/cancel", "change", owned="audit", summary="Cancel an audit's folds",
               tag="audits")
    async def cancel_audit(request: Request, audit_id: str) -> JSONResponse:
        who, number = actor(request), whole_number(audit_id, "audit id")

        return JSONResponse(await run_in_threadpool(auth.change_owned, wb, request, who, "audit", number, "cancel",
                                                    lambda: audits.cancel_audit(wb, number)))
