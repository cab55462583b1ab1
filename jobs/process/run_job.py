"""The training subprocess: ``python -m jobs.process.run_job RUN_ID --attempt N``.

It opens the database from the ``WORKBENCH_*`` environment the worker passed
down, resolves the run's data files and parent model, trains through
``jobs.training.engine.run_training`` with a database-backed reporter, and records the
outcome itself (conditional on still owning the attempt). A run of kind
"predict" or "evaluate" instead puts its parent run's model to work through
``jobs.predict`` (see ``jobs.predict.spec``), and one of kind "export" writes it
as ONNX through ``jobs.export``, and the labelling kinds (label-embed, label-refit) do a labelling project's
background work through ``jobs.labelling.job``, with the same outcomes. The exit
code tells the worker what happened; a process that dies without recording
anything (a segfault, the OOM killer) is recorded by the worker from its exit signal.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from sqlalchemy import delete, select, tuple_, update

from jobs.queue import table as queue
from jobs.export.runtime import latest_onnx_dir
from jobs.export.spec import ExportSpec
from jobs.queue.failures import describe_exception, is_peer_loss, log_tail
from jobs.predict.spec import ModelRef, PredictSpec
from jobs.progress import Cancelled
from jobs.queue.runner import PROCESS_LOG, die_with_launcher
from jobs.process.preload import FORKED_ENV
from jobs.specs.run import RunSpec
from jobs.queue.states import ACTIVE
from jobs.tracking.mirror import open_mirror
from storage.context import Workbench
from storage.datasets.lookup import dataset_files
from storage.db import Database
from storage.errors import TrainingError, WorkbenchError
from storage.exiting import exit_process
from storage.models import (CANCELLED, FAILED, KIND_EVALUATE, KIND_EXPORT, KIND_PREDICT, KIND_TRAIN, LABEL_KINDS,
                            PRUNED, SUCCEEDED, Artifact, MetricPoint, Run)
from storage.settings import Settings

log = logging.getLogger("jobs.process.run_job")

# What a warm process imports before it forks its first job (``jobs.process.preload``): what a training or an
# evaluation job imports. It learns the rest from the jobs it runs, but only modules of the packages it already
# holds, so this list also bounds what it learns (onnxruntime, for one, stays the export jobs' own import).
PRELOAD = ("torch", "transformers:AutoConfig", "transformers:AutoTokenizer", "transformers:Trainer",
           "jobs.training.engine", "jobs.predict.evaluate")
EXIT_SUCCEEDED, EXIT_FAILED, EXIT_CANCELLED, EXIT_ORPHANED, EXIT_PRUNED = 0, 2, 3, 4, 5
WRITE_INTERVAL_S = 1.0

TrainFn = Callable[..., Mapping[str, Any]]
# predict_fn(spec, model, output_dir, reporter, device=...) and
# evaluate_fn(spec, model, records_paths, output_dir, reporter, device=...): see jobs.predict.spec;
# export_fn(spec, model, run_spec, output_dir, reporter, device=...): see jobs.export.job.run_export;
# label_fn(wb, run_id, kind, spec, output_dir, reporter, device=...): see jobs.labelling.job.run_label_job.
JobFn = Callable[..., Mapping[str, Any]]


def _is_rank_zero() -> bool:
    """Under DDP every rank runs this module; only rank 0 writes progress, curves and outcomes."""
    return os.environ.get("RANK", "0") == "0"


def _rank() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside a launcher."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


class DbReporter:
    """Writes progress and ETA at most once per ``interval`` seconds, each metric point (and the latest
    metrics) when it comes, and reads the cancel flag at most once per ``interval``.

    Each curve holds one point per step at any time: an attempt that resumes from a checkpoint
    first drops what a lost attempt logged past it, a value logged again at the same step (the
    final evaluation of the best model, at the last step) replaces the earlier one, and an attempt
    that no longer owns the run (its lease was taken over, or the run was re-queued) writes nothing.
    """

    def __init__(self, db: Database, run_id: int, attempt: int, interval: float = WRITE_INTERVAL_S):
        self.db, self.run_id, self.attempt, self.interval = db, run_id, attempt, interval
        self.enabled = _is_rank_zero()
        self._parent = os.getppid()
        self._forked = os.environ.get(FORKED_ENV) == "1"
        self.orphaned = False
        self._last_write = 0.0
        self._last_cancel_check = 0.0
        self._cancel = False
        self._state: dict[str, Any] = {}
        self._phase: dict[str, Any] = {}
        self._logged_quarter = -1
        self._latest: dict[str, float] = {}
        self._points: list[dict[str, Any]] = []
        self._first: Optional[tuple[float, int]] = None  # (time, step) of this attempt's first step, for the ETA
        # Set by the attempt's first step: points at or past it were logged by an attempt that was lost
        # (a dead worker, or a failed run retried) and are replayed now. A retry restarts the attempt count,
        # so the attempt number cannot tell a first attempt from a resumed one.
        self._replayed_from: Optional[int] = None

    def _owned(self):
        return (Run.id == self.run_id) & (Run.attempts == self.attempt) & Run.status.in_(ACTIVE)

    def progress(self, step: int, total_steps: int, epoch: float) -> None:
        now = time.monotonic()
        if self._first is None:
            self._first = (now, step)
            self._replayed_from = step
        eta = None
        start_time, start_step = self._first
        if step > start_step and total_steps:
            eta = (now - start_time) / (step - start_step) * max(0, total_steps - step)
        self._state = {"step": step, "total_steps": total_steps, "epoch": epoch, "eta_seconds": eta,
                       "progress": min(1.0, step / total_steps) if total_steps else 0.0}
        if now - self._last_write >= self.interval or step == total_steps:
            self.flush()

    def metrics(self, step: int, epoch: Optional[float], values: Mapping[str, float]) -> None:
        for name, value in values.items():
            value = float(value)
            self._latest[name] = value
            self._points.append({"run_id": self.run_id, "step": step, "epoch": epoch, "name": name, "value": value})
        # Points are written at once (the engine logs every few steps, not every step): a point held back
        # for a second could be lost to a crash after the checkpoint that covers it, leaving a gap in the curve.
        self.flush()

    def phase(self, name: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
        """The phase goes to the database at once when it changes, its n of N at most once per interval.

        The log gets the change, and evaluation progress at each quarter, so it never goes silent.
        """
        changed = name != self._phase.get("phase")
        self._phase = {"phase": name, "phase_done": done, "phase_total": total}
        if changed:
            self._logged_quarter = -1
            log.info("run %s: %s%s", self.run_id, name, f" ({total} examples)" if total else "")
        elif total and done is not None:
            quarter = 4 * done // total
            if quarter > self._logged_quarter and 0 < quarter:
                self._logged_quarter = quarter
                log.info("run %s: %s %d/%d", self.run_id, name, done, total)
        finished = bool(total) and done == total
        if changed or finished or time.monotonic() - self._last_write >= self.interval:
            self.flush()

    def info(self, values: Mapping[str, object]) -> None:
        total = values.get("total_steps")
        if isinstance(total, int) and self.enabled:
            # Shown as step 0/N (or the resumed step/N) before the first step is done.
            with self.db.session() as session:
                session.execute(update(Run).where(self._owned()).values(total_steps=total)
                                .execution_options(synchronize_session=False))

    def cancel_requested(self) -> bool:
        now = time.monotonic()
        if now - self._last_cancel_check >= self.interval:
            self._last_cancel_check = now
            if os.getppid() != self._parent and not self._forked:
                # The worker died and PDEATHSIG was unavailable: stop at a checkpoint and leave the run
                # to whichever worker takes over its lease. (A job forked from a warm process outlives that
                # process, and dies with the worker's through a pipe: jobs.process.preload.)
                self.orphaned = True
            with self.db.session() as session:
                row = session.execute(select(Run.cancel_requested, Run.attempts, Run.status)
                                      .where(Run.id == self.run_id)).first()
            self.orphaned = self.orphaned or row is None or row.attempts != self.attempt or row.status not in ACTIVE
            self._cancel = bool(row and row.cancel_requested)
        return self._cancel or self.orphaned

    def flush(self) -> None:
        self._last_write = time.monotonic()
        points, self._points = self._points, []
        values = {**self._state, **self._phase}
        if self._latest:
            values["metrics"] = dict(self._latest)
        if not self.enabled or not values:
            return
        with self.db.session() as session:
            # The run's row first: it says whether this attempt still owns the run, and on PostgreSQL its row
            # lock orders this write against a takeover and against any other writer of the run's points.
            owned = session.execute(update(Run).where(self._owned()).values(**values)
                                    .execution_options(synchronize_session=False)).rowcount == 1
            if not owned:
                self.orphaned = True
                return
            if self._replayed_from is not None:
                session.execute(delete(MetricPoint).where(MetricPoint.run_id == self.run_id,
                                                          MetricPoint.step >= self._replayed_from))
                self._replayed_from = None
            _replace_points(session, self.run_id, points)


def _replace_points(session, run_id: int, points: list[dict[str, Any]]) -> None:
    """Insert ``points``, replacing any point of the same curve at the same step (the last value wins)."""
    latest = {(p["name"], p["step"]): p for p in points}
    if not latest:
        return
    session.execute(delete(MetricPoint).where(MetricPoint.run_id == run_id,
                                              tuple_(MetricPoint.name, MetricPoint.step).in_(list(latest))))
    session.execute(MetricPoint.__table__.insert(), list(latest.values()))


def resolve_spec(wb: Workbench, spec: RunSpec) -> tuple[RunSpec, Optional[Path]]:
    """Fill the data paths from the dataset store and find the parent model of a chained run."""
    data = spec.data
    # A spec that names its own files reads them (an audit's fold: k-1 folds of the dataset), one
    # that names only a dataset reads the dataset's.
    if data.dataset_id and not data.train_path:
        train, validation = dataset_files(wb.db, data.dataset_id)
        data = dataclasses.replace(data, train_path=str(train),
                                   validation_path=data.validation_path or (str(validation) if validation else None))
    for path in (data.train_path, data.validation_path):
        if path and not Path(path).is_file():
            raise TrainingError(f"dataset file missing: {path}",
                                "re-import the dataset, or mount the shared folder on this worker")
    init_model = None
    if spec.init_from_run is not None:
        with wb.db.session() as session:
            parent_dir = session.scalar(select(Run.output_dir).where(Run.id == spec.init_from_run))
        init_model = Path(parent_dir or "") / "model"
        if parent_dir is None or not init_model.exists():
            raise TrainingError(f"run {spec.init_from_run} has no saved model to start from",
                                "start from a run that succeeded, or from a base model")
    return dataclasses.replace(spec, data=data), init_model


def discard_incomplete_checkpoints(output_dir: Path) -> list[str]:
    """A process killed while saving leaves a checkpoint folder without ``trainer_state.json`` (the
    Trainer writes it last). Resuming from it would fail, so it goes; the previous one is used."""
    removed = []
    for folder in (output_dir / "checkpoints").glob("checkpoint-*"):
        if folder.is_dir() and not (folder / "trainer_state.json").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
    if removed:
        log.warning("removed incomplete checkpoint(s) %s left by an interrupted attempt", ", ".join(removed))
    return removed


# What a training run leaves in its folder, by artifact kind.
TRAIN_ARTIFACTS = {"model": "model", "metrics.json": "metrics", "tables.json": "tables",
                   "predictions.jsonl": "predictions", "train.log": "log", "checkpoints": "checkpoint"}
# A prediction or evaluation job's downloads: its metrics and tables, and every finished ``predictions.*`` file
# at the top of its folder (the output of a prediction, ``predictions.jsonl`` of an evaluation). Files still
# being written carry one of these suffixes and are never recorded.
JOB_ARTIFACTS = {"metrics.json": "metrics", "tables.json": "tables"}
# An export job's: its report, and the folder of ONNX variants with what loads them.
EXPORT_ARTIFACTS = {"export.json": "metrics", "onnx": "onnx"}
UNFINISHED_SUFFIXES = (".part", ".tmp", ".partial")


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def _job_outputs(output_dir: Path) -> dict[Path, str]:
    """The files of a finished prediction or evaluation job that a user may download, by artifact kind."""
    found = {output_dir / name: kind for name, kind in JOB_ARTIFACTS.items() if (output_dir / name).is_file()}
    for path in sorted(output_dir.glob("predictions*")):
        if path.is_file() and not path.name.endswith(UNFINISHED_SUFFIXES):
            found[path] = "predictions"
    return found


def _record_artifacts(session, run_id: int, output_dir: Path, kind: str = KIND_TRAIN) -> None:
    if kind in (KIND_TRAIN, KIND_EXPORT):
        names = TRAIN_ARTIFACTS if kind == KIND_TRAIN else EXPORT_ARTIFACTS
        found = {output_dir / name: art for name, art in names.items() if (output_dir / name).exists()}
    else:
        found = _job_outputs(output_dir)
    session.execute(delete(Artifact).where(Artifact.run_id == run_id))
    for path, art in found.items():
        session.add(Artifact(run_id=run_id, kind=art, path=str(path), size_bytes=_size(path)))


def _final_metrics(result: Mapping[str, Any]) -> dict[str, Any]:
    inner = result.get("metrics") if isinstance(result, Mapping) else None
    return dict(inner) if isinstance(inner, Mapping) else dict(result or {})


def execute(wb: Workbench, run_id: int, attempt: int, train_fn: TrainFn, *, predict_fn: Optional[JobFn] = None,
            evaluate_fn: Optional[JobFn] = None, export_fn: Optional[JobFn] = None,
            label_fn: Optional[JobFn] = None) -> int:
    """Run one attempt of one run and record its outcome; returns the process exit code.

    The run's kind picks the work: training through ``train_fn``, a prediction through ``predict_fn``, an
    evaluation through ``evaluate_fn``, an ONNX export through ``export_fn``, a labelling project's job through
    ``label_fn`` (by default the real ones, imported only when needed). Cancel, a lost lease and failures are
    recorded the same way for every kind."""
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        if run is None or run.attempts != attempt:
            log.error("run %s attempt %s is not ours any more; nothing to do", run_id, attempt)
            return EXIT_ORPHANED
        raw_spec, output_dir, kind = dict(run.spec), Path(run.output_dir), run.kind
        sweep_id, trial_number, label_project_id = run.sweep_id, run.trial_number, run.label_project_id
    output_dir.mkdir(parents=True, exist_ok=True)
    if kind in LABEL_KINDS:
        return _execute_label_job(wb, run_id, attempt, kind, raw_spec, output_dir, label_fn or _real_label_job)
    if kind != KIND_TRAIN:
        return _execute_job(wb, run_id, attempt, kind, raw_spec, output_dir, {
            KIND_PREDICT: predict_fn or _real_prediction, KIND_EVALUATE: evaluate_fn or _real_evaluation,
            KIND_EXPORT: export_fn or _real_export}, label_project_id=label_project_id)
    if _is_rank_zero():
        discard_incomplete_checkpoints(output_dir)
    reporter = DbReporter(wb.db, run_id, attempt)
    if sweep_id is not None and trial_number is not None:
        from jobs.sweeps.driver import trial_reporter

        reporter = trial_reporter(wb, reporter, sweep_id, trial_number, enabled=_is_rank_zero())
    # MLflow and TensorBoard, when the settings name them: never a reason for the run to fail or wait
    mirror = open_mirror(wb, run_id, enabled=_is_rank_zero())
    code = _train_attempt(wb, run_id, attempt, raw_spec, output_dir, mirror.watch(reporter), train_fn)
    mirror.close(MIRRORED_OUTCOMES.get(code))
    return code


# The run's state by the exit code, for its mirror; a run handed to another worker goes on there (None).
MIRRORED_OUTCOMES = {EXIT_SUCCEEDED: SUCCEEDED, EXIT_FAILED: FAILED, EXIT_CANCELLED: CANCELLED, EXIT_PRUNED: PRUNED}


def _train_attempt(wb: Workbench, run_id: int, attempt: int, raw_spec: dict[str, Any], output_dir: Path, reporter,
                   train_fn: TrainFn) -> int:
    """Train and record the outcome of one attempt; returns the exit code."""
    spec = None
    try:
        spec = RunSpec.from_dict(raw_spec)
        spec, init_model = resolve_spec(wb, spec)
        log.info("run %s attempt %s: training %s on %s", run_id, attempt, spec.model, spec.data.train_path)
        result = train_fn(spec, output_dir, reporter, device=wb.settings.device,
                          init_model_path=str(init_model) if init_model else None)
    except Cancelled:
        return _stopped(wb, run_id, attempt, reporter)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a sentence on the run
        log.exception("run %s failed", run_id)
        reporter.flush()
        _record_failure(wb, run_id, attempt, exc, spec, output_dir)
        return EXIT_FAILED
    return _succeeded(wb, run_id, attempt, reporter, output_dir, result, KIND_TRAIN)


def _execute_job(wb: Workbench, run_id: int, attempt: int, kind: str, raw_spec: dict[str, Any], output_dir: Path,
                 work: Mapping[str, JobFn], label_project_id: Optional[int] = None) -> int:
    """A prediction, evaluation or ONNX export: the model's run resolved into a ``ModelRef``, the work handed to
    ``work[kind]``; cancel, failure and success recorded as for a training run. A prediction over a labelling
    project's pool (``label_project_id``) then hands its scores to the project."""
    reporter = DbReporter(wb.db, run_id, attempt)
    spec = None
    try:
        spec = (ExportSpec if kind == KIND_EXPORT else PredictSpec).from_dict(raw_spec)
        model = resolve_model(wb, spec.run_id)
        device = wb.settings.device
        if kind == KIND_PREDICT:
            log.info("run %s attempt %s: predicting %s with run %s", run_id, attempt, spec.input_name
                     or spec.input_path, spec.run_id)
            result = work[kind](spec, model, output_dir, reporter, device=device)
            if label_project_id is not None:
                _score_label_pool(wb, label_project_id, spec.run_id, result, reporter)
        elif kind == KIND_EXPORT:  # the parity check scores the model's own validation split
            log.info("run %s attempt %s: exporting run %s to ONNX", run_id, attempt, spec.run_id)
            result = work[kind](spec, model, _model_run_spec(wb, spec.run_id), output_dir, reporter, device=device)
        else:
            records = [str(path) for path in dataset_files(wb.db, spec.dataset_id or "") if path is not None]
            log.info("run %s attempt %s: evaluating run %s on dataset %s", run_id, attempt, spec.run_id,
                     spec.dataset_id)
            model = dataclasses.replace(model, run_spec=_training_of(wb, spec.run_id))
            result = work[kind](spec, model, records, output_dir, reporter, device=device)
    except Cancelled:
        return _stopped(wb, run_id, attempt, reporter)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a sentence on the job
        log.exception("run %s (%s) failed", run_id, kind)
        reporter.flush()
        _record_failure(wb, run_id, attempt, exc, spec, output_dir)
        return EXIT_FAILED
    return _succeeded(wb, run_id, attempt, reporter, output_dir, result, kind)


