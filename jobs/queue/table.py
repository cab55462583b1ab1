"""The runs table is the queue: submit, claim, heartbeat, lease expiry, finish.

Every change of status here is ONE conditional UPDATE whose WHERE clause
repeats the expected current status (and, for a running job, the attempt that
owns it); the row count says whether this caller won. That is what makes two
workers on one SQLite file, or N machines on one PostgreSQL server, execute
each run exactly once. A SELECT-then-UPDATE claim double-claimed 684 of 1000
jobs under two workers when measured, so there is none here.

Times are naive UTC taken from the caller's clock (``now=``), so that tests can
move time; machines sharing a PostgreSQL queue need synchronised clocks (NTP).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import socket
from pathlib import Path
from typing import Any, Iterable, Optional

from sqlalchemy import delete, select, update

from jobs.specs.run import RunSpec
from jobs.queue.states import ACTIVE, check_transition, sources_of
from storage.db import Database
from storage.errors import InvalidState, NotFound
from storage.models import (CANCELLED, CANCELLING, FAILED, KIND_TRAIN, LABEL_KINDS, QUEUED, RUN_KINDS, RUNNING,
                            LabelProject, Run, Sweep, Worker, utcnow)

log = logging.getLogger(__name__)

# A run back in the queue shows no step of the attempt that stopped: the next attempt resumes from a
# checkpoint (an earlier step) and reports where it is once it runs.
NOT_STARTED: dict[str, Any] = {"step": 0, "progress": 0.0, "epoch": 0.0, "eta_seconds": None,
                               "phase": None, "phase_done": None, "phase_total": None}
# A finished run is in no phase any more.
NO_PHASE: dict[str, Any] = {"phase": None, "phase_done": None, "phase_total": None}


@dataclasses.dataclass(frozen=True)
class ClaimedRun:
    id: int
    attempt: int
    spec: dict[str, Any]
    output_dir: str
    kind: str = KIND_TRAIN  # storage.models.RUN_KINDS: what the spec describes


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def submit(db: Database, spec: RunSpec, runs_dir: Path, *, parent_run_id: Optional[int] = None,
           priority: int = 0, sweep_id: Optional[int] = None, trial_number: Optional[int] = None,
           estimate: Optional[dict[str, Any]] = None, owner_id: Optional[int] = None) -> int:
    """Insert a queued run for ``spec``; its artifacts will live in ``runs_dir/<id>``. A sweep's trial
    carries its sweep and trial number from the start, so no worker can claim it unlinked, and the
    sweep's ``n_trials`` read in the same INSERT: the database refuses a trial past it (IntegrityError).
    ``estimate`` is the time estimated at submit, kept to compare with the actual time later."""
    budget = (select(Sweep.n_trials).where(Sweep.id == sweep_id).scalar_subquery()
              if sweep_id is not None else None)
    if sweep_id is not None and owner_id is None:  # a trial is its sweep's owner's
        owner_id = select(Sweep.owner_id).where(Sweep.id == sweep_id).scalar_subquery()
    with db.session() as session:
        return add_queued_run(session, spec, runs_dir, parent_run_id=parent_run_id, priority=priority,
                              sweep_id=sweep_id, trial_number=trial_number, sweep_n_trials=budget,
                              estimate=estimate, owner_id=owner_id).id


def add_queued_run(session: Any, spec: RunSpec, runs_dir: Path, **columns: Any) -> Run:
    """Add a queued training run for ``spec`` to ``session`` (flushed: it has its id and its folder under
    ``runs_dir``), with ``columns`` set; ``submit`` and a seed group's runs, inserted together, use it."""
    run = Run(name=spec.name, task=spec.task, model=spec.model, status=QUEUED, spec=spec.to_dict(),
              dataset_id=spec.data.dataset_id or None, **columns)
    session.add(run)
    session.flush()
    run.output_dir = str(Path(runs_dir) / str(run.id))
    return run


def submit_job(db: Database, kind: str, spec: dict[str, Any], runs_dir: Path, *, parent_run_id: int, task: str,
               model: str, name: str = "", dataset_id: Optional[str] = None, priority: int = 0,
               owner_id: Optional[int] = None) -> int:
    """Insert a queued job of another kind than training (a prediction or an evaluation with a
    ``jobs.predict.spec.PredictSpec`` as ``spec``) that puts run ``parent_run_id``'s model to work.
    It is claimed, leased, cancelled and resumed like any run; its files live in ``runs_dir/<id>``."""
    if kind not in RUN_KINDS or kind == KIND_TRAIN:
        raise ValueError(f"submit_job queues prediction or evaluation jobs, not {kind!r}")
    with db.session() as session:
        run = Run(name=name, kind=kind, task=task, model=model, status=QUEUED, spec=dict(spec),
                  dataset_id=dataset_id, parent_run_id=parent_run_id, priority=priority, owner_id=owner_id)
        session.add(run)
        session.flush()
        run.output_dir = str(Path(runs_dir) / str(run.id))
        return run.id


