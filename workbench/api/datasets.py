"""``/api/v1/datasets``: upload a file to validate or import it, list, show and delete datasets
(``workbench.services.datasets``, as ``workbench data`` does)."""
from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from storage.datasets import ColumnMapping
from workbench.api import auth, schemas
from workbench.api.bodies import Upload, upload
from workbench.api.routing import Api, actor
from workbench.services import datasets as service

UPLOAD_FIELDS = {"file": schemas.FILE, **schemas.DATA_FIELDS,
                 "validation": schemas.described(schemas.FILE, "a separate validation file (no split)")}


def _columns(form: Upload) -> ColumnMapping | None:
    names = {key: form.text(f) for key, f in (("text", "text_column"), ("label", "label_column"),
                                              ("text_pair", "text_pair_column"), ("label_separator",
                                                                                   "label_separator"))}
    return ColumnMapping(**names) if any(names.values()) else None


def add_routes(api: Api) -> None:
    wb = api.wb

    @api.route("GET", "/datasets", "read", summary="List datasets, newest first", tag="datasets")
    async def list_datasets(request: Request, task: str | None = None) -> JSONResponse:
        rows = await run_in_threadpool(service.list_datasets, wb, task)
        return JSONResponse(await run_in_threadpool(auth.with_owners, wb, "dataset", [r.to_dict() for r in rows]))

    @api.route("POST", "/datasets/validate", "create", summary="Validate an uploaded file without storing it",
               tag="datasets", body=schemas.form_body({**UPLOAD_FIELDS, "max_length": schemas.INTEGER},
                                                      ["file", "task"], "the data file and how to read it"))
    async def validate(request: Request) -> JSONResponse:
        async with upload(wb, request) as form:
            path, task = form.file("file"), form.required("task")
            validation = form.file("validation", required=False)
            report = await run_in_threadpool(
                lambda: service.validate_file(wb, path, task, format=form.text("format"), columns=_columns(form),
                                              validation_path=validation,
                                              max_length=form.number("max_length", int, 128)))
        return JSONResponse(report.to_dict())

    @api.route("POST", "/datasets", "create", summary="Upload, validate and import a data file", tag="datasets",
               status_code=201, body=schemas.form_body(
                   {**UPLOAD_FIELDS, "name": schemas.described(schemas.STRING, "display name (default: the file "
                                                                               "name)"),
                    "validation_fraction": schemas.NUMBER, "seed": schemas.INTEGER}, ["file", "task"],
                   "the data file and how to read it"))
    async def import_dataset(request: Request) -> JSONResponse:
        who = actor(request)
        async with upload(wb, request) as form:
            path, task = form.file("file"), form.required("task")
            validation = form.file("validation", required=False)
            summary = await run_in_threadpool(
                lambda: service.import_dataset(
                    wb, path, task, name=form.text("name") or path.stem, format=form.text("format"),
                    columns=_columns(form), validation_path=validation,
                    validation_fraction=form.number("validation_fraction", float, 0.1),
                    seed=form.number("seed", int, 13), owner_id=auth.owner_id(who)))
        if not summary.reused:
            await run_in_threadpool(auth.record, wb, request, who, "create", "dataset", summary.id,
                                    {"name": summary.name})
        return JSONResponse(summary.to_dict(), status_code=200 if summary.reused else 201)

    @api.route("GET", "/datasets/{dataset}", "read", summary="Show a dataset (id, id prefix or name)",
               tag="datasets")
    async def show(request: Request, dataset: str) -> JSONResponse:
        summary = await run_in_threadpool(service.get_dataset, wb, dataset)
        return JSONResponse((await run_in_threadpool(auth.with_owners, wb, "dataset", [summary.to_dict()]))[0])

    @api.route("DELETE", "/datasets/{dataset}", "change", owned="dataset", summary="Delete a dataset",
               tag="datasets")
    async def delete(request: Request, dataset: str) -> JSONResponse:
        who = actor(request)

        def work():
            summary = service.get_dataset(wb, dataset)
            auth.require_owner(wb, who, "dataset", summary.id, f"dataset {summary.id}")
            service.delete_dataset(wb, summary.id)
            auth.record(wb, request, who, "delete", "dataset", summary.id, {"name": summary.name})
            return summary

        summary = await run_in_threadpool(work)
        return JSONResponse({"deleted": summary.id, "name": summary.name})