def _execute_label_job(wb: Workbench, run_id: int, attempt: int, kind: str, raw_spec: dict[str, Any],
                       output_dir: Path, label_fn: JobFn) -> int:
    """A labelling project's embed or refit job (its spec names the project); cancel, failure and success
    recorded as for a training run."""
    reporter = DbReporter(wb.db, run_id, attempt)
    try:
        result = label_fn(wb, run_id, kind, raw_spec, output_dir, reporter, device=wb.settings.device)
    except Cancelled:
        return _stopped(wb, run_id, attempt, reporter)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a sentence on the job
        log.exception("run %s (%s) failed", run_id, kind)
        reporter.flush()
        _record_failure(wb, run_id, attempt, exc, None, output_dir)
        return EXIT_FAILED
    return _succeeded(wb, run_id, attempt, reporter, output_dir, result, kind)


def _score_label_pool(wb: Workbench, project_id: int, model_run_id: int, result: Mapping[str, Any], reporter) -> None:
    """The finished prediction's scores drive the labelling project's suggestions and queries from now on
    (``jobs.labelling.job.take_run_scores``). The prediction stands whatever happens here: a failure is logged."""
    output = result.get("output") if isinstance(result, Mapping) else None
    if not output:
        return
    try:
        from jobs.labelling.job import take_run_scores

        take_run_scores(wb, project_id, model_run_id, Path(output), reporter)
    except Exception:  # noqa: BLE001 - the predictions are written and kept; the pool keeps its ranking
        log.warning("the predictions could not be handed to labelling project %s", project_id, exc_info=True)


