"""``/api/v1/label-projects``: list, show, create a labelling project from an uploaded file, claim the next item
and label it, export the labels, train a run from them (``workbench.services.labelling``, as the Label tab and ``workbench label`` do). Labels carry the
actor's name; an item is claimed by (and labelled through) that name."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from fastapi import Request
from fastapi.responses import FileResponse, JSONResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from workbench.api import auth, schemas
from workbench.api.bodies import json_object, only_keys, upload
from workbench.api.routing import Api, actor, whole_number
from workbench.errors import ConfigError
from workbench.services import labelling as service
from workbench.services.access import Actor

CREATE_FIELDS = {"file": schemas.FILE,
                 "labels": schemas.described(schemas.STRING, "the classes, comma-separated (name:key for a key)"),
                 "name": schemas.STRING, "multi_label": schemas.BOOLEAN, "text_column": schemas.STRING,
                 "id_column": schemas.STRING, "label_column": schemas.STRING,
                 "strategy": schemas.described(schemas.STRING, "margin (default), entropy, random, ..."),
                 "random_share": schemas.NUMBER, "refit_every": schemas.INTEGER}


def _user(who: Actor) -> str:
    """Whom labels are recorded for: the user's name; "" in the single-user workbench, as the Label tab does."""
    return "" if who.local else who.name


def _claimant(who: Actor) -> str:
    return "api" if who.local else who.name


def add_routes(api: Api) -> None:
    wb = api.wb

    @api.route("GET", "/label-projects", "read", summary="List labelling projects", tag="labelling")
    async def list_projects(request: Request) -> JSONResponse:
        rows = await run_in_threadpool(service.list_projects, wb)
        return JSONResponse(await run_in_threadpool(auth.with_owners, wb, "label_project", rows))

    @api.route("GET", "/label-projects/{project_id}", "read", summary="A labelling project's progress",
               tag="labelling")
    async def show(request: Request, project_id: str) -> JSONResponse:
        number = whole_number(project_id, "project id")
        status = await run_in_threadpool(service.project_status, wb, number)
        project = await run_in_threadpool(service.get_project, wb, number)
        project = (await run_in_threadpool(auth.with_owners, wb, "label_project", [project]))[0]
        return JSONResponse({"project": project, "status": status})

    @api.route("POST", "/label-projects", "create", summary="Create a labelling project from an uploaded file",
               tag="labelling", status_code=201,
               body=schemas.form_body(CREATE_FIELDS, ["file", "labels"], "the texts and the label set"))
    async def create(request: Request) -> JSONResponse:
        who = actor(request)
        async with upload(wb, request) as form:
            path = form.file("file")
            project = await run_in_threadpool(lambda: service.create_project(
                wb, path, form.required("labels"), name=form.text("name") or path.stem,
                multi_label=form.flag("multi_label"), user=_user(who), text_column=form.text("text_column"),
                id_column=form.text("id_column"), label_column=form.text("label_column"),
                strategy=form.text("strategy", "margin"), random_share=form.number("random_share", float, 0.1),
                refit_every=form.number("refit_every", int, 10), owner_id=auth.owner_id(who)))
        await run_in_threadpool(auth.record, wb, request, who, "create", "label_project", project["id"],
                                {"name": project.get("name")})
        return JSONResponse(project, status_code=201)

    @api.route("POST", "/label-projects/{project_id}/next", "create", summary="Claim the next item to label "
               "(null when none is left)", tag="labelling")
    async def next_item(request: Request, project_id: str) -> JSONResponse:
        who, number = actor(request), whole_number(project_id, "project id")
        item = await run_in_threadpool(lambda: service.next_item(wb, number, _user(who), claimant=_claimant(who)))
        return JSONResponse({"item": item})

    @api.route("POST", "/label-projects/{project_id}/items/{item_id}/label", "create", summary="Label an item "
               "(claimed with next)", tag="labelling", body=schemas.json_body(schemas.LABEL_REQUEST, "the label",
                                                                              {"label": "positive"}))
    async def label(request: Request, project_id: str, item_id: str) -> JSONResponse:
        who = actor(request)
        number, item = whole_number(project_id, "project id"), whole_number(item_id, "item id")
        body = await json_object(request)
        only_keys(body, ("label",))
        result = await run_in_threadpool(lambda: service.give_label(wb, number, item, body.get("label"), _user(who),
                                                                    claimant=_claimant(who)))
        return JSONResponse(result)

    @api.route("GET", "/label-projects/{project_id}/export", "read", summary="Download every item with its label "
               "(?format=csv or jsonl)", tag="labelling",
               responses={200: {"description": "the file", "content": {"text/csv": {"schema": schemas.FILE}}}})
    async def export(request: Request, project_id: str, format: str = "csv") -> FileResponse:
        who, number = actor(request), whole_number(project_id, "project id")
        if format not in service.EXPORT_FORMATS:
            raise ConfigError(f"unknown export format {format!r}; choose {' or '.join(service.EXPORT_FORMATS)}")
        folder = Path(tempfile.mkdtemp(prefix=".api-export-", dir=wb.settings.home))

        def work() -> Path:
            path = service.export_labels(wb, number, folder / f"project-{number}-labels.{format}", format)
            auth.record(wb, request, who, "export", "label_project", number, {"format": format})
            return path

        try:
            path = await run_in_threadpool(work)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return FileResponse(path, filename=path.name, media_type="text/csv" if format == "csv" else
                            "application/x-ndjson", background=BackgroundTask(shutil.rmtree, folder, True))

    @api.route("POST", "/label-projects/{project_id}/train", "create", summary="Train a run on the labels given "
               "so far (stored as a dataset version)", tag="labelling", status_code=201)
    async def train(request: Request, project_id: str) -> JSONResponse:
        who, number = actor(request), whole_number(project_id, "project id")

        def work() -> int:
            run_id = service.train_from_labels(wb, number, _user(who), owner_id=auth.owner_id(who))
            auth.record(wb, request, who, "create", "run", run_id, {"label_project": number})
            return run_id

        return JSONResponse({"id": await run_in_threadpool(work), "status": "queued"}, status_code=201)
