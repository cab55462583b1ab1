"""Runs: submit, list, inspect, cancel, retry, clone, continue, repeat with other seeds, delete, wait.

The functions the UI, the CLI and the tests call. They return plain dicts
(JSON-ready) and raise ``workbench.errors``; no gradio here. The queue mechanics
(claims, leases) are in ``jobs.queue.table``; this module adds the user's view of them.
"""
from __future__ import annotations

import copy
import heapq
import json
import logging
import datetime as dt
import re
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from sqlalchemy import String, cast, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from jobs.evaluation import baselines
from jobs.queue import table as queue
from jobs.queue.failures import log_tail
from jobs.queue.runner import PROCESS_LOG
from jobs.specs.run import RunSpec
from jobs.queue.states import ACTIVE, TERMINAL
from storage.context import Workbench
from storage.models import (CANCELLING, KIND_PREDICT, KIND_TRAIN, LABEL_KINDS, QUEUED, RUN_KINDS, RUNNING, SHORT_KINDS,
                            SUCCEEDED, Dataset, MetricPoint, Run, Worker, utcnow)
from workbench.errors import ConfigError, InvalidState, NotFound, WorkbenchError
from workbench.services import exports as exports_service
from workbench.services.predictions import forget_input

log = logging.getLogger(__name__)

# Columns of the runs table view: everything a row shows, nothing it does not (no spec, no error_detail).
_LIST_COLUMNS = (Run.id, Run.name, Run.kind, Run.parent_run_id, Run.status, Run.task, Run.model, Run.progress,
                 Run.step, Run.total_steps, Run.epoch, Run.eta_seconds, Run.phase, Run.phase_done, Run.phase_total,
                 Run.metrics, Run.error, Run.device, Run.attempts, Run.created_at, Run.started_at, Run.finished_at,
                 Run.dataset_id, Run.sweep_id, Run.trial_number, Run.estimate)
_ORDERS = {"created_at": Run.created_at, "id": Run.id, "status": Run.status, "model": Run.model,
           "task": Run.task, "finished_at": Run.finished_at, "progress": Run.progress, "sweep": Run.sweep_id}
# "sweep" groups: a sweep's trials together in trial order, newest sweep first, runs of no sweep after.
_BY_SWEEP = (Run.sweep_id.is_(None), Run.sweep_id.desc(), Run.trial_number, Run.id.desc())


def _iso(value: Optional[dt.datetime]) -> Optional[str]:
    return value.isoformat(timespec="seconds") + "Z" if value else None


def _row_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for key in ("created_at", "started_at", "finished_at", "heartbeat_at"):
        if key in out:
            out[key] = _iso(out[key])
    out["metrics"] = out.get("metrics") or {}
    out["progress"] = float(out.get("progress") or 0.0)
    return out