def _model_run_spec(wb: Workbench, run_id: int) -> RunSpec:
    """The training spec of run ``run_id`` with its data files resolved (``resolve_spec``)."""
    with wb.db.session() as session:
        raw = session.scalar(select(Run.spec).where(Run.id == run_id))
    if raw is None:
        raise TrainingError(f"run {run_id}, whose model this job exports, no longer exists (it was deleted)",
                            "export another run")
    return resolve_spec(wb, RunSpec.from_dict(dict(raw)))[0]


def _training_of(wb: Workbench, run_id: int) -> Optional[dict[str, Any]]:
    """The model run's resolved spec, for an evaluation's baselines on its training split; None (the evaluation
    goes on without baselines) when the run's training data can no longer be found."""
    try:
        return _model_run_spec(wb, run_id).to_dict()
    except WorkbenchError as exc:
        log.warning("no baselines for this evaluation: the training data of run %s cannot be read (%s)", run_id, exc)
        return None


def resolve_model(wb: Workbench, run_id: int) -> ModelRef:
    """What a prediction needs of the model's run: its saved model, task, resolved hyper-parameters and labels.
    A run deleted since the job was queued, or one without a model folder, fails the job with a sentence."""
    with wb.db.session() as session:
        row = session.execute(select(Run.task, Run.output_dir).where(Run.id == run_id)).first()
    if row is None:
        raise TrainingError(f"run {run_id}, whose model this job uses, no longer exists (it was deleted)",
                            "queue the job again with another run's model")
    model_dir = Path(row.output_dir or "") / "model"
    if not row.output_dir or not model_dir.is_dir():
        raise TrainingError(f"run {run_id} has no saved model ({model_dir} is missing)",
                            "use a run that succeeded and still has its model folder")
    onnx_dir = latest_onnx_dir(wb.db, run_id)  # what an ONNX runtime serves (PredictSpec.runtime)
    return ModelRef(run_id=run_id, task=row.task, model_dir=str(model_dir),
                    hyperparameters=_json_file(model_dir.parent / "metrics.json").get("hyperparameters") or {},
                    labels=model_labels(model_dir), onnx_dir=str(onnx_dir) if onnx_dir else None)