def submit_label_job(db: Database, kind: str, project_id: int, runs_dir: Path) -> int:
    """Insert a queued job of a labelling project (``LABEL_KINDS``: embed its pool, or refit its fast model and
    rank the pool again); its spec and ``label_project_id`` name the project. Returns the job's id."""
    if kind not in LABEL_KINDS:
        raise ValueError(f"submit_label_job queues {' or '.join(LABEL_KINDS)} jobs, not {kind!r}")
    with db.session() as session:
        project = session.get(LabelProject, project_id)
        if project is None:
            raise NotFound(f"labelling project {project_id} does not exist")
        run = Run(name=f"{kind} of project {project_id}", kind=kind, task="text-classification",
                  model=project.model, status=QUEUED, spec={"project_id": project_id}, label_project_id=project_id,
                  owner_id=project.owner_id)
        session.add(run)
        session.flush()
        run.output_dir = str(Path(runs_dir) / str(run.id))
        return run.id


def claim(db: Database, worker_id: str, now: Optional[dt.datetime] = None,
          only: Optional[Iterable[int]] = None, kinds: Optional[Iterable[str]] = None) -> Optional[ClaimedRun]:
    """Atomically take the best queued run for ``worker_id`` (among ``only`` when given, of one of ``kinds``
    when given: the short-job lane's claim), or None."""
    now = now or utcnow()
    pick = select(Run.id).where(Run.status == QUEUED)
    if only is not None:
        pick = pick.where(Run.id.in_(list(only)))
    if kinds is not None:
        pick = pick.where(Run.kind.in_(list(kinds)))
    pick = pick.order_by(Run.priority.desc(), Run.id).limit(1)
    if not db.is_sqlite:
        # Concurrent claimers skip the row another transaction holds instead of waiting for it.
        pick = pick.with_for_update(skip_locked=True)
    stmt = (update(Run)
            .where(Run.id == pick.scalar_subquery(), Run.status == QUEUED)
            .values(status=RUNNING, worker_id=worker_id, attempts=Run.attempts + 1, heartbeat_at=now,
                    started_at=now, finished_at=None, pid=None, error=None, error_detail=None)
            .returning(Run.id, Run.attempts, Run.spec, Run.output_dir, Run.kind)
            .execution_options(synchronize_session=False))
    with db.session() as session:
        row = session.execute(stmt).first()
    if row is None:
        return None
    return ClaimedRun(id=row.id, attempt=row.attempts, spec=row.spec, output_dir=row.output_dir, kind=row.kind)


def set_launched(db: Database, run_id: int, attempt: int, pid: int, device: str) -> None:
    with db.session() as session:
        session.execute(update(Run).where(Run.id == run_id, Run.attempts == attempt)
                        .values(pid=pid, device=device).execution_options(synchronize_session=False))


def heartbeat(db: Database, worker_id: str, run_ids: Iterable[int], now: Optional[dt.datetime] = None) -> int:
    """Renew the lease of the given runs this worker still owns; returns how many were renewed."""
    ids = list(run_ids)
    if not ids:
        return 0
    with db.session() as session:
        result = session.execute(
            update(Run).where(Run.id.in_(ids), Run.worker_id == worker_id, Run.status.in_(ACTIVE))
            .values(heartbeat_at=now or utcnow()).execution_options(synchronize_session=False))
        return result.rowcount


def reclaim_expired(db: Database, lease_seconds: float, now: Optional[dt.datetime],
                    max_attempts: int) -> list[tuple[int, str]]:
    """Runs whose worker stopped heart-beating: back to the queue (resumed from their checkpoint by
    whoever claims them), cancelled when a cancel was pending, failed after ``max_attempts`` starts
    (``WORKBENCH_MAX_ATTEMPTS``: a run that kills its worker every time cannot loop forever).

    Returns ``(run_id, new_status)`` for each run this caller moved; a run another worker moved
    first is skipped because each UPDATE re-checks the stale heartbeat.
    """
    now = now or utcnow()
    cutoff = now - dt.timedelta(seconds=lease_seconds)
    with db.session() as session:
        stale = session.execute(select(Run.id, Run.status, Run.attempts)
                                .where(Run.status.in_(ACTIVE), Run.heartbeat_at < cutoff)).all()
    moved = []
    for run_id, status, attempts in stale:
        if status == CANCELLING:
            new, values = CANCELLED, {"finished_at": now, "error": None, **NO_PHASE}
        elif attempts >= max_attempts:
            new, values = FAILED, {
                "finished_at": now, **NO_PHASE,
                "error": f"the worker running this run stopped responding {attempts} times — "
                         "see the log; retry it once the cause is fixed"}
        else:
            new, values = QUEUED, dict(NOT_STARTED)
        check_transition(run_id, status, new)
        with db.session() as session:
            result = session.execute(
                update(Run).where(Run.id == run_id, Run.status == status, Run.attempts == attempts,
                                  Run.heartbeat_at < cutoff)
                .values(status=new, worker_id=None, pid=None, **values)
                .execution_options(synchronize_session=False))
        if result.rowcount == 1:
            log.warning("run %s: no heartbeat for %.0f s, %s -> %s", run_id, lease_seconds, status, new)
            moved.append((run_id, new))
    return moved