def _require(session, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise NotFound(f"run {run_id} does not exist; `workbench runs list` shows the runs there are")
    return run


def _require_dataset(session, dataset_id: str) -> Dataset:
    """The stored dataset a run trains on; a deleted (or never imported) one is refused before queueing,
    where the user still sees the form, not minutes later in a failed run."""
    dataset = session.get(Dataset, dataset_id)
    if dataset is None:
        raise NotFound(f"dataset {dataset_id} no longer exists (it was deleted, or never imported); "
                       "import the file again and pick the new dataset")
    return dataset


def submit_run(wb: Workbench, spec: RunSpec, *, parent_run_id: Optional[int] = None, priority: int = 0,
               owner_id: Optional[int] = None) -> int:
    """Queue a run (owned by user ``owner_id``); a worker picks it up. Returns its id."""
    submit_run_checks(wb, spec)
    return queue.submit(wb.db, spec, wb.settings.runs_dir, parent_run_id=parent_run_id, priority=priority,
                        estimate=run_estimate(wb, spec), owner_id=owner_id)


def submit_run_checks(wb: Workbench, spec: RunSpec) -> None:
    """What must hold before ``spec`` is queued (also for a sweep's base spec): its data and parent exist."""
    with wb.db.session() as session:
        if spec.data.dataset_id:
            _require_dataset(session, spec.data.dataset_id)
        if not spec.data.dataset_id and not spec.data.train_path:
            raise ConfigError("the run has no training data: give a dataset id or a train file")
        if spec.init_from_run is not None:
            _require(session, spec.init_from_run)


def run_estimate(wb: Workbench, spec: RunSpec) -> Optional[dict[str, Any]]:
    """The time estimate stored with a new run; an estimate that cannot be made never blocks a submit."""
    return run_estimate_for(wb, spec)


def run_estimate_for(wb: Workbench, spec: RunSpec, **sizes: Any) -> Optional[dict[str, Any]]:
    """``run_estimate`` on data of other sizes than the spec's dataset (``n_train``, ``n_validation``: an
    audit's fold trains on part of it); None when it cannot be made."""
    from workbench.services import estimates

    try:
        return estimates.estimate_run(wb, spec, **sizes)
    except Exception:  # noqa: BLE001 - the run matters more than its estimate
        log.warning("no time estimate for the new run", exc_info=True)
        return None


def list_runs(wb: Workbench, status: Optional[str] = None, search: Optional[str] = None,
              order_by: str = "-created_at", limit: int = 100, offset: int = 0,
              sweep_id: Optional[int] = None, kind: Optional[str] = None) -> list[dict[str, Any]]:
    """One query, the table's columns only, newest first by default (``order_by="id"`` for oldest);
    ``sweep_id`` keeps only that sweep's trials, ``kind`` only training runs or prediction/evaluation/export jobs.
    A labelling project's jobs (``LABEL_KINDS``: embed, refit, dozens per project) are listed only when ``kind``
    asks for one of them; the project's page shows them."""
    if kind is not None and kind not in RUN_KINDS:
        raise ConfigError(f"kind must be one of {', '.join(RUN_KINDS)}, not {kind!r}")
    descending = order_by.startswith("-")
    column = _ORDERS.get(order_by.lstrip("-"))
    if column is None:
        raise ConfigError(f"cannot order runs by {order_by!r}; choose one of {', '.join(sorted(_ORDERS))}")
    stmt = select(*_LIST_COLUMNS, Dataset.name.label("dataset")).outerjoin(Dataset, Run.dataset_id == Dataset.id)
    if status:
        stmt = stmt.where(Run.status == status)
    if sweep_id is not None:
        stmt = stmt.where(Run.sweep_id == sweep_id)
    stmt = stmt.where(Run.kind == kind) if kind is not None else stmt.where(Run.kind.not_in(LABEL_KINDS))
    if search:
        # autoescape: `%` and `_` in the search are characters to find, not LIKE wildcards.
        text = search.lower()
        stmt = stmt.where(or_(*(func.lower(column).contains(text, autoescape=True)
                                for column in (Run.name, Run.model, Run.task, Dataset.name)),
                              cast(Run.id, String) == search.strip()))
    if order_by.lstrip("-") == "sweep":
        stmt = stmt.order_by(*_BY_SWEEP)
    else:
        stmt = stmt.order_by(column.desc() if descending else column, Run.id.desc() if descending else Run.id)
    with wb.db.session() as session:
        rows = session.execute(stmt.limit(limit).offset(offset)).mappings().all()
    return [_row_dict(row) for row in rows]


def count_runs(wb: Workbench) -> dict[str, int]:
    """How many runs are in each status (for a summary line)."""
    with wb.db.session() as session:
        return dict(session.execute(select(Run.status, func.count()).group_by(Run.status)).all())


def get_run(wb: Workbench, run_id: int) -> dict[str, Any]:
    """Everything about one run, as a JSON-ready dict."""
    with wb.db.session() as session:
        run = _require(session, run_id)
        dataset = session.get(Dataset, run.dataset_id).name if run.dataset_id else None
        record = {c.key: getattr(run, c.key) for c in Run.__table__.columns}
        record.update(dataset=dataset, artifacts=[{"kind": a.kind, "path": a.path, "size_bytes": a.size_bytes}
                                                  for a in run.artifacts])
    return _row_dict(record)


def learned_warning(wb: Workbench, run_id: int) -> str:
    """"did not learn: …" / "is below the … baseline …" / "is level with the … baseline …" for a run that did not
    beat its baselines, else ""
    (said before a playground is published, and in every view of the run's score)."""
    with wb.db.session() as session:
        run = _require(session, run_id)
        return baselines.warning(run.metrics)


def run_curves(wb: Workbench, run_id: int) -> dict[str, list[dict[str, Any]]]:
    """Every logged curve: ``{"train/loss": [{"step", "epoch", "value"}, ...], ...}`` in step order."""
    with wb.db.session() as session:
        _require(session, run_id)
        rows = session.execute(select(MetricPoint.name, MetricPoint.step, MetricPoint.epoch, MetricPoint.value)
                               .where(MetricPoint.run_id == run_id)
                               .order_by(MetricPoint.name, MetricPoint.step, MetricPoint.id)).all()
    curves: dict[str, list[dict[str, Any]]] = {}
    for name, step, epoch, value in rows:
        curves.setdefault(name, []).append({"step": step, "epoch": epoch, "value": value})
    return curves


def run_log_path(wb: Workbench, run_id: int) -> Optional[Path]:
    """The run's process log: everything its training process wrote (engine log lines and tracebacks)."""
    with wb.db.session() as session:
        output_dir = _require(session, run_id).output_dir
    return Path(output_dir) / PROCESS_LOG if output_dir else None


def run_logs(wb: Workbench, run_id: int, tail: int = 200) -> str:
    path = run_log_path(wb, run_id)
    return log_tail(path, tail) if path else ""


def cancel_run(wb: Workbench, run_id: int) -> str:
    """Cancel: a queued run at once; a running one stops at its next step with a checkpoint
    (killed after ``cancel_timeout_seconds`` if it does not). Returns the new status."""
    return queue.request_cancel(wb.db, run_id)


def retry_run(wb: Workbench, run_id: int) -> int:
    """Queue a failed or cancelled run again, under the same id; it resumes from its last checkpoint.
    A sweep's trial is refused: its sweep already counted the outcome (a trial is told once)."""
    with wb.db.session() as session:
        run = _require(session, run_id)
        sweep_id, status = run.sweep_id, run.status
        if run.kind != KIND_TRAIN:
            _job_retry_checks(session, run)
        dataset_id = ((run.spec or {}).get("data") or {}).get("dataset_id") or run.dataset_id
        if sweep_id is None and dataset_id:
            _require_dataset(session, dataset_id)
    if sweep_id is not None:
        from jobs.sweeps.driver import refused_retry_reason

        raise InvalidState(f"cannot retry run {run_id}: {refused_retry_reason(status)}")
    queue.requeue(wb.db, run_id)
    return run_id


def _job_retry_checks(session, job: Run) -> None:
    """A prediction or evaluation job goes back to the queue as it is (it resumes from its last finished
    chunk); refused when what it reads is gone: its model's run, or the kept input file."""
    model_run = (job.spec or {}).get("run_id")
    if job.parent_run_id is None or session.get(Run, job.parent_run_id) is None:
        raise InvalidState(f"cannot retry job {job.id}: run {model_run}, whose model it uses, was deleted")
    input_path = (job.spec or {}).get("input_path")
    if input_path and not Path(input_path).is_file():
        raise InvalidState(f"cannot retry job {job.id}: its input file {input_path} is gone; queue a new "
                           "prediction with the file")


def _training_spec(run: Run, verb: str) -> dict[str, Any]:
    """The training spec of ``run`` for a clone or a continuation; a prediction or evaluation job has none."""
    if run.kind != KIND_TRAIN:
        raise InvalidState(f"cannot {verb} run {run.id}: it is a {run.kind} job, not a training run; queue a new "
                           f"{run.kind} job instead")
    return dict(run.spec)


def _merge(base: dict[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def clone_run(wb: Workbench, run_id: int, changes: Mapping[str, Any] | None = None) -> int:
    """A new queued run with the spec of ``run_id`` and ``changes`` applied, nested like the spec:
    ``{"train": {"learning_rate": 1e-5}, "model": "bert-base-uncased"}``."""
    with wb.db.session() as session:
        spec = _training_spec(_require(session, run_id), "clone")
    return submit_run(wb, RunSpec.from_dict(_merge(spec, changes or {})), parent_run_id=run_id)


def continue_run(wb: Workbench, run_id: int, extra_epochs: float, *, owner_id: Optional[int] = None) -> int:
    """Train a finished run's model for ``extra_epochs`` more epochs, as a new run.

    The new run starts from the saved model's weights (``init_from_run``) with a fresh optimizer and
    schedule over the extra epochs, and no warm-up: the finished run's schedule ended at a learning rate
    of zero, so "continuing" it would not train at all.
    """
    if extra_epochs <= 0:
        raise ConfigError("the number of extra epochs must be positive")
    with wb.db.session() as session:
        run = _require(session, run_id)
        spec = _training_spec(run, "continue")
        if run.status != SUCCEEDED:
            raise InvalidState(f"run {run_id} is {run.status}; only a succeeded run can be continued "
                               "(retry a failed or cancelled one instead)")
        name = run.name or f"run {run_id}"
    changes = {"init_from_run": run_id, "name": f"{name} (+{extra_epochs:g} epochs)",
               "train": {"epochs": extra_epochs, "warmup_ratio": 0.0, "max_steps": None}}
    return submit_run(wb, RunSpec.from_dict(_merge(spec, changes)), parent_run_id=run_id, owner_id=owner_id)


def delete_run(wb: Workbench, run_id: int) -> None:
    """Delete a finished or queued run, its curves, its files and (a training run) its ONNX exports. Refused
    while it runs, or while a queued or running run still needs its model; never changes any other run's
    status."""
    with wb.db.session() as session:
        run = _require(session, run_id)
        if run.status in ACTIVE:
            raise InvalidState(f"run {run_id} is {run.status}; cancel it first, then delete it")
        waiting = session.execute(select(Run.id, Run.spec, Run.kind, Run.parent_run_id).where(
            Run.status.in_((QUEUED, *ACTIVE)), Run.id != run_id)).all()
        dependants = [r.id for r in waiting if (r.spec or {}).get("init_from_run") == run_id]
        if dependants:
            raise InvalidState(f"run {run_id} is the starting model of run(s) {', '.join(map(str, dependants))}; "
                               "wait for them or cancel them first")
        jobs = [r.id for r in waiting if r.kind != KIND_TRAIN and r.parent_run_id == run_id]
        if jobs:
            raise InvalidState(f"run {run_id}'s model is used by queued or running job(s) "
                               f"{', '.join(map(str, jobs))}; wait for them or cancel them first")
        output_dir = Path(run.output_dir) if run.output_dir else None
        kept_input = (run.spec or {}).get("input_path") if run.kind == KIND_PREDICT else None
        # Its exports go with it: they are copies of the model (prediction and evaluation jobs stay, as results).
        folders = exports_service.delete_exports_of(session, run_id) if run.kind == KIND_TRAIN else []
        session.delete(run)
    runs_dir = wb.settings.runs_dir.resolve()
    for folder in [output_dir, *folders]:
        if folder and folder.resolve().parent == runs_dir:
            shutil.rmtree(folder, ignore_errors=True)
    if kept_input:
        forget_input(wb, Path(kept_input))


def wait_for_run(wb: Workbench, run_id: int, timeout: Optional[float] = None, poll: float = 0.5) -> dict[str, Any]:
    """Block until the run is succeeded, failed or cancelled; return its record."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        record = get_run(wb, run_id)
        if record["status"] in TERMINAL:
            return record
        if deadline is not None and time.monotonic() >= deadline:
            raise WorkbenchError(f"run {run_id} is still {record['status']} after {timeout:g} s")
        time.sleep(poll)


def queue_positions(wb: Workbench, now: Optional[dt.datetime] = None) -> dict[int, dict[str, Any]]:
    """Where each queued run stands: ``{run_id: {"position", "ahead", "after", "expected_start_seconds",
    "workers", "unknown", "lane"}}``.

    ``lane`` is "short" for a prediction, evaluation or export job while live workers have a short-job lane
    (``jobs.queue.worker``), else "main". ``position`` counts from 1 in the order workers claim runs
    (``jobs.queue.table.claim``: priority, then id) among the runs of its lane; ``ahead`` lists the running and
    queued runs before it there. The expected start plays the queue forward on the live workers' slots: a
    running run frees its slot after its live ETA (or its estimate less the time it has run), a queued one
    holds a slot for its estimate; a short job takes a lane slot or a main one, whichever frees first (the
    lane on a tie, as the worker claims it first, and while the lane's time is unknown); ``after`` is the run whose end frees the slot this one
    takes. With no live worker, or a run ahead of it with no time at all, the start is None and ``unknown``
    says why, rather than a made-up figure.
    """
    return _play_queue(wb, now or utcnow())[0]


def start_if_queued_now(wb: Workbench, now: Optional[dt.datetime] = None) -> dict[str, Any]:
    """Where a training run submitted now (priority 0) would stand: the same keys as one of ``queue_positions``."""
    return _play_queue(wb, now or utcnow())[1]


class _Line:
    """One lane while the queue is played forward: its slots as a heap of (time the slot frees, the run
    that frees it, why that time is unknown), and the runs ahead of whoever joins it next."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.slots: list[tuple[float, int, Optional[str]]] = []
        self.ahead: list[int] = []
        self.waiting = 0  # queued runs among ``ahead``

    def top(self) -> Optional[tuple[float, int, Optional[str]]]:
        return self.slots[0] if self.slots else None


def _play_queue(wb: Workbench, now: dt.datetime) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """``queue_positions``, and the place of a training run submitted now (after the queued runs of priority 0
    or more)."""
    workers, lane = worker_slots(wb, now), lane_slots(wb, now)
    with wb.db.session() as session:
        active = session.execute(select(Run.id, Run.status, Run.eta_seconds, Run.phase, Run.estimate,
                                        Run.started_at, Run.kind).where(Run.status.in_((RUNNING, CANCELLING)))
                                 .order_by(Run.started_at, Run.id)).all()
        queued = session.execute(select(Run.id, Run.estimate, Run.priority, Run.kind).where(Run.status == QUEUED)
                                 .order_by(Run.priority.desc(), Run.id)).all()
    main, short = _Line("main"), _Line("short")
    for run in active:
        left = _time_left(run, now)
        # a running short job is counted in the lane while it has room: the worker fills the lane first
        line = short if run.kind in SHORT_KINDS and len(short.slots) < lane else main
        line.slots.append((left if left is not None else float("inf"), run.id,
                           None if left is not None else f"run {run.id} has no time estimate"))
        line.ahead.append(run.id)
    for line, capacity in ((main, workers), (short, lane)):
        line.slots += [(0.0, 0, None)] * max(0, capacity - len(line.slots))
        heapq.heapify(line.slots)
    found, new = {}, None
    for run in queued:
        if new is None and (run.priority or 0) < 0:
            new = _place(main.top(), main.waiting + 1, main.ahead, workers, main.name)
        line = short if lane and run.kind in SHORT_KINDS else main
        pool = main
        # A lane whose next free time is unknown (a short job has no estimate) is said to be unknown: the
        # main slots' time would be a bound many times too long, since the job ahead in the lane is short.
        if line is short and short.slots and (not main.slots or short.slots[0][0] <= main.slots[0][0]
                                              or short.slots[0][0] == float("inf")):
            pool = short
        free_at, after, unknown = heapq.heappop(pool.slots) if pool.slots else (float("inf"), 0, None)
        found[run.id] = place = _place((free_at, after, unknown), line.waiting + 1, line.ahead, workers, line.name)
        seconds = (run.estimate or {}).get("seconds")
        if place["expected_start_seconds"] is None:
            heapq.heappush(pool.slots, (float("inf"), run.id, place["unknown"]))
        elif seconds is None:
            heapq.heappush(pool.slots, (float("inf"), run.id, f"run {run.id} has no time estimate"))
        else:
            heapq.heappush(pool.slots, (free_at + float(seconds), run.id, None))
        for joined in {id(line): line, id(pool): pool}.values():
            joined.ahead.append(run.id)
            joined.waiting += 1
    return found, new or _place(main.top(), main.waiting + 1, main.ahead, workers, main.name)


def _place(slot: Optional[tuple[float, int, Optional[str]]], position: int, ahead: list[int],
           workers: int, lane: str) -> dict[str, Any]:
    """One place in the queue, taking the earliest free ``slot`` (free at, freed by, why unknown)."""
    free_at, after, unknown = slot or (float("inf"), 0, None)
    if not workers:
        unknown = "no worker is running"
    known = unknown is None and free_at != float("inf")
    return {"position": position, "ahead": list(ahead), "after": after or None,
            "expected_start_seconds": round(free_at, 1) if known else None, "workers": workers,
            "unknown": None if known else unknown, "lane": lane}


def worker_slots(wb: Workbench, now: Optional[dt.datetime] = None) -> int:
    """How many runs the live workers (heard from in the last three heartbeats) execute at once."""
    return _live_sum(wb, Worker.max_jobs, now)


def lane_slots(wb: Workbench, now: Optional[dt.datetime] = None) -> int:
    """How many short jobs the live workers run in their short-job lanes, beside ``worker_slots``."""
    return _live_sum(wb, Worker.short_jobs, now)


def _live_sum(wb: Workbench, column: Any, now: Optional[dt.datetime]) -> int:
    recent = (now or utcnow()) - dt.timedelta(seconds=max(15.0, 3 * wb.settings.heartbeat_seconds))
    with wb.db.session() as session:
        return int(session.scalar(select(func.coalesce(func.sum(column), 0))
                                  .where(Worker.heartbeat_at >= recent)) or 0)


def time_left(wb: Workbench, run_ids: list[int], now: Optional[dt.datetime] = None) -> Optional[float]:
    """Seconds until the last of ``run_ids`` ends: a running one by its ``_time_left``, a queued one at its
    expected start plus its estimate; 0 when none is left to run, None when one of them has no time."""
    now = now or utcnow()
    positions = queue_positions(wb, now)
    with wb.db.session() as session:
        runs = session.execute(select(Run.id, Run.status, Run.eta_seconds, Run.phase, Run.estimate, Run.started_at)
                               .where(Run.id.in_(list(run_ids)))).all()
    ends = [0.0]
    for run in runs:
        if run.status in (RUNNING, CANCELLING):
            end = _time_left(run, now)
        elif run.status == QUEUED:
            start, seconds = (positions.get(run.id) or {}).get("expected_start_seconds"), \
                (run.estimate or {}).get("seconds")
            end = start + seconds if start is not None and seconds is not None else None
        else:
            continue
        if end is None:
            return None
        ends.append(end)
    return max(ends)


def queue_position(wb: Workbench, run_id: int, now: Optional[dt.datetime] = None) -> Optional[dict[str, Any]]:
    """``queue_positions`` for one run; None when it is not queued."""
    return queue_positions(wb, now).get(run_id)


def _time_left(run: Any, now: dt.datetime) -> Optional[float]:
    """Seconds until a running run ends: its live ETA while it trains, else its estimate less the time it
    has run (0 once it overran it); None when it has neither."""
    if run.status == CANCELLING:
        return 0.0
    if run.eta_seconds is not None and run.phase in (None, "training"):
        return max(0.0, float(run.eta_seconds))
    seconds = (run.estimate or {}).get("seconds")
    if seconds is None:
        return None
    elapsed = (now - run.started_at).total_seconds() if run.started_at else 0.0
    return max(0.0, float(seconds) - elapsed)


def read_run_tables(output_dir: str | Path) -> dict[str, Any]:
    """A finished run's ``tables.json`` (per-class scores, confusion matrix); ``{}`` when absent."""
    path = Path(output_dir) / "tables.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        log.warning("unreadable %s", path)
        return {}


def read_run_hyperparameters(output_dir: str | Path | None) -> dict[str, Any]:
    """The hyper-parameters a finished run really used (``metrics.json``), automatic ones resolved; ``{}``
    for a run that has not finished (or was trained before they were recorded)."""
    path = Path(output_dir) / "metrics.json" if output_dir else None
    if path is None or not path.is_file():
        return {}
    try:
        resolved = json.loads(path.read_text(encoding="utf-8")).get("hyperparameters")
    except (OSError, ValueError, AttributeError):
        log.warning("unreadable %s", path)
        return {}
    return dict(resolved) if isinstance(resolved, dict) else {}


def read_run_errors(output_dir: str | Path, limit: int = 200) -> list[dict[str, Any]]:
    """The wrong validation predictions of ``predictions.jsonl``, likeliest wrong label first.

    Each row gets ``label_quality``: the model's probability for the given label (for a tagged
    sentence, the lowest over its wrongly predicted words); rows are sorted by it, lowest first,
    the way a label audit ranks (``jobs.audits.confident_learning``). ``suspicious`` is confident learning's
    verdict: the predicted label reaches its class threshold, the mean probability the model gives
    that class on the validation examples labelled with it. Runs trained before the given label's
    probability was recorded (and QA, multi-label) keep file order, without either field.
    """
    path = Path(output_dir) / "predictions.jsonl"
    if not path.is_file():
        return []
    wrong: list[dict[str, Any]] = []
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            for gold, score in _gold_scores(record):
                sums[gold] = sums.get(gold, 0.0) + score
                counts[gold] = counts.get(gold, 0) + 1
            if not record.get("correct", True) and len(wrong) < MAX_ERRORS_RANKED:
                wrong.append(record)
    thresholds = {label: sums[label] / counts[label] for label in counts}
    for record in wrong:
        _mark_quality(record, thresholds)
    scored = sorted((r for r in wrong if r.get("label_quality") is not None), key=lambda r: r["label_quality"])
    return (scored + [r for r in wrong if r.get("label_quality") is None])[:limit]


# Wrong predictions read for the ranking; beyond this (a huge validation set) the rest are not ranked.
MAX_ERRORS_RANKED = 50_000


def _gold_scores(record: dict[str, Any]):
    """(given label, its predicted probability) of a row's labels: one per record, or per word."""
    gold, scores = record.get("gold"), record.get("gold_score")
    if isinstance(gold, str) and isinstance(scores, (int, float)):
        yield gold, float(scores)
    elif isinstance(gold, list) and isinstance(scores, list) and record.get("tokens") is not None:
        for tag, score in zip(gold, scores):
            if isinstance(score, (int, float)):
                yield str(tag), float(score)


def _mark_quality(record: dict[str, Any], thresholds: Mapping[str, float]) -> None:
    gold, predicted, scores, score = (record.get("gold"), record.get("predicted"), record.get("gold_score"),
                                      record.get("score"))
    if isinstance(gold, str) and isinstance(scores, (int, float)) and isinstance(score, (int, float)):
        record["label_quality"] = float(scores)
        record["suspicious"] = float(score) >= thresholds.get(str(predicted), float("inf"))
    elif isinstance(gold, list) and isinstance(scores, list) and isinstance(predicted, list) \
            and isinstance(score, list):
        words = [i for i, (g, p) in enumerate(zip(gold, predicted))
                 if g != p and i < len(scores) and isinstance(scores[i], (int, float))]
        if words:
            record["label_quality"] = min(float(scores[i]) for i in words)
            record["suspicious"] = any(i < len(score) and float(score[i]) >= thresholds.get(str(predicted[i]),
                                                                                            float("inf"))
                                       for i in words)


# -- seed groups: runs that differ only in their seed ----------------------------------------------------------

MIN_SEEDS, MAX_SEEDS = 2, 10
_SEED_SUFFIX = re.compile(r" \(seed \d+\)$")


def _check_seed_count(n: int) -> None:
    if not MIN_SEEDS <= n <= MAX_SEEDS:
        raise ConfigError(f"the number of seeds must be {MIN_SEEDS} to {MAX_SEEDS}, not {n}")


def submit_seed_group(wb: Workbench, spec: RunSpec, n: int, *, owner_id: Optional[int] = None) -> dict[str, Any]:
    """Queue ``n`` runs of ``spec`` with seeds ``spec.train.seed``, +1, ... as one seed group, named
    "NAME (seed S)". Returns ``{"group", "ids", "seeds"}``; the group is the first run's id."""
    _check_seed_count(n)
    submit_run_checks(wb, spec)
    seeds = [spec.train.seed + i for i in range(n)]
    name = spec.name or spec.task
    specs = [RunSpec.from_dict(_merge(spec.to_dict(), {"name": f"{name} (seed {seed})", "train": {"seed": seed}}))
             for seed in seeds]
    group, ids = _queue_group(wb, specs, group=None, parent_run_id=None, owner_id=owner_id)
    return {"group": group, "ids": ids, "seeds": seeds}


def repeat_with_seeds(wb: Workbench, run_id: int, n: int, *, owner_id: Optional[int] = None) -> dict[str, Any]:
    """Bring run ``run_id``'s seed group up to ``n`` seeds: queue runs with its spec and the next seeds not in
    the group yet (its seed + 1, + 2, ...), named "NAME (seed S)". A run in no group starts one (the group is
    its id). Returns ``{"group", "ids", "seeds"}`` of the new runs; refused when the group has ``n`` already."""
    queued = fill_seed_group(wb, run_id, n, owner_id=owner_id)
    if not queued["ids"]:
        raise InvalidState(f"run {run_id}'s seed group already has {n} or more seeds; ask for more than that")
    return queued


def fill_seed_group(wb: Workbench, run_id: int, n: int, *, owner_id: Optional[int] = None) -> dict[str, Any]:
    """``repeat_with_seeds`` that queues nothing (``ids`` empty) when the group is already large enough: asking
    twice for a sweep's top trials with N seeds confirms each of them once."""
    _check_seed_count(n)
    with wb.db.session() as session:
        run = _require(session, run_id)
        spec = _training_spec(run, "repeat")
        group = run.seed_group
        used = set(session.scalars(select(Run.group_seed).where(Run.seed_group == group))) if group else set()
        name = _SEED_SUFFIX.sub("", run.name or f"run {run_id}")
    seed = int(spec["train"]["seed"])
    used.add(seed)
    seeds: list[int] = []
    candidate = seed
    while len(used) + len(seeds) < n:
        candidate += 1
        if candidate not in used:
            seeds.append(candidate)
    specs = [RunSpec.from_dict(_merge(spec, {"name": f"{name} (seed {s})", "train": {"seed": s}})) for s in seeds]
    if specs:
        submit_run_checks(wb, specs[0])
    group, ids = _queue_group(wb, specs, group=group or run_id, parent_run_id=run_id, first=(run_id, seed),
                              owner_id=owner_id)
    return {"group": group, "ids": ids, "seeds": seeds}


def _queue_group(wb: Workbench, specs: list[RunSpec], *, group: Optional[int], parent_run_id: Optional[int],
                 first: Optional[tuple[int, int]] = None, owner_id: Optional[int] = None
                 ) -> tuple[Optional[int], list[int]]:
    """Insert the queued runs of one seed group in one transaction: all of them or, when a seed is in the group
    already (two requests at once), none. ``group`` None: the first new run names the group. ``first``: (run,
    seed) of an existing run that joins ``group`` if it is in none yet."""
    estimate = run_estimate(wb, specs[0]) if specs else None
    ids: list[int] = []
    try:
        with wb.db.session() as session:
            if first is not None:
                session.execute(update(Run).where(Run.id == first[0], Run.seed_group.is_(None))
                                .values(seed_group=group, group_seed=first[1]))
            for spec in specs:
                run = queue.add_queued_run(session, spec, wb.settings.runs_dir, parent_run_id=parent_run_id,
                                           estimate=estimate, seed_group=group, owner_id=owner_id,
                                           group_seed=spec.train.seed if group is not None else None)
                if group is None:
                    group = run.seed_group = run.id
                    run.group_seed = spec.train.seed
                ids.append(run.id)
    except IntegrityError as exc:
        raise InvalidState(f"seed group {group} already has one of the seeds "
                           f"{', '.join(str(s.train.seed) for s in specs)} (queued meanwhile by another request); "
                           "look at the group again") from exc
    return group, ids


def group_summaries(wb: Workbench, groups: list[int], metrics: Optional[tuple[str, ...]] = None
                    ) -> dict[int, dict[str, Any]]:
    """For each seed group: ``{"group", "ids", "members": [{"id", "seed", "status"}], "metrics", "mean", "std",
    "n"}`` in one query. ``mean``/``std`` map each metric (``metrics``, default the task's headline ones) to
    the mean and the sample standard deviation (n-1; None below two) over the succeeded members; ``n`` counts
    those."""
    from jobs.specs.run import HEADLINE_METRICS

    if not groups:
        return {}
    with wb.db.session() as session:
        rows = session.execute(select(Run.id, Run.seed_group, Run.group_seed, Run.status, Run.task, Run.metrics)
                               .where(Run.seed_group.in_(list(groups))).order_by(Run.group_seed, Run.id)).all()
    found: dict[int, list[Any]] = {}
    for row in rows:
        found.setdefault(row.seed_group, []).append(row)
    out = {}
    for group, members in found.items():
        names = metrics or HEADLINE_METRICS.get(members[0].task, ())
        finished = [m.metrics or {} for m in members if m.status == SUCCEEDED]
        mean, std = {}, {}
        for name in names:
            values = [float(v[name]) for v in finished if isinstance(v.get(name), (int, float))]
            if values:
                mean[name] = statistics.fmean(values)
                std[name] = statistics.stdev(values) if len(values) > 1 else None
        out[group] = {"group": group, "ids": [m.id for m in members], "metrics": list(names),
                      "members": [{"id": m.id, "seed": m.group_seed, "status": m.status} for m in members],
                      "mean": mean, "std": std, "n": len(finished)}
    return out


def group_summary(wb: Workbench, group: int, metrics: Optional[tuple[str, ...]] = None) -> dict[str, Any]:
    """``group_summaries`` of one group; ``NotFound`` when no run is in it."""
    found = group_summaries(wb, [group], metrics)
    if group not in found:
        raise NotFound(f"seed group {group} has no runs")
    return found[group]
