"""``/api/v1/runs`` and ``/api/v1/jobs``: submit a run spec (the JSON of ``workbench train --config``), list,
show, metrics and curves, cancel, delete, download the model; prediction and evaluation jobs over an uploaded
file (submit, status, download the output); compare two runs. The services are ``runs``, ``predictions``,
``exports`` and ``comparisons``, as in the CLI."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from fastapi import Request
from fastapi.responses import FileResponse, JSONResponse
from starlette.concurrency import run_in_threadpool

from workbench.api import auth, schemas
from workbench.api.bodies import json_object, upload
from workbench.api.routing import Api, actor, whole_number
from workbench.errors import ConfigError, NotFound
from workbench.services import comparisons, datasets, exports, predictions
from workbench.services import runs as service
from workbench.services.access import SERVER_FOLDER, Actor, require

MAX_LIST = 1000
PREDICT_FIELDS = {"file": schemas.FILE,
                  "output_format": schemas.described(schemas.STRING, "csv (default), jsonl or parquet"),
                  "input_format": schemas.described(schemas.STRING, "csv, tsv, jsonl, txt, conll or squad "
                                                                    "(default: detected)"),
                  "text_column": schemas.STRING, "text_pair_column": schemas.STRING,
                  "runtime": schemas.described(schemas.STRING, "pytorch (default) or an ONNX variant of the run's "
                                                               "newest export")}


def run_spec(wb, who: Actor, raw: dict[str, Any]):
    """The RunSpec of a ``train --config`` mapping, built by the CLI's own builder. Files on the server (as
    ``data.train_path``) and a model that is a server folder are an admin's; others name an uploaded dataset."""
    from workbench.commands.train import build_spec
    from workbench.services.specs import check_run_mapping

    check_run_mapping(raw)  # typos and types first, as for a --config file
    if not raw.get("task"):
        raise ConfigError('the run spec has no "task": text-classification, token-classification, '
                          'question-answering or masked-lm')
    if not raw.get("data"):
        raise ConfigError('the run spec has no "data": upload the file to /api/v1/datasets and give '
                          '{"data": {"dataset_id": "<its id>"}}')
    data = raw.get("data")
    if isinstance(data, dict) and any(data.get(key) for key in ("train_path", "validation_path", "predict_path")):
        require(who, SERVER_FOLDER, what="data.train_path and data.validation_path name files on the server; "
                                         "upload the file to /api/v1/datasets and give data.dataset_id")
    auth.require_models(who, [raw.get("model")])
    return build_spec(wb, raw, task=None, data=None, eval_data=None, model=None, epochs=None, lr=None,
                      batch_size=None, max_length=None, lora=False)


def _columns(text: Optional[str], pair: Optional[str]) -> dict[str, str]:
    return {k: v for k, v in (("text", text), ("text_pair", pair)) if v}


def _download(path: Path, media_type: str = "application/octet-stream") -> FileResponse:
    return FileResponse(path, filename=path.name, media_type=media_type)


