"""The training subprocess: ``python -m jobs.run_job RUN_ID --attempt N``.

It opens the database from the ``WORKBENCH_*`` environment the worker passed
down, resolves the run's data files and parent model, trains through
``jobs.engine.run_training`` with a database-backed reporter, and records the
outcome itself (conditional on still owning the attempt). The exit code tells
the worker what happened; a process that dies without recording anything (a
segfault, the OOM killer) is recorded by the worker from its exit signal.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from sqlalchemy import delete, select, tuple_, update

from jobs import queue
from jobs.failures import describe_exception, is_peer_loss, log_tail
from jobs.progress import Cancelled
from jobs.runner import PROCESS_LOG, die_with_launcher
from jobs.spec import RunSpec
from jobs.states import ACTIVE
from storage.context import Workbench
from storage.datasets.lookup import dataset_files
from storage.db import Database
from storage.errors import TrainingError
from storage.models import CANCELLED, FAILED, PRUNED, SUCCEEDED, Artifact, MetricPoint, Run
from storage.settings import Settings

log = logging.getLogger("jobs.run_job")

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_CANCELLED, EXIT_ORPHANED, EXIT_PRUNED = 0, 2, 3, 4, 5
WRITE_INTERVAL_S = 1.0

TrainFn = Callable[..., Mapping[str, Any]]


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
            if os.getppid() != self._parent:
                # The worker died and PDEATHSIG was unavailable: stop at a checkpoint and leave the run
                # to whichever worker takes over its lease.
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


def _record_artifacts(session, run_id: int, output_dir: Path) -> None:
    kinds = {"model": "model", "metrics.json": "metrics", "tables.json": "tables",
             "predictions.jsonl": "predictions", "train.log": "log", "checkpoints": "checkpoint"}
    session.execute(delete(Artifact).where(Artifact.run_id == run_id))
    for name, kind in kinds.items():
        path = output_dir / name
        if path.exists():
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
            session.add(Artifact(run_id=run_id, kind=kind, path=str(path), size_bytes=size))


def _final_metrics(result: Mapping[str, Any]) -> dict[str, Any]:
    inner = result.get("metrics") if isinstance(result, Mapping) else None
    return dict(inner) if isinstance(inner, Mapping) else dict(result or {})


def execute(wb: Workbench, run_id: int, attempt: int, train_fn: TrainFn) -> int:
    """Run one attempt of one run and record its outcome; returns the process exit code."""
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        if run is None or run.attempts != attempt:
            log.error("run %s attempt %s is not ours any more; nothing to do", run_id, attempt)
            return EXIT_ORPHANED
        raw_spec, output_dir = dict(run.spec), Path(run.output_dir)
        sweep_id, trial_number = run.sweep_id, run.trial_number
    output_dir.mkdir(parents=True, exist_ok=True)
    if _is_rank_zero():
        discard_incomplete_checkpoints(output_dir)
    reporter = DbReporter(wb.db, run_id, attempt)
    if sweep_id is not None and trial_number is not None:
        from jobs.sweeps import trial_reporter

        reporter = trial_reporter(wb, reporter, sweep_id, trial_number, enabled=_is_rank_zero())
    spec = None
    try:
        spec = RunSpec.from_dict(raw_spec)
        spec, init_model = resolve_spec(wb, spec)
        log.info("run %s attempt %s: training %s on %s", run_id, attempt, spec.model, spec.data.train_path)
        result = train_fn(spec, output_dir, reporter, device=wb.settings.device,
                          init_model_path=str(init_model) if init_model else None)
    except Cancelled:
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
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a sentence on the run
        log.exception("run %s failed", run_id)
        reporter.flush()
        _record_failure(wb, run_id, attempt, exc, spec, output_dir)
        return EXIT_FAILED
    reporter.flush()
    if _is_rank_zero():
        with wb.db.session() as session:
            _record_artifacts(session, run_id, output_dir)
        queue.finish(wb.db, run_id, attempt, SUCCEEDED, metrics=_final_metrics(result), progress=1.0,
                     eta_seconds=0.0)
    log.info("run %s succeeded", run_id)
    return EXIT_SUCCEEDED


def _record_failure(wb: Workbench, run_id: int, attempt: int, exc: BaseException, spec: Optional[RunSpec],
                    output_dir: Path) -> None:
    """Record why this process failed. Under DDP any rank may: the one that crashed writes first (its
    peers only fail once it has exited and closed its connections), and ``queue.finish`` only ever
    writes while the run is active, so the first message stays. A rank that merely lost a peer records
    nothing: the launcher's summary names the rank that died (see ``jobs.failures.describe_exit``)."""
    rank, world = _rank()
    if world > 1 and is_peer_loss(exc):
        log.warning("rank %d of %d: lost a peer process; the launcher reports which one failed", rank, world)
        return
    batch_size = spec.train.batch_size if spec else None
    message = describe_exception(exc, batch_size=batch_size, model=spec.model if spec else "")
    if world > 1:
        message = f"rank {rank} of {world}: {message}"
    hint = getattr(exc, "hint", "")
    detail = (f"hint: {hint}\n\n" if hint else "") + log_tail(output_dir / PROCESS_LOG)
    queue.finish(wb.db, run_id, attempt, FAILED, error=message, eta_seconds=None, error_detail=detail)


def _real_training(*args, **kwargs):
    from jobs.engine import run_training  # torch is imported only in the training process

    return run_training(*args, **kwargs)


def main(argv: Optional[list[str]] = None, train_fn: Optional[TrainFn] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.run_job", description=__doc__.splitlines()[0])
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
        code = execute(wb, args.run_id, args.attempt, train_fn or _real_training)
    finally:
        wb.close()
    # A rank's non-zero exit makes the launcher tear the others down and print a failure report; a
    # cancelled or handed-over run is no failure, and its outcome is in the database already.
    return 0 if launched and code in (EXIT_CANCELLED, EXIT_ORPHANED) else code


if __name__ == "__main__":
    sys.exit(main())