def _json_file(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; ``{}`` when it is missing or unreadable (an older run wrote less)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def model_labels(model_dir: Path) -> tuple[str, ...]:
    """The class or tag names of a saved model in its own order (``config.json``'s ``id2label``)."""
    id2label = _json_file(model_dir / "config.json").get("id2label")
    if not isinstance(id2label, dict):
        return ()
    try:
        ordered = sorted(id2label.items(), key=lambda item: int(item[0]))
    except (TypeError, ValueError):
        return ()
    return tuple(str(label) for _, label in ordered)


def _stopped(wb: Workbench, run_id: int, attempt: int, reporter) -> int:
    """The work stopped at a boundary it can resume from: pruned (a sweep's trial), handed over (the worker is
    gone) or cancelled."""
    reporter.flush()
    if getattr(reporter, "pruned", False) and not reporter.orphaned:
        # The sweep tells Optuna; the worker's slot is free as soon as this process exits.
        queue.finish(wb.db, run_id, attempt, PRUNED, eta_seconds=None)
        log.info("run %s pruned at step %s", run_id, reporter.pruned_at)
        return EXIT_PRUNED
    if reporter.orphaned:
        log.warning("run %s: the worker is gone; stopped at a checkpoint for another worker to resume", run_id)
        return EXIT_ORPHANED
    if _is_rank_zero():
        queue.finish(wb.db, run_id, attempt, CANCELLED, eta_seconds=None)
    log.info("run %s cancelled at a checkpoint", run_id)
    return EXIT_CANCELLED


def _succeeded(wb: Workbench, run_id: int, attempt: int, reporter, output_dir: Path, result: Mapping[str, Any],
               kind: str) -> int:
    reporter.flush()
    if _is_rank_zero():
        with wb.db.session() as session:
            _record_artifacts(session, run_id, output_dir, kind)
        queue.finish(wb.db, run_id, attempt, SUCCEEDED, metrics=_final_metrics(result), progress=1.0,
                     eta_seconds=0.0)
    log.info("run %s succeeded", run_id)
    return EXIT_SUCCEEDED


def _record_failure(wb: Workbench, run_id: int, attempt: int, exc: BaseException,
                    spec: Optional[RunSpec | PredictSpec], output_dir: Path) -> None:
    """Record why this process failed. Under DDP any rank may: the one that crashed writes first (its
    peers only fail once it has exited and closed its connections), and ``queue.finish`` only ever
    writes while the run is active, so the first message stays. A rank that merely lost a peer records
    nothing: the launcher's summary names the rank that died (see ``jobs.queue.failures.describe_exit``)."""
    rank, world = _rank()
    if world > 1 and is_peer_loss(exc):
        log.warning("rank %d of %d: lost a peer process; the launcher reports which one failed", rank, world)
        return
    if isinstance(spec, RunSpec):
        batch_size, model = spec.train.batch_size, spec.model
    else:
        batch_size, model = getattr(spec, "batch_size", None), ""
    message = describe_exception(exc, batch_size=batch_size, model=model)
    if world > 1:
        message = f"rank {rank} of {world}: {message}"
    hint = getattr(exc, "hint", "")
    detail = (f"hint: {hint}\n\n" if hint else "") + log_tail(output_dir / PROCESS_LOG)
    queue.finish(wb.db, run_id, attempt, FAILED, error=message, eta_seconds=None, error_detail=detail)


def _real_training(*args, **kwargs):
    from jobs.training.engine import run_training  # torch is imported only in the training process

    return run_training(*args, **kwargs)


def _real_prediction(*args, **kwargs):
    from jobs.predict.job import run_prediction  # torch too, only in the job's process

    return run_prediction(*args, **kwargs)


def _real_export(*args, **kwargs):
    from jobs.export.job import run_export  # torch and onnx, only in the job's process

    return run_export(*args, **kwargs)


def _real_label_job(*args, **kwargs):
    from jobs.labelling.job import run_label_job  # scikit-learn, and torch when texts are to be embedded

    return run_label_job(*args, **kwargs)


def _real_evaluation(*args, **kwargs):
    from jobs.predict.evaluate import run_evaluation

    return run_evaluation(*args, **kwargs)


def main(argv: Optional[list[str]] = None, train_fn: Optional[TrainFn] = None, *,
         predict_fn: Optional[JobFn] = None, evaluate_fn: Optional[JobFn] = None,
         export_fn: Optional[JobFn] = None, label_fn: Optional[JobFn] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.process.run_job", description=__doc__.splitlines()[0])
    parser.add_argument("run_id", type=int)
    parser.add_argument("--attempt", type=int, required=True)
    args, _ = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    launched = "LOCAL_RANK" in os.environ  # one rank of several, started by torchrun / accelerate launch
    if launched and not die_with_launcher():
        log.error("run %s attempt %s: the launcher is gone before training started; exiting", args.run_id,
                  args.attempt)
        return EXIT_ORPHANED
    settings = Settings.from_env()
    # The worker already migrated the schema; N training processes need not check it again.
    wb = Workbench(settings, Database(settings.database_url, migrate=False))
    try:
        code = execute(wb, args.run_id, args.attempt, train_fn or _real_training, predict_fn=predict_fn,
                       evaluate_fn=evaluate_fn, export_fn=export_fn, label_fn=label_fn)
    finally:
        wb.close()
    # A rank's non-zero exit makes the launcher tear the others down and print a failure report; a
    # cancelled or handed-over run is no failure, and its outcome is in the database already.
    return 0 if launched and code in (EXIT_CANCELLED, EXIT_ORPHANED) else code


if __name__ == "__main__":
    exit_process(main())
