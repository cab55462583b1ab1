"""Sweeps on the queue: Optuna asks, the queue runs, Optuna is told.

Every trial is a normal queued run (``Run.sweep_id``, ``Run.trial_number``), so any
worker runs it, and crash resume, cancel, logs and curves are those of a run. The
study lives in Optuna's own tables in the workbench's database (RDB storage on
the same URL), so a restart loses nothing.

Who asks Optuna for the next trial? ``advance(...)``: every worker calls it once
per loop iteration for each open sweep (``SweepDriver.advance_all``), and
``create``/``cancel`` call it once. It

1. takes the sweep's short lease (one conditional UPDATE on the sweep row; whoever
   loses skips the sweep this time), so only one process asks at a time, and renews
   it while it works (a pass that lost it stops);
2. tells Optuna the outcome of every trial whose run ended: succeeded -> its final
   metric, pruned -> PRUNED, failed or cancelled -> FAIL. A run that a dead worker
   handed back to the queue is not ended, so its retry is the same trial, told once;
3. stops the sweep (no more trials, the queued and running ones cancelled, then
   ``failed`` with the error) when its first ``FAIL_FAST_TRIALS`` ended trials all
   failed with the same error: a wrong data file or model fails every trial alike;
4. re-creates the run of a trial that was asked for but has none (a process died
   between ``ask`` and the insert) — restart-safe without a two-phase protocol;
5. asks for new trials until ``parallelism`` are queued or running, up to ``n_trials``,
   at most ``ASKS_PER_ADVANCE`` per pass (the next passes ask for the rest);
6. marks the sweep finished (or cancelled, or failed) once every trial ended.

The database, not the lease, keeps the counts exact: a unique index on (sweep_id,
trial_number) stops two processes from creating two runs for one trial, and a CHECK
with a composite foreign key (``storage.models.TRIAL_IN_BUDGET``) refuses a run for
trial ``n_trials`` or later. A pass whose insert is refused that way treats the sweep
as full: it tells Optuna the extra trial failed and asks no more.

Optuna's RDB storage keeps its schema version in ``alembic_version``, the table the
workbench's own migrations use: the storage is opened with its compatibility check
off (the workbench pins the Optuna major version instead) and its tables are
created under the workbench's schema lock.
"""
from __future__ import annotations

import datetime as dt
import enum
import logging
import time
import weakref
from typing import TYPE_CHECKING, Any, Mapping, Optional

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError

from jobs.queue import table as queue
from jobs.queue.states import ACTIVE
from jobs.specs.sweep import ParamSpec, SweepSpec, apply_params
from storage.db import Database
from storage.errors import InvalidState
from storage.models import (FAILED, PRUNED, QUEUED, SUCCEEDED, SWEEP_CANCELLED, SWEEP_CANCELLING, SWEEP_FAILED,
                            SWEEP_FINISHED, SWEEP_RUNNING, Run, Sweep, utcnow)

if TYPE_CHECKING:
    import optuna

    from storage.context import Workbench

log = logging.getLogger(__name__)

LEASE_SECONDS = 60.0
# Asking is slow (TPE fits on every trial so far): a sweep with parallelism 500 would keep one pass, and the
# `sweep` command that creates it, asking for minutes. The next passes (one per worker loop) ask for the rest.
ASKS_PER_ADVANCE = 16
# The first trials to end, all failed with one error: the sweep stops instead of failing every trial alike.
FAIL_FAST_TRIALS = 3
OPEN = (SWEEP_RUNNING, SWEEP_CANCELLING)
NOT_ENDED = (QUEUED, *ACTIVE)


# -- Optuna objects, rebuilt from the sweep spec (samplers and pruners are not stored by Optuna) ----------

# One Optuna storage (engine and pool) per open Database, dropped with it: the Sweeps view reads the
# study on every tick, and a storage per call would build an engine and check Optuna's tables each time.
_STORAGES: "weakref.WeakKeyDictionary[Database, Any]" = weakref.WeakKeyDictionary()


def open_storage(db: Database) -> "optuna.storages.RDBStorage":
    """Optuna's RDB storage on the workbench's database URL (one per ``db``); its tables are created on first use."""
    storage = _STORAGES.get(db)
    if storage is None:
        storage = _STORAGES[db] = _new_storage(db)
    return storage