def add_routes(api: Api) -> None:
    wb = api.wb

    @api.route("GET", "/runs", "read", summary="List runs and jobs, newest first, with filters", tag="runs")
    async def list_runs(request: Request, status: Optional[str] = None, search: Optional[str] = None,
                        kind: Optional[str] = None, sweep_id: Optional[str] = None, order_by: str = "-created_at",
                        limit: str = "100", offset: str = "0") -> JSONResponse:
        count = whole_number(limit, "limit")
        if count > MAX_LIST:
            raise ConfigError(f"limit is at most {MAX_LIST} (got {count}); page with offset")
        rows = await run_in_threadpool(
            service.list_runs, wb, status=status, search=search, order_by=order_by, limit=count,
            offset=whole_number(offset, "offset"), kind=kind,
            sweep_id=None if sweep_id is None else whole_number(sweep_id, "sweep_id"))
        return JSONResponse(await run_in_threadpool(auth.with_owners, wb, "run", rows))

    @api.route("POST", "/runs", "create", summary="Queue a training run from a run spec", tag="runs",
               status_code=201, body=schemas.json_body(schemas.RUN_SPEC, "a run spec", schemas.RUN_EXAMPLE))
    async def submit(request: Request) -> JSONResponse:
        who = actor(request)
        raw = await json_object(request, "the run spec")

        def work():
            spec = run_spec(wb, who, raw)
            run_id = service.submit_run(wb, spec, owner_id=auth.owner_id(who))
            auth.record(wb, request, who, "create", "run", run_id, {"task": spec.task, "model": spec.model})
            record = service.get_run(wb, run_id)
            return {"id": run_id, "status": record["status"], "estimate": record.get("estimate"),
                    "warning": datasets.test_set_warning(wb, spec.data.dataset_id) or None}

        return JSONResponse(await run_in_threadpool(work), status_code=201)

    @api.route("GET", "/runs/{run_id}", "read", summary="Show a run or job", tag="runs")
    async def show(request: Request, run_id: str) -> JSONResponse:
        record = await run_in_threadpool(service.get_run, wb, whole_number(run_id, "run id"))
        return JSONResponse((await run_in_threadpool(auth.with_owners, wb, "run", [record]))[0])

    @api.route("GET", "/runs/{run_id}/metrics", "read", summary="A run's final metrics and status", tag="runs")
    async def metrics(request: Request, run_id: str) -> JSONResponse:
        number = whole_number(run_id, "run id")

        def work():
            record = service.get_run(wb, number)
            warning = service.learned_warning(wb, number) if record["status"] == "succeeded" else ""
            return {"id": number, "status": record["status"], "metrics": record["metrics"],
                    "error": record["error"], "warning": warning or None}

        return JSONResponse(await run_in_threadpool(work))

    @api.route("GET", "/runs/{run_id}/curves", "read", summary="A run's logged curves (step, epoch, value)",
               tag="runs")
    async def curves(request: Request, run_id: str) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(service.run_curves, wb, whole_number(run_id, "run id")))

    @api.route("POST", "/runs/{run_id}/cancel", "change", owned="run", summary="Cancel a queued or running run "
               "or job", tag="runs")
    async def cancel(request: Request, run_id: str) -> JSONResponse:
        who, number = actor(request), whole_number(run_id, "run id")

        return JSONResponse(await run_in_threadpool(
            auth.change_owned, wb, request, who, "run", number, "cancel",
            lambda: {"id": number, "status": service.cancel_run(wb, number)}))

    @api.route("DELETE", "/runs/{run_id}", "change", owned="run", summary="Delete a finished run or job",
               tag="runs")
    async def delete(request: Request, run_id: str) -> JSONResponse:
        who, number = actor(request), whole_number(run_id, "run id")

        def delete() -> dict:
            service.delete_run(wb, number)
            return {"deleted": number}

        return JSONResponse(await run_in_threadpool(auth.change_owned, wb, request, who, "run", number, "delete",
                                                    delete))

    @api.route("GET", "/runs/{run_id}/model", "read", summary="Download a run's model as a zip", tag="runs",
               responses={200: {"description": "the zip", "content": {"application/zip": {"schema": schemas.FILE}}}})
    async def model(request: Request, run_id: str) -> FileResponse:
        who, number = actor(request), whole_number(run_id, "run id")

        def work():
            path = exports.model_zip(wb, number)
            auth.record(wb, request, who, "download", "run", number, {"file": path.name})
            return path

        return _download(await run_in_threadpool(work), "application/zip")

    @api.route("POST", "/runs/{run_id}/predictions", "create", summary="Queue a prediction of a run's model over "
               "an uploaded file", tag="jobs", status_code=201,
               body=schemas.form_body(PREDICT_FIELDS, ["file"], "the file to predict on"))
    async def predict(request: Request, run_id: str) -> JSONResponse:
        who, number = actor(request), whole_number(run_id, "run id")
        async with upload(wb, request) as form:
            path = form.file("file")
            job_id = await run_in_threadpool(lambda: predictions.submit_prediction(
                wb, number, path, input_format=form.text("input_format"),
                columns=_columns(form.text("text_column"), form.text("text_pair_column")),
                output_format=form.text("output_format", "csv"), runtime=form.text("runtime", "pytorch"),
                owner_id=auth.owner_id(who)))
        await run_in_threadpool(auth.record, wb, request, who, "create", "run", job_id,
                                {"kind": "predict", "run_id": number})
        return JSONResponse({"id": job_id, "status": "queued"}, status_code=201)

    @api.route("POST", "/runs/{run_id}/evaluations", "create", summary="Queue an evaluation of a run on a "
               "labelled test set: an uploaded file, or a stored dataset", tag="jobs", status_code=201,
               body=schemas.form_body({"file": schemas.FILE, "dataset": schemas.described(
                   schemas.STRING, "a stored dataset id or name, instead of a file"),
                   "input_format": schemas.STRING, "text_column": schemas.STRING,
                   "text_pair_column": schemas.STRING}, [], "the test set"))
    async def evaluate(request: Request, run_id: str) -> JSONResponse:
        who, number = actor(request), whole_number(run_id, "run id")
        async with upload(wb, request) as form:
            path, dataset = form.file("file", required=False), form.text("dataset")
            if (path is None) == (dataset is None):
                raise ConfigError("give the test set as a file (form field 'file') or as a stored dataset "
                                  "(form field 'dataset'), one of the two")
            newest = await run_in_threadpool(lambda: service.list_runs(wb, order_by="-id", limit=1))
            job_id = await run_in_threadpool(lambda: predictions.submit_evaluation(
                wb, number, path if path is not None else dataset, input_format=form.text("input_format"),
                columns=_columns(form.text("text_column"), form.text("text_pair_column")),
                files=path is not None, owner_id=auth.owner_id(who)))
        # The run's evaluation on the same test set, when it has one, is the answer: nothing new is queued.
        reused = bool(newest) and job_id <= newest[0]["id"]
        if not reused:
            await run_in_threadpool(auth.record, wb, request, who, "create", "run", job_id,
                                    {"kind": "evaluate", "run_id": number})
        status = (await run_in_threadpool(predictions.get_job, wb, job_id))["status"]
        return JSONResponse({"id": job_id, "status": status, "reused": reused}, status_code=200 if reused else 201)

    @api.route("GET", "/jobs", "read", summary="List prediction and evaluation jobs", tag="jobs")
    async def list_jobs(request: Request, run_id: Optional[str] = None, kind: Optional[str] = None,
                        limit: str = "200") -> JSONResponse:
        rows = await run_in_threadpool(
            predictions.list_jobs, wb, None if run_id is None else whole_number(run_id, "run_id"), kind,
            min(whole_number(limit, "limit"), MAX_LIST))
        return JSONResponse(await run_in_threadpool(auth.with_owners, wb, "run", rows))

    @api.route("GET", "/jobs/{job_id}", "read", summary="A prediction or evaluation job's status", tag="jobs")
    async def job(request: Request, job_id: str) -> JSONResponse:
        record = await run_in_threadpool(predictions.get_job, wb, whole_number(job_id, "job id"))
        return JSONResponse((await run_in_threadpool(auth.with_owners, wb, "run", [record]))[0])

    @api.route("GET", "/jobs/{job_id}/output", "read", summary="Download a finished job's output (the "
               "predictions file first; ?name= picks another)", tag="jobs",
               responses={200: {"description": "the file", "content": {"application/octet-stream": {
                   "schema": schemas.FILE}}}})
    async def output(request: Request, job_id: str, name: Optional[str] = None) -> FileResponse:
        who, number = actor(request), whole_number(job_id, "job id")

        def work():
            job = predictions.get_job(wb, number)
            files = predictions.job_outputs(wb, number)
            if not files:
                raise NotFound(f"job {number} is {job['status']} and has no output to download yet"
                               if job["status"] != "succeeded" else f"job {number} has no output files")
            chosen = files[0] if name is None else next((f for f in files if f.name == name), None)
            if chosen is None:
                raise NotFound(f"job {number} has no output {name!r}; it has {', '.join(f.name for f in files)}")
            auth.record(wb, request, who, "download", "run", number, {"file": chosen.name})
            return chosen

        return _download(await run_in_threadpool(work))

    @api.route("GET", "/compare", "read", summary="Compare run b against run a (paired bootstrap)", tag="runs")
    async def compare(request: Request, a: str, b: str, metric: Optional[str] = None) -> JSONResponse:
        return JSONResponse(await run_in_threadpool(comparisons.compare_runs, wb, whole_number(a, "a"),
                                                    whole_number(b, "b"), metric))
