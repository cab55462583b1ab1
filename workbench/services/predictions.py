"""Putting a trained run's model to work: prediction jobs over whole files, and evaluations on test sets.

Both are runs of another kind (``storage.models.KIND_PREDICT`` / ``KIND_EVALUATE``) on the same queue as
training, so a worker claims, leases, cancels and resumes them the same way (``jobs.process.run_job`` executes
them through ``jobs.predict``). This module checks what a user asks for before anything is queued, and
gives the views the UI and the CLI share: a run's jobs, their downloads, the test sets and the runs
evaluated on each. Plain dicts out, ``workbench.errors`` raised; no gradio here.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Optional, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import aliased

from jobs.queue import table as queue
from jobs.export.runtime import PYTORCH, VARIANT_FILES, check_runtime, latest_onnx_dir, variant_path
from jobs.predict.evaluate import check_classification_labels
from jobs.predict.infer import run_reads_pairs
from jobs.predict.spec import PredictSpec
from jobs.process.run_job import model_labels as run_model_labels
from storage.context import Workbench
from storage.datasets.lookup import dataset_files, find_dataset
from storage.datasets.pipeline import read_records
from jobs.queue.states import ACTIVE
from storage.models import (FAILED, KIND_EVALUATE, KIND_PREDICT, KIND_TRAIN, PRUNED, QUEUED, SUCCEEDED, Artifact,
                            Dataset, Run, utcnow)
from workbench.errors import ConfigError, InvalidState, NotFound, WorkbenchError
from workbench.services import datasets as datasets_service
from workbench.services.prediction_inputs import check_input, column_mapping, keep_input

log = logging.getLogger(__name__)

JOB_KINDS = (KIND_PREDICT, KIND_EVALUATE)
# The order a job's downloads are listed in: the predictions first, then the scores.
_OUTPUT_ORDER = {"predictions": 0, "metrics": 1, "tables": 2}


def inputs_dir(wb: Workbench) -> Path:
    """Where the files given to prediction jobs are kept (``<home>/predictions/inputs/<sha>/<name>``)."""
    return wb.settings.home / "predictions" / "inputs"


def forget_input(wb: Workbench, path: Path) -> bool:
    """Remove a kept input file (``inputs_dir``) once no prediction job names it; True when it was removed.

    Called when a prediction job is deleted: the same bytes are kept once for every job given them
    (``keep_input``), so the file goes with the last job that reads it, and its folder when empty."""
    root = inputs_dir(wb).resolve()
    try:
        resolved = path.resolve()
    except OSError:
        return False
    if resolved.parent.parent != root or not resolved.is_file():
        return False  # only files this module kept, never a path a spec could name elsewhere
    with wb.db.session() as session:
        specs = session.execute(select(Run.spec).where(Run.kind == KIND_PREDICT)).scalars()
        if any((spec or {}).get("input_path") and Path(spec["input_path"]).resolve() == resolved for spec in specs):
            return False
    resolved.unlink(missing_ok=True)
    try:
        resolved.parent.rmdir()
    except OSError:
        pass  # another kept name of the same bytes is still there
    log.info("removed the kept input %s: no prediction job reads it any more", resolved)
    return True


class Wording(NamedTuple):
    """How the refusals of ``model_run`` say what the caller wanted of the model (predictions by default)."""

    act: str = "predict"  # "... predict once it has succeeded"
    use: str = "to predict with"  # "only a succeeded run has a model to predict with"
    instead: str = "pick another run"
    redirect: str = "use"  # "use the run whose model it used"
    again: str = ""  # after "train it again"


def not_ready(run_id: int, status: str, words: Wording = Wording()) -> str:
    """Why a run in ``status`` has no model to put to work yet and what to do ("" once it has succeeded)."""
    if status == SUCCEEDED:
        return ""
    if status == QUEUED:
        return f"run {run_id} has not started training yet (it is queued); {words.act} once it has succeeded"
    if status in ACTIVE:
        return f"run {run_id} is still training; {words.act} once it has succeeded"
    if status == PRUNED:
        return f"run {run_id} was stopped early by its sweep and saved no model; {words.instead}"
    verb = "failed" if status == FAILED else f"was {status}"
    return f"run {run_id} {verb}; only a succeeded run has a model {words.use} (retry it, or {words.instead})"


def model_run(session, run_id: int, words: Wording = Wording()) -> Run:
    """The run whose model a new job will use: it exists, is a training run, succeeded and kept its model
    (``words``: how the refusals name the job; exports say it their way)."""
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist (it may have been deleted); `workbench runs list` shows "
                       "the runs there are")
    if run.kind != KIND_TRAIN:
        used = f"; {words.redirect} the run whose model it used (run {run.parent_run_id})" if run.parent_run_id else ""
        article = "an" if run.kind[:1] in "aeiou" else "a"
        raise InvalidState(f"run {run_id} is {article} {run.kind} job, not a training run{used}")
    problem = not_ready(run_id, run.status, words)
    if problem:
        raise InvalidState(problem)
    model_dir = Path(run.output_dir or "") / "model"
    if not run.output_dir or not model_dir.is_dir():
        raise InvalidState(f"run {run_id} has no saved model ({model_dir} is missing); train it again{words.again}")
    return run


def served_runtimes(wb: Workbench, run_id: int) -> list[str]:
    """``pytorch`` and every ONNX variant the run's newest succeeded export holds and did not fail: what a
    playground or a prediction job of the run can be served by."""
    return [value for _, value in runtime_options(wb, run_id)]


def runtime_options(wb: Workbench, run_id: int) -> list[tuple[str, str]]:
    """``served_runtimes`` as (label, runtime) pairs for a menu: a variant its export marked "check before use"
    (its metric more than a point below PyTorch's) says so in its label."""
    onnx_dir = latest_onnx_dir(wb.db, run_id)
    statuses = _variant_statuses(onnx_dir) if onnx_dir is not None else {}
    options = [(PYTORCH, PYTORCH)]
    for name in VARIANT_FILES:
        status = statuses.get(name)
        if onnx_dir is None or status == "failed" or not variant_path(onnx_dir, name).is_file():
            continue
        options.append((f"{name} (check before use)" if status == "check before use" else name, name))
    return options


def safe_runtime(wb: Workbench, run_id: int) -> str:
    """The runtime a menu offers first to serve run ``run_id`` by: the last ONNX variant of its newest export that
    passed its checks (``ok``), else ``pytorch`` — never one marked "check before use"."""
    onnx_dir = latest_onnx_dir(wb.db, run_id)
    statuses = _variant_statuses(onnx_dir) if onnx_dir is not None else {}
    passed = [value for _, value in runtime_options(wb, run_id) if statuses.get(value) == "ok"]
    return passed[-1] if passed else PYTORCH


def _variant_statuses(onnx_dir: Path) -> dict[str, str]:
    """Each variant's status in the export's report (``export.json`` beside ``onnx/``): a variant marked failed
    must not serve, even if its file is left."""
    try:
        report = json.loads((onnx_dir.parent / "export.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    variants = report.get("variants") if isinstance(report, dict) else None
    return {v.get("name"): v.get("status") for v in variants or () if isinstance(v, dict)}


def runtime_dir(wb: Workbench, run_id: int, runtime: Optional[str]) -> Optional[Path]:
    """The export folder (``onnx/``) that serves ``runtime`` for run ``run_id``: None for ``pytorch``; a
    ConfigError for an unknown runtime, InvalidState when the run has no succeeded export with that variant."""
    runtime = check_runtime(runtime)
    if runtime == PYTORCH:
        return None
    onnx_dir = latest_onnx_dir(wb.db, run_id)
    if onnx_dir is None:
        raise InvalidState(f"run {run_id} has no ONNX export to serve {runtime} from: export it first "
                           f"(`workbench export {run_id}`, or Export in the run's view), or use pytorch")
    if runtime not in served_runtimes(wb, run_id):
        raise InvalidState(f"run {run_id}'s newest export has no usable {runtime} variant "
                           f"({variant_path(onnx_dir, runtime).name} missing or failed its check): export it "
                           "again with that variant (int8 for onnx-int8, fp16 on a GPU), or pick another runtime")
    return onnx_dir


def model_run_checked(wb: Workbench, run_id: int) -> str:
    """The task of run ``run_id`` once it can put its model to work (``model_run``'s refusals otherwise)."""
    with wb.db.session() as session:
        return model_run(session, run_id).task


def submit_prediction(wb: Workbench, run_id: int, input_path: str | Path, *, input_name: Optional[str] = None,
                      input_format: Optional[str] = None, columns: Optional[Mapping[str, Any]] = None,
                      output_format: str = "csv", priority: int = 0, runtime: str = PYTORCH,
                      owner_id: Optional[int] = None) -> int:
    """Queue a prediction of run ``run_id``'s model over a whole file; returns the job's id.

    The file is checked first (readable, not empty, the columns the task needs are there) and kept under
    the workbench home, so the job reads the same bytes whatever happens to the user's file meanwhile.
    ``runtime``: ``pytorch`` or an ONNX variant of the run's newest export (refused when it has none)."""
    with wb.db.session() as session:
        run = model_run(session, run_id)
        task, model = run.task, run.model
        pairs = run_reads_pairs(Path(run.output_dir) / "model") if task == "text-classification" else None
    runtime = check_runtime(runtime)
    runtime_dir(wb, run_id, runtime)
    source = _existing_file(input_path)
    name = Path(input_name or source.name).name
    # The spec checks the formats before the file is read.
    spec = PredictSpec(kind=KIND_PREDICT, run_id=run_id, input_path=str(source), input_name=name,
                       input_format=input_format, columns=dict(columns or {}), output_format=output_format,
                       name=f"predict {name}" + ("" if runtime == PYTORCH else f" ({runtime})"), pairs=pairs,
                       runtime=runtime)
    checked = check_input(source, task, name=name, input_format=input_format, columns=columns,
                          max_bytes=wb.settings.max_upload_mb * 10**6, pairs=pairs)
    kept = keep_input(inputs_dir(wb), source, name, checked.sha256)
    named = column_mapping(columns)
    spec = dataclasses.replace(spec, input_path=str(kept), input_format=checked.format,
                               columns=named.to_dict() if named else {}, reads=checked.mapping)
    job_id = queue.submit_job(wb.db, KIND_PREDICT, spec.to_dict(), wb.settings.runs_dir, parent_run_id=run_id,
                              task=task, model=model, name=spec.name, priority=priority, owner_id=owner_id)
    log.info("queued prediction job %s: run %s over %s%s", job_id, run_id, name,
             f" ({reads_text(checked.mapping)})" if checked.mapping else "")
    return job_id


def reads_text(mapping: Mapping[str, str]) -> str:
    """Which columns a prediction reads, in words: ``text from the column 'review'``."""
    return ", ".join(f"{role.replace('_', ' ')} from the column {column!r}" for role, column in mapping.items())


def submit_dataset_prediction(wb: Workbench, run_id: int, dataset: str, *, output_format: str = "csv",
                              priority: int = 0, runtime: str = PYTORCH) -> int:
    """Queue a prediction of run ``run_id``'s model over a stored dataset (an id, id prefix or name): its
    normalized records, training split then validation split, read as a JSON Lines file whose keys the
    run's task reads (the labels are carried to the output like any other column, beside the predictions).

    The records are joined into one file under the kept inputs and handed to ``submit_prediction``, so the
    job is an ordinary prediction job: the same checks, copy, resume and downloads."""
    task = model_run_checked(wb, run_id)
    runtime_dir(wb, run_id, runtime)  # refused before the records are copied
    summary = _of_task(datasets_service.get_dataset(wb, dataset), task, f"predict over a {task} dataset or a file")
    train, validation = dataset_files(wb.db, summary.id)
    name = f"{Path(summary.name).stem or 'dataset'}-{summary.id[:8]}.jsonl"
    folder = inputs_dir(wb)
    folder.mkdir(parents=True, exist_ok=True)
    joined = folder / f".{uuid.uuid4().hex}.jsonl"
    try:
        with joined.open("wb") as out:
            for path in (train, validation):
                if path is not None and path.stat().st_size:
                    with path.open("rb") as source:
                        shutil.copyfileobj(source, out)
                        source.seek(-1, 2)
                        if source.read(1) != b"\n":
                            out.write(b"\n")  # the next split's first record starts a line of its own
        return submit_prediction(wb, run_id, joined, input_name=name, input_format="jsonl",
                                 output_format=output_format, priority=priority, runtime=runtime)
    finally:
        joined.unlink(missing_ok=True)  # the job reads the kept copy


def _existing_file(path: str | Path) -> Path:
    path = Path(path).expanduser()
    if not path.exists():
        raise NotFound(f"no such file: {path}")
    if not path.is_file():
        raise ConfigError(f"{path} is not a file; give the path of one file to predict on")
    return path


def resolve_test_set(wb: Workbench, data: str | Path, task: str, *, input_format: Optional[str] = None,
                     columns: Optional[Mapping[str, Any]] = None,
                     files: bool = True) -> datasets_service.DatasetSummary:
    """The stored dataset ``data`` names, or the file it names imported whole as one (the same file is the
    same dataset, by content hash, so runs evaluated on it compare). Refused when it is for another task.

    ``files=False`` takes stored datasets only: a web client's dataset pick must never make the server read
    a path of its choosing (an uploaded file reaches this module as a path the UI received, not as a pick)."""
    return _test_set(wb, data, task, input_format=input_format, columns=columns, files=files)[0]


def _test_set(wb: Workbench, data: str | Path, task: str, *, input_format: Optional[str] = None,
              columns: Optional[Mapping[str, Any]] = None,
              files: bool = True, owner_id: Optional[int] = None) -> tuple[datasets_service.DatasetSummary, bool]:
    """``resolve_test_set``, and whether this call stored it (a file seen for the first time): such a dataset
    is removed again when the evaluation is refused, so a refusal leaves nothing behind."""
    path = Path(str(data)).expanduser()
    if files and path.is_file():
        # scored as given: a test file's repeated rows are kept (a training import drops them)
        dataset = datasets_service.import_dataset(wb, path, task, format=input_format,
                                                  columns=column_mapping(columns), validation_fraction=0.0,
                                                  keep_duplicates=True, owner_id=owner_id)
        created = not dataset.reused
    else:
        dataset, created = datasets_service.get_dataset(wb, str(data)), False
    try:
        return _of_task(dataset, task, f"evaluate it on a {task} test set"), created
    except ConfigError:
        _forget_test_set(wb, dataset, created)
        raise


def _forget_test_set(wb: Workbench, dataset: datasets_service.DatasetSummary, created: bool) -> None:
    """Remove a dataset stored for an evaluation that was then refused (one that was there before stays)."""
    if created:
        datasets_service.delete_dataset(wb, dataset.id)
        log.info("removed dataset %s again: the evaluation it was stored for was refused", dataset.id)


def check_test_set(wb: Workbench, run_id: int, dataset: datasets_service.DatasetSummary) -> None:
    """Refuse, before anything is queued, a test set that run ``run_id``'s model cannot be scored on: a text
    classifier's test set with a label the model was never trained on (or label lists for a single-label
    model). The job would fail on the worker; here the refusal names the user's file and line."""
    if dataset.task != "text-classification":
        return  # a tag the model never saw counts as wrong (jobs.predict.evaluate); QA and MLM have no labels
    with wb.db.session() as session:
        model_dir = Path(model_run(session, run_id).output_dir) / "model"
    known = run_model_labels(model_dir)
    if not known:
        return  # a model without label names is refused by the job itself, with its own sentence
    multi = _json_object(model_dir / "config.json").get("problem_type") == "multi_label_classification"
    if set(dataset.labels or {}) <= set(known) and (multi or not _has_label_lists(wb, dataset)):
        return
    sources = datasets_service.kept_sources(dataset)
    options = datasets_service.read_options(dataset)
    records, origins = [], []
    for path, shown in sources:
        for line, record in read_records(path, options):
            records.append(record)
            origins.append((shown, line))
    if not sources:  # the kept upload is gone: the stored records, by their place in the dataset
        for path in [p for p in datasets_service.dataset_files(wb, dataset.id) if p is not None]:
            for line, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                records.append(json.loads(raw))
                origins.append((f"dataset {dataset.name}", line))
    check_classification_labels(records, origins, known, multi)


def _has_label_lists(wb: Workbench, dataset: datasets_service.DatasetSummary) -> bool:
    """Whether the dataset's records carry lists of labels (multi-label): its first stored record says."""
    train, _ = dataset_files(wb.db, dataset.id)
    with train.open(encoding="utf-8") as handle:
        first = handle.readline()
    return bool(first.strip()) and isinstance(json.loads(first).get("label"), list)


def _json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _of_task(dataset: datasets_service.DatasetSummary, task: str, instead: str) -> datasets_service.DatasetSummary:
    """``dataset``, refused with what to do ``instead`` when it holds another task's examples than the run's."""
    if dataset.task != task:
        raise ConfigError(f"dataset {dataset.id} ({dataset.name}) is a {dataset.task} dataset; the run is a "
                          f"{task} run — {instead}")
    return dataset


def submit_evaluation(wb: Workbench, run_id: int, data: str | Path, *, input_format: Optional[str] = None,
                      columns: Optional[Mapping[str, Any]] = None, priority: int = 0, files: bool = True,
                      owner_id: Optional[int] = None) -> int:
    """Queue an evaluation of run ``run_id`` on a labelled test set (a stored dataset id or name, or — unless
    ``files`` is False — a file to import as one); returns the job's id. A run already evaluated on the same
    test set gets that evaluation's id back (``existing_evaluation``), nothing new queued; the dataset the
    run trained on is refused (``check_not_trained_on``)."""
    task = model_run_checked(wb, run_id)
    dataset, created = _test_set(wb, data, task, input_format=input_format, columns=columns, files=files,
                                 owner_id=owner_id)
    try:
        check_not_trained_on(wb, run_id, dataset)
        check_test_set(wb, run_id, dataset)
    except WorkbenchError:
        _forget_test_set(wb, dataset, created)
        raise
    return _queue_evaluation(wb, run_id, dataset, priority, owner_id)


def check_not_trained_on(wb: Workbench, run_id: int, dataset: datasets_service.DatasetSummary) -> None:
    """Refuse to score run ``run_id`` on the dataset it trained on: its examples were seen in training (and
    its validation split already scored the run), so a "test" score there says nothing about new data."""
    with wb.db.session() as session:
        trained_on = session.scalar(select(Run.dataset_id).where(Run.id == run_id))
    if trained_on == dataset.id:
        raise ConfigError(f"dataset {dataset.id} ({dataset.name}) is the dataset run {run_id} trained on: its "
                          "examples were seen in training, so it is no test set for that run — pick a test set "
                          "the run never trained on")


def existing_evaluation(wb: Workbench, run_id: int, dataset_id: str) -> Optional[int]:
    """The newest evaluation of run ``run_id`` on the test set ``dataset_id`` that succeeded or is still under way:
    the same model on the same bytes (a dataset's id is its content's digest) scores the same, so it is reused
    rather than queued again. A failed or cancelled one is not reused."""
    with wb.db.session() as session:
        return session.scalar(select(Run.id).where(
            Run.kind == KIND_EVALUATE, Run.parent_run_id == run_id, Run.dataset_id == dataset_id,
            Run.status.in_((SUCCEEDED, QUEUED, *ACTIVE))).order_by(Run.id.desc()).limit(1))


def _queue_evaluation(wb: Workbench, run_id: int, dataset: datasets_service.DatasetSummary, priority: int,
                      owner_id: Optional[int] = None) -> int:
    with wb.db.session() as session:
        run = model_run(session, run_id)
        task, model = run.task, run.model
    if dataset.task != task:
        raise ConfigError(f"dataset {dataset.id} ({dataset.name}) is a {dataset.task} dataset; run {run_id} is a "
                          f"{task} run — evaluate it on a {task} test set")
    datasets_service.mark_test_set(wb, dataset.id)
    reused = existing_evaluation(wb, run_id, dataset.id)
    if reused is not None:
        log.info("run %s was already evaluated on dataset %s (job %s): reused, nothing queued", run_id, dataset.id,
                 reused)
        return reused
    spec = PredictSpec(kind=KIND_EVALUATE, run_id=run_id, dataset_id=dataset.id, name=f"evaluate on {dataset.name}")
    job_id = queue.submit_job(wb.db, KIND_EVALUATE, spec.to_dict(), wb.settings.runs_dir, parent_run_id=run_id,
                              task=task, model=model, name=spec.name, dataset_id=dataset.id, priority=priority,
                              owner_id=owner_id)
    log.info("queued evaluation job %s: run %s on dataset %s", job_id, run_id, dataset.id)
    return job_id


def evaluate_runs(wb: Workbench, run_ids: Sequence[int], data: str | Path, *, priority: int = 0,
                  files: bool = True, owner_id: Optional[int] = None) -> list[int]:
    """One evaluation job per run on one test set (``files=False``: a stored dataset only, see
    ``resolve_test_set``). Every run is checked before any job is queued, so a wrong pick queues nothing;
    a run already evaluated there keeps its evaluation (its id is in the list, nothing is queued for it)."""
    ids = list(dict.fromkeys(int(r) for r in run_ids))
    if not ids:
        raise ConfigError("pick at least one run to evaluate")
    with wb.db.session() as session:
        tasks = {model_run(session, run_id).task for run_id in ids}
    if len(tasks) > 1:
        raise ConfigError(f"the runs are of different tasks ({', '.join(sorted(tasks))}); one test set fits one task")
    dataset, created = _test_set(wb, data, tasks.pop(), files=files, owner_id=owner_id)
    try:
        for run_id in ids:
            check_not_trained_on(wb, run_id, dataset)
            check_test_set(wb, run_id, dataset)
    except WorkbenchError:
        _forget_test_set(wb, dataset, created)
        raise
    return [_queue_evaluation(wb, run_id, dataset, priority, owner_id) for run_id in ids]


def _iso(value: Optional[dt.datetime]) -> Optional[str]:
    return value.isoformat(timespec="seconds") + "Z" if value else None


def _rows_per_second(run: Run) -> Optional[float]:
    """Rows done over the seconds since the job started (until it finished)."""
    if not run.started_at or not run.step:
        return None
    seconds = ((run.finished_at or utcnow()) - run.started_at).total_seconds()
    return round(run.step / seconds, 2) if seconds > 0 else None


def _outputs(artifacts: Iterable[Artifact]) -> list[Path]:
    found = sorted(((_OUTPUT_ORDER.get(a.kind, 9), a.path) for a in artifacts if a.kind in _OUTPUT_ORDER))
    return [Path(path) for _, path in found if Path(path).is_file()]


def _job_dict(run: Run, artifacts: Iterable[Artifact]) -> dict[str, Any]:
    spec = run.spec or {}
    return {"id": run.id, "kind": run.kind, "status": run.status, "name": run.name,
            "created_at": _iso(run.created_at), "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at), "parent_run_id": run.parent_run_id or spec.get("run_id"),
            "input_name": spec.get("input_name") or None, "dataset_id": run.dataset_id or spec.get("dataset_id"),
            "output_format": spec.get("output_format") if run.kind == KIND_PREDICT else None,
            "reads": spec.get("reads") or {},
            "runtime": spec.get("runtime") or PYTORCH if run.kind == KIND_PREDICT else None,
            "rows_done": run.step or 0, "rows_total": run.total_steps or 0,
            "rows_per_second": _rows_per_second(run), "eta_seconds": run.eta_seconds,
            "progress": float(run.progress or 0.0), "metrics": run.metrics or {}, "error": run.error,
            "output_dir": run.output_dir,
            "outputs": [str(p) for p in _outputs(artifacts)] if run.status == SUCCEEDED else []}


def list_jobs(wb: Workbench, run_id: Optional[int] = None, kind: Optional[str] = None,
              limit: int = 200) -> list[dict[str, Any]]:
    """Prediction and evaluation jobs, newest first: of one model's run when ``run_id`` is given, of one kind
    when ``kind`` is. Rows done/total, rows per second and the ETA are the job's progress."""
    if kind is not None and kind not in JOB_KINDS:
        raise ConfigError(f"job kind must be one of {', '.join(JOB_KINDS)}, not {kind!r}")
    stmt = select(Run).where(Run.kind == kind if kind else Run.kind.in_(JOB_KINDS))
    if run_id is not None:
        stmt = stmt.where(Run.parent_run_id == run_id)
    with wb.db.session() as session:
        jobs = session.scalars(stmt.order_by(Run.id.desc()).limit(limit)).all()
        by_job: dict[int, list[Artifact]] = {}
        for artifact in session.scalars(select(Artifact).where(Artifact.run_id.in_([j.id for j in jobs]))):
            by_job.setdefault(artifact.run_id, []).append(artifact)
        return [_job_dict(job, by_job.get(job.id, [])) for job in jobs]


def get_job(wb: Workbench, job_id: int) -> dict[str, Any]:
    """One prediction or evaluation job, as ``list_jobs`` shows it."""
    with wb.db.session() as session:
        job = _require_job(session, job_id)
        return _job_dict(job, job.artifacts)


def _require_job(session, job_id: int) -> Run:
    job = session.get(Run, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist; `workbench runs list` shows the runs and jobs there are")
    if job.kind not in JOB_KINDS:
        raise InvalidState(f"run {job_id} is a training run, not a prediction or evaluation job")
    return job


def job_outputs(wb: Workbench, job_id: int) -> list[Path]:
    """The files a user may download from a job: only once it has succeeded, so never a half-written one
    (an unfinished job has none)."""
    with wb.db.session() as session:
        job = _require_job(session, job_id)
        if job.status != SUCCEEDED:
            return []
        return _outputs(job.artifacts)


def test_sets(wb: Workbench, task: Optional[str] = None) -> list[dict[str, Any]]:
    """The stored datasets that at least one run was evaluated on, with how many evaluation jobs each has."""
    stmt = (select(Dataset.id, Dataset.name, Dataset.task, func.count(Run.id).label("evaluations"))
            .join(Run, Run.dataset_id == Dataset.id).where(Run.kind == KIND_EVALUATE)
            .group_by(Dataset.id, Dataset.name, Dataset.task).order_by(Dataset.name, Dataset.id))
    if task:
        stmt = stmt.where(Dataset.task == task)
    with wb.db.session() as session:
        return [{"dataset_id": r.id, "name": r.name, "task": r.task, "evaluations": r.evaluations}
                for r in session.execute(stmt)]


def trained_on(wb: Workbench) -> dict[str, list[int]]:
    """The training runs of each stored dataset (dataset id → run ids, oldest first): a dataset is no test set
    for the runs that trained on it."""
    with wb.db.session() as session:
        rows = session.execute(select(Run.dataset_id, Run.id).where(Run.kind == KIND_TRAIN,
                                                                    Run.dataset_id.is_not(None)).order_by(Run.id))
        found: dict[str, list[int]] = {}
        for dataset_id, run_id in rows:
            found.setdefault(str(dataset_id), []).append(int(run_id))
        return found


def evaluations_on(wb: Workbench, dataset_id: str) -> list[dict[str, Any]]:
    """One row per evaluation job on a test set (oldest model run first), for a side-by-side comparison."""
    parent = aliased(Run)
    with wb.db.session() as session:
        dataset = find_dataset(session, dataset_id)
        rows = session.execute(
            select(Run.id, Run.parent_run_id, parent.name.label("run_name"), Run.model, Run.status, Run.metrics,
                   Run.output_dir, Run.error, Run.created_at, Run.finished_at)
            .outerjoin(parent, parent.id == Run.parent_run_id)
            .where(Run.kind == KIND_EVALUATE, Run.dataset_id == dataset.id)
            .order_by(Run.parent_run_id, Run.id)).all()
    return [{"id": r.id, "run_id": r.parent_run_id, "run_name": r.run_name or "", "model": r.model,
             "status": r.status, "metrics": r.metrics or {}, "output_dir": r.output_dir, "error": r.error,
             "created_at": _iso(r.created_at), "finished_at": _iso(r.finished_at)} for r in rows]


# Named for the Compare tab's "test sets", not a test: pytest must not collect it where a test module imports it.
test_sets.__test__ = False  # type: ignore[attr-defined]