def finish(db: Database, run_id: int, attempt: int, status: str, **values: Any) -> bool:
    """Set a final status for the attempt that owns the run. False when the run moved on meanwhile
    (its lease expired and another attempt owns it, or a user acted) — the caller then changes nothing."""
    values.setdefault("finished_at", utcnow())
    values = {**NO_PHASE, **values}
    with db.session() as session:
        result = session.execute(
            update(Run).where(Run.id == run_id, Run.attempts == attempt, Run.status.in_(sources_of(status)),
                              Run.status.in_(ACTIVE))
            .values(status=status, pid=None, **values).execution_options(synchronize_session=False))
        return result.rowcount == 1


def release(db: Database, run_id: int, attempt: int, current: str, new: str) -> bool:
    """A worker that shuts down hands a run back (queued, or cancelled if a cancel was pending)."""
    check_transition(run_id, current, new)
    values: dict[str, Any] = {"finished_at": utcnow(), **NO_PHASE} if new == CANCELLED else dict(NOT_STARTED)
    with db.session() as session:
        result = session.execute(
            update(Run).where(Run.id == run_id, Run.attempts == attempt, Run.status == current)
            .values(status=new, worker_id=None, pid=None, **values).execution_options(synchronize_session=False))
        return result.rowcount == 1


def request_cancel(db: Database, run_id: int) -> str:
    """Cancel a queued run at once, or ask a running one to stop at its next step. Returns the new status."""
    with db.session() as session:
        current = session.scalar(select(Run.status).where(Run.id == run_id))
        if current is None:
            raise NotFound(f"run {run_id} does not exist")
        if current == CANCELLING:
            return current
        new = CANCELLED if current == QUEUED else CANCELLING
        check_transition(run_id, current, new)
        values: dict[str, Any] = {"status": new, "cancel_requested": True}
        if new == CANCELLED:
            values["finished_at"] = utcnow()
        result = session.execute(update(Run).where(Run.id == run_id, Run.status == current).values(**values)
                                 .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        # The run changed status between our read and our write (a worker claimed or finished it): decide again.
        return request_cancel(db, run_id)
    return new


def requeue(db: Database, run_id: int) -> None:
    """Retry: a failed or cancelled run goes back to the queue with a fresh attempt budget."""
    with db.session() as session:
        current = session.scalar(select(Run.status).where(Run.id == run_id))
        if current is None:
            raise NotFound(f"run {run_id} does not exist")
        if current not in (FAILED, CANCELLED):
            # running -> queued is legal for a dead worker's lease, not for a user's retry.
            raise InvalidState(f"cannot retry run {run_id}: it is {current}; only failed or cancelled runs "
                               "can be retried (clone a succeeded one)")
        result = session.execute(
            update(Run).where(Run.id == run_id, Run.status == current)
            .values(status=QUEUED, attempts=0, cancel_requested=False, error=None, error_detail=None,
                    finished_at=None, worker_id=None, pid=None, **NOT_STARTED)
            .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        raise NotFound(f"run {run_id} changed while it was being retried; try again")


def register_worker(db: Database, worker_id: str, max_jobs: int, gpus: str, now: Optional[dt.datetime] = None,
                    short_jobs: int = 0) -> None:
    """Record a live worker: its slots (``max_jobs``, and ``short_jobs`` in its short-job lane) and GPUs."""
    now = now or utcnow()
    with db.session() as session:
        # Workers killed without unregistering leave a row behind; forget those silent for a day.
        session.execute(delete(Worker).where(Worker.heartbeat_at < now - dt.timedelta(days=1)))
        session.merge(Worker(id=worker_id, hostname=socket.gethostname(), pid=os.getpid(), max_jobs=max_jobs,
                             short_jobs=short_jobs, gpus=gpus, started_at=now, heartbeat_at=now))


def worker_heartbeat(db: Database, worker_id: str, now: Optional[dt.datetime] = None) -> None:
    with db.session() as session:
        session.execute(update(Worker).where(Worker.id == worker_id).values(heartbeat_at=now or utcnow())
                        .execution_options(synchronize_session=False))


def unregister_worker(db: Database, worker_id: str) -> None:
    with db.session() as session:
        session.execute(delete(Worker).where(Worker.id == worker_id))


def live_workers(db: Database, within_seconds: float, now: Optional[dt.datetime] = None) -> int:
    """How many workers sent a heartbeat in the last ``within_seconds``."""
    cutoff = (now or utcnow()) - dt.timedelta(seconds=within_seconds)
    with db.session() as session:
        return len(session.scalars(select(Worker.id).where(Worker.heartbeat_at >= cutoff)).all())