def _new_storage(db: Database) -> "optuna.storages.RDBStorage":
    import optuna
    from storage.db import _MIGRATING_IN_THIS_PROCESS, _lock_schema, _sqlite_file_lock

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    kwargs: dict[str, Any] = ({"connect_args": {"timeout": 30}} if db.is_sqlite
                              else {"pool_pre_ping": True})
    # Processes starting together on a fresh database would race to create Optuna's tables.
    with _MIGRATING_IN_THIS_PROCESS, _sqlite_file_lock(db.engine), db.engine.begin() as connection:
        _lock_schema(connection)
        return optuna.storages.RDBStorage(db.url, engine_kwargs=kwargs, skip_compatibility_check=True)


def distributions(space: Mapping[str, ParamSpec]) -> dict[str, "optuna.distributions.BaseDistribution"]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out = {}
    for name, param in space.items():
        if param.kind == "categorical":
            out[name] = CategoricalDistribution(list(param.choices or []))
        elif param.kind == "int":
            out[name] = IntDistribution(int(param.low), int(param.high), log=param.log)
        else:
            out[name] = FloatDistribution(float(param.low), float(param.high), log=param.log)
    return out


def make_sampler(spec: SweepSpec, trial_number: int) -> "optuna.samplers.BaseSampler":
    """TPE with ``constant_liar`` so that trials asked while others run get distinct parameters. Seeded per
    trial: a sampler re-created with the same seed for every ask would repeat its random start-up points.
    The seed is hashed, not ``seed + n``: Mersenne Twister's first draws for seeds 0 and 3 are 0.549 and
    0.551, which made trials 0 and 3 nearly the same point."""
    import hashlib

    import optuna

    digest = hashlib.sha256(f"{spec.seed}:{trial_number}".encode()).digest()
    return optuna.samplers.TPESampler(seed=int.from_bytes(digest[:4], "big"), constant_liar=True,
                                      n_startup_trials=max(2, min(10, spec.n_trials // 3)))


def make_pruner(spec: SweepSpec) -> "optuna.pruners.BasePruner":
    import optuna

    if spec.pruner == "median":
        # Half the first wave decides nothing: a median of one or two finished trials is noise.
        return optuna.pruners.MedianPruner(n_startup_trials=max(2, spec.parallelism), n_warmup_steps=0)
    if spec.pruner == "successive-halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def load_study(storage, study_name: str, spec: SweepSpec, trial_number: int = 0) -> "optuna.Study":
    import optuna

    return optuna.load_study(study_name=study_name, storage=storage, sampler=make_sampler(spec, trial_number),
                             pruner=make_pruner(spec))


def create_study(storage, study_name: str, spec: SweepSpec) -> None:
    import optuna

    optuna.create_study(study_name=study_name, storage=storage, direction=spec.direction, load_if_exists=True)


# -- the sweep lease -------------------------------------------------------------------------------------

def _take_lease(db: Database, sweep_id: int, owner: str, now: dt.datetime) -> bool:
    with db.session() as session:
        result = session.execute(
            update(Sweep).where(Sweep.id == sweep_id, Sweep.status.in_(OPEN),
                                or_(Sweep.lock_owner.is_(None), Sweep.lock_until < now, Sweep.lock_owner == owner))
            .values(lock_owner=owner, lock_until=now + dt.timedelta(seconds=LEASE_SECONDS))
            .execution_options(synchronize_session=False))
        return result.rowcount == 1


def _drop_lease(db: Database, sweep_id: int, owner: str) -> None:
    with db.session() as session:
        session.execute(update(Sweep).where(Sweep.id == sweep_id, Sweep.lock_owner == owner)
                        .values(lock_owner=None, lock_until=None).execution_options(synchronize_session=False))


class LeaseLost(Exception):
    """Another process took the sweep's lease while this pass worked: it does the rest."""


class Lease:
    """The lease one pass holds, renewed before it runs out. Times follow the caller's clock (``now``, which
    tests move) plus the time this pass has taken."""

    def __init__(self, db: Database, sweep_id: int, owner: str, now: dt.datetime):
        self.db, self.sweep_id, self.owner = db, sweep_id, owner
        self._now, self._started = now, time.monotonic()
        self._renewed = self._started

    def keep(self) -> None:
        """Renew the lease when a quarter of it has passed; ``LeaseLost`` when another process holds it now."""
        if time.monotonic() - self._renewed < LEASE_SECONDS / 4:
            return
        now = self._now + dt.timedelta(seconds=time.monotonic() - self._started)
        with self.db.session() as session:
            result = session.execute(
                update(Sweep).where(Sweep.id == self.sweep_id, Sweep.lock_owner == self.owner)
                .values(lock_until=now + dt.timedelta(seconds=LEASE_SECONDS))
                .execution_options(synchronize_session=False))
        if result.rowcount != 1:
            raise LeaseLost(f"sweep {self.sweep_id}: {self.owner} lost the lease")
        self._renewed = time.monotonic()


# -- one step of a sweep ---------------------------------------------------------------------------------

def advance(wb: "Workbench", storage, sweep_id: int, owner: str, now: Optional[dt.datetime] = None) -> bool:
    """Tell ended trials, re-create lost ones, top the sweep up, finish it. False when another process
    holds the sweep's lease (it does the same work)."""
    now = now or utcnow()
    if not _take_lease(wb.db, sweep_id, owner, now):
        return False
    try:
        _advance_locked(wb, storage, sweep_id, now, Lease(wb.db, sweep_id, owner, now))
    except LeaseLost:
        log.warning("sweep %s: the lease ran out during a pass; its new holder goes on", sweep_id)
    finally:
        _drop_lease(wb.db, sweep_id, owner)
    return True


class Created(enum.Enum):
    """What inserting a trial's run did: created it, found it created by another process, or was refused
    because the trial number is past the sweep's ``n_trials`` (the sweep is full)."""

    CREATED = "created"
    EXISTS = "exists"
    FULL = "full"


def _advance_locked(wb: "Workbench", storage, sweep_id: int, now: dt.datetime, lease: Optional[Lease] = None) -> None:
    from optuna.trial import TrialState

    keep = lease.keep if lease is not None else (lambda: None)
    with wb.db.session() as session:
        sweep = session.get(Sweep, sweep_id)
        spec, study_name, status = SweepSpec.from_dict(sweep.spec), sweep.study_name, sweep.status
        stopped = sweep.error is not None
        runs = {r.trial_number: r for r in session.execute(
            select(Run.id, Run.trial_number, Run.status, Run.metrics, Run.error)
            .where(Run.sweep_id == sweep_id)).all()}
    study = load_study(storage, study_name, spec)
    trials = study.get_trials(deepcopy=False)
    # Counted from the same snapshot the trials are told from: a run that ends after the snapshot still
    # counts as active, so the sweep cannot finish before its trial is told (next pass).
    active = sum(1 for r in runs.values() if r.status in NOT_ENDED)
    if status == SWEEP_RUNNING:
        reason = _fails_alike(runs.values())
        if reason and _stop(wb, sweep_id, reason):
            status, stopped = SWEEP_CANCELLING, True
    full = False
    for trial in trials:
        run = runs.get(trial.number)
        if trial.state != TrialState.RUNNING:
            continue  # finished and told, or enqueued (WAITING) and handed out by the next ask
        keep()
        if run is None and status != SWEEP_RUNNING:
            study.tell(trial.number, state=TrialState.FAIL)  # asked, never queued, and no trial starts now
        elif run is None:
            if _create_trial_run(wb, sweep_id, spec, trial.number, trial.params) is Created.FULL:
                study.tell(trial.number, state=TrialState.FAIL)  # asked past the budget: it has no place
                full = True
            else:
                active += 1
        elif run.status not in NOT_ENDED:
            _tell(study, trial.number, run.status, run.metrics or {}, spec.metric)
    asked = sum(1 for t in trials if t.state != TrialState.WAITING)
    asks = 0
    while (status == SWEEP_RUNNING and not full and asked < spec.n_trials and active < spec.parallelism
           and asks < ASKS_PER_ADVANCE):
        keep()
        trial = load_study(storage, study_name, spec, trial_number=asked).ask(distributions(spec.space))
        asked, asks = asked + 1, asks + 1
        if _create_trial_run(wb, sweep_id, spec, trial.number, trial.params) is Created.FULL:
            # Another process asked meanwhile (this pass's snapshot is stale): the trial has no place.
            study.tell(trial.number, state=TrialState.FAIL)
            full = True
        else:
            active += 1
    # Not on `full`: this pass's snapshot misses the other asker's runs; the next pass counts them.
    if active == 0 and (status == SWEEP_CANCELLING or asked >= spec.n_trials):
        final = SWEEP_FAILED if stopped else SWEEP_CANCELLED if status == SWEEP_CANCELLING else SWEEP_FINISHED
        with wb.db.session() as session:
            session.execute(update(Sweep).where(Sweep.id == sweep_id, Sweep.status == status)
                            .values(status=final, finished_at=now).execution_options(synchronize_session=False))
        log.info("sweep %s: %s", sweep_id, final)


def _fails_alike(runs) -> Optional[str]:
    """Why the sweep should stop: its first ended trials (at least ``FAIL_FAST_TRIALS``) all failed with one
    and the same error. None while fewer ended, or any ended otherwise."""
    ended = [r for r in runs if r.status not in NOT_ENDED]
    if len(ended) < FAIL_FAST_TRIALS:
        return None
    errors = {r.error for r in ended if r.status == FAILED}
    if len(errors) != 1 or any(r.status != FAILED for r in ended) or not next(iter(errors)):
        return None
    return (f"stopped: its first {len(ended)} trials all failed with the same error, so the others would "
            f"too — {next(iter(errors))}")


def _stop(wb: "Workbench", sweep_id: int, reason: str) -> bool:
    """Ask for no more trials and cancel the queued and running ones; the sweep ends failed with ``reason``."""
    with wb.db.session() as session:
        result = session.execute(update(Sweep).where(Sweep.id == sweep_id, Sweep.status == SWEEP_RUNNING)
                                 .values(status=SWEEP_CANCELLING, error=reason)
                                 .execution_options(synchronize_session=False))
        if result.rowcount != 1:
            return False
        waiting = list(session.scalars(select(Run.id).where(Run.sweep_id == sweep_id,
                                                            Run.status.in_(NOT_ENDED))))
    for run_id in waiting:
        try:
            queue.request_cancel(wb.db, run_id)
        except InvalidState:
            pass  # it ended meanwhile
    log.warning("sweep %s %s", sweep_id, reason)
    return True


def _tell(study, number: int, run_status: str, metrics: Mapping[str, Any], metric: str) -> None:
    from optuna.trial import TrialState

    value = metrics.get(metric)
    if run_status == SUCCEEDED and isinstance(value, (int, float)):
        study.tell(number, float(value))
    elif run_status == PRUNED:
        study.tell(number, state=TrialState.PRUNED)
    else:
        if run_status == SUCCEEDED:
            log.warning("trial %s succeeded without the metric %r; told as failed", number, metric)
        study.tell(number, state=TrialState.FAIL)
    log.info("trial %s: told %s", number, run_status)


def trial_name(sweep_id: int, number: int) -> str:
    """A trial run's name, ``sweep 3 #5``: short, so tables keep room for the parameters and metrics, which the
    views show in their own columns; the Runs table's search for it lists the sweep's trials together."""
    return f"sweep {sweep_id} #{number}"


def _create_trial_run(wb: "Workbench", sweep_id: int, spec: SweepSpec, number: int,
                      params: Mapping[str, Any]) -> Created:
    run_spec = apply_params(spec.base, params, name=trial_name(sweep_id, number))
    try:
        queue.submit(wb.db, run_spec, wb.settings.runs_dir, sweep_id=sweep_id, trial_number=number)
        return Created.CREATED
    except IntegrityError:
        with wb.db.session() as session:
            exists = session.scalar(select(Run.id).where(Run.sweep_id == sweep_id, Run.trial_number == number))
            budget = session.scalar(select(Sweep.n_trials).where(Sweep.id == sweep_id))
        if exists is not None:
            log.info("sweep %s trial %s: another process created its run first", sweep_id, number)
            return Created.EXISTS
        if budget is not None and number >= budget:
            log.warning("sweep %s trial %s: refused, the sweep has its %s trials", sweep_id, number, budget)
            return Created.FULL
        raise


class SweepDriver:
    """Held by a worker: the Optuna storage opened once, and one ``advance`` per open sweep per call."""

    def __init__(self, wb: "Workbench", owner: str):
        self.wb, self.owner = wb, owner
        self._storage = None

    @property
    def storage(self):
        if self._storage is None:
            self._storage = open_storage(self.wb.db)
        return self._storage

    def advance_all(self, now: Optional[dt.datetime] = None) -> int:
        """Advance every open sweep; returns how many this process advanced. Cheap when there is none:
        one indexed SELECT, and Optuna is imported only once a sweep exists."""
        with self.wb.db.session() as session:
            ids = list(session.scalars(select(Sweep.id).where(Sweep.status.in_(OPEN)).order_by(Sweep.id)))
        done = 0
        for sweep_id in ids:
            try:
                done += advance(self.wb, self.storage, sweep_id, self.owner, now)
            except Exception:  # noqa: BLE001 - one broken sweep must not stop the others or the worker
                log.exception("sweep %s: could not advance", sweep_id)
        return done


# -- inside a trial's training process ---------------------------------------------------------------------

class TrialReporter:
    """Wraps the run's reporter: reports the objective at each evaluation to Optuna and asks the pruner.

    A pruned trial answers ``cancel_requested()`` with True, so the engine stops at once as for a
    cancel; ``jobs.process.run_job`` then records the run as pruned rather than cancelled.
    """

    def __init__(self, inner, storage, study_name: str, spec: SweepSpec, trial_number: int, enabled: bool = True):
        self.inner, self.metric_key = inner, f"eval/{spec.metric}"
        self.enabled = enabled
        self.pruned = False
        self.pruned_at: Optional[int] = None
        self._trial = None
        if enabled:
            import optuna

            study = load_study(storage, study_name, spec, trial_number)
            study_id = storage.get_study_id_from_name(study_name)
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial_number)
            self._trial = optuna.trial.Trial(study, trial_id)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def progress(self, step, total_steps, epoch):
        self.inner.progress(step, total_steps, epoch)

    def info(self, values):
        self.inner.info(values)

    def metrics(self, step, epoch, values):
        self.inner.metrics(step, epoch, values)
        value = values.get(self.metric_key)
        if self._trial is None or self.pruned or not isinstance(value, (int, float)):
            return
        try:
            self._trial.report(float(value), int(step))
            if self._trial.should_prune():
                self.pruned, self.pruned_at = True, int(step)
                log.info("trial pruned at step %s (%s=%.4g)", step, self.metric_key, value)
        except Exception:  # noqa: BLE001 - a study we cannot reach must not fail a training run
            log.exception("could not report to the study; the trial goes on unpruned")

    def cancel_requested(self) -> bool:
        return self.pruned or self.inner.cancel_requested()

    def flush(self) -> None:
        self.inner.flush()


def trial_reporter(wb: "Workbench", inner, sweep_id: int, trial_number: int, enabled: bool):
    """The reporter of a sweep trial's run; the plain one when the study cannot be opened."""
    with wb.db.session() as session:
        sweep = session.get(Sweep, sweep_id)
        if sweep is None:
            return inner
        spec, study_name = SweepSpec.from_dict(sweep.spec), sweep.study_name
    try:
        return TrialReporter(inner, open_storage(wb.db) if enabled else None, study_name, spec, trial_number,
                             enabled)
    except Exception:  # noqa: BLE001
        log.exception("sweep %s trial %s: the study cannot be opened; training without pruning", sweep_id,
                      trial_number)
        return inner


def refused_retry_reason(status: str) -> str:
    """Why a sweep trial cannot be retried: Optuna was told its outcome, and a trial is told once."""
    return (f"it is a sweep trial and its outcome ({status}) was counted by the sweep; clone it to train "
            "the same settings as a run of its own")

