"""Sweeps: create, list, show, cancel, parameter importance, the best trials.

What the UI, the CLI and the tests call; plain dicts out, ``workbench.errors`` raised,
no gradio. The mechanics (asking Optuna, telling it, topping up) are in ``jobs.sweeps.driver``.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from typing import Any, Optional

from sqlalchemy import select, update

from jobs.evaluation import baselines
from jobs.queue import table as queue
from jobs.sweeps import driver as engine
from jobs.specs.run import RunSpec
from jobs.queue.states import ACTIVE
from jobs.specs.sweep import PARAMETERS, SweepSpec
from storage.context import Workbench
from storage.models import (CANCELLED, FAILED, PRUNED, QUEUED, SUCCEEDED, SWEEP_CANCELLING, SWEEP_RUNNING, Run,
                            Sweep, utcnow)
from workbench.errors import ConfigError, InvalidState, NotFound

log = logging.getLogger(__name__)
# (study name, completed trial numbers) -> importances; a pure result, so a small bounded memo.
CANCEL_LEASE_WAIT_S = 10.0
_IMPORTANCE: dict[tuple[str, tuple[int, ...]], dict[str, float]] = {}

# Progress buckets of a sweep view: done (succeeded), running (queued or running), pruned, failed (or cancelled).
_BUCKETS = {SUCCEEDED: "done", PRUNED: "pruned", FAILED: "failed", CANCELLED: "failed", QUEUED: "running"}


def _iso(value: Optional[dt.datetime]) -> Optional[str]:
    return value.isoformat(timespec="seconds") + "Z" if value else None


def create_sweep(wb: Workbench, spec: SweepSpec, *, owner_id: Optional[int] = None) -> int:
    """Create the sweep and its Optuna study, and queue its first ``parallelism`` trials (at most
    ``jobs.sweeps.driver.ASKS_PER_ADVANCE``; the workers queue the rest). Returns its id."""
    from workbench.services.runs import submit_run_checks

    submit_run_checks(wb, engine.apply_params(spec.base, {}))
    storage = engine.open_storage(wb.db)
    study_name = f"workbench-sweep-{uuid.uuid4().hex[:12]}"
    engine.create_study(storage, study_name, spec)
    with wb.db.session() as session:
        sweep = Sweep(name=spec.name, task=spec.task, status=SWEEP_RUNNING, spec=spec.to_dict(),
                      study_name=study_name, n_trials=spec.n_trials, owner_id=owner_id)
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    engine.advance(wb, storage, sweep_id, owner=f"create:{uuid.uuid4().hex[:6]}")
    log.info("sweep %s created: %d trials, %d at a time", sweep_id, spec.n_trials, spec.parallelism)
    return sweep_id


def _require(session, sweep_id: int) -> Sweep:
    sweep = session.get(Sweep, sweep_id)
    if sweep is None:
        raise NotFound(f"sweep {sweep_id} does not exist; `workbench sweep list` shows the sweeps there are")
    return sweep


def _trial_rows(wb: Workbench, sweep: Sweep, spec: SweepSpec) -> list[dict[str, Any]]:
    """One row per trial: Optuna's parameters and value, the run's status, progress and id."""
    storage = engine.open_storage(wb.db)
    study = engine.load_study(storage, sweep.study_name, spec)
    with wb.db.session() as session:
        runs = {r.trial_number: r for r in session.execute(
            select(Run.id, Run.trial_number, Run.status, Run.progress, Run.metrics, Run.error, Run.seed_group)
            .where(Run.sweep_id == sweep.id)).all()}
    rows = []
    for trial in study.get_trials(deepcopy=False):
        if trial.number >= sweep.n_trials:
            continue  # asked past the budget by a racing process, refused by the database, told failed
        run = runs.get(trial.number)
        metrics = (run.metrics or {}) if run else {}
        intermediate = trial.intermediate_values
        last = intermediate[max(intermediate)] if intermediate else None
        rows.append({"trial": trial.number, "run_id": run.id if run else None,
                     "state": run.status if run else trial.state.name.lower(),
                     "optuna_state": trial.state.name.lower(), "params": dict(trial.params),
                     "value": trial.value if trial.value is not None else metrics.get(spec.metric),
                     "last_reported": last, "steps_reported": len(intermediate),
                     "progress": float(run.progress or 0.0) if run else 0.0,
                     "error": run.error if run else None, "seed_group": run.seed_group if run else None,
                     # did the trial's model beat its baselines (jobs.evaluation.baselines); "" before it finishes
                     "learned": baselines.status(metrics), "baseline": baselines.best(metrics)})
    return rows


def sweep_verdict(rows: list[dict[str, Any]]) -> str:
    """A sentence when no finished trial beat its baselines (empty otherwise, and before any trial has one):
    the best of such a sweep is the luckiest of several models that learned nothing."""
    judged = [r for r in rows if r.get("learned")]
    if not judged or any(r["learned"] == baselines.LEARNED for r in judged):
        return ""
    stuck = sum(r["learned"] == baselines.DID_NOT_LEARN for r in judged)
    top = max((r["baseline"] for r in judged if r.get("baseline") is not None), default=None)
    what = (f"{stuck} of {len(judged)} finished trial(s) did not learn (majority class or one label) and "
            "none beats the baselines" if stuck else f"none of the {len(judged)} finished trial(s) beats its "
                                                     "baselines (each is below or level with one)")
    return (f"No trial learned: {what}" + (f" (best baseline {top:.3f})" if top is not None else "")
            + ". Try more epochs (or leave epochs automatic), a learning-rate range from 5e-5 up, the SetFit "
              "method for few examples per class, or more labelled data.")


def _best(rows: list[dict[str, Any]], direction: str) -> Optional[dict[str, Any]]:
    done = [r for r in rows if r["optuna_state"] == "complete" and isinstance(r["value"], (int, float))]
    if not done:
        return None
    return (max if direction == "maximize" else min)(done, key=lambda r: r["value"])


def get_sweep(wb: Workbench, sweep_id: int) -> dict[str, Any]:
    """Everything about one sweep: spec, state, counts, best trial and every trial (JSON-ready)."""
    with wb.db.session() as session:
        sweep = _require(session, sweep_id)
    spec = SweepSpec.from_dict(sweep.spec)
    rows = _trial_rows(wb, sweep, spec)
    _add_groups(wb, rows, spec.metric)
    counts = {"done": 0, "running": 0, "pruned": 0, "failed": 0}
    for row in rows:
        counts[_BUCKETS.get(row["state"], "running")] += 1
    return {"id": sweep.id, "name": sweep.name, "task": sweep.task, "status": sweep.status,
            "study_name": sweep.study_name, "metric": spec.metric, "direction": spec.direction,
            "n_trials": spec.n_trials, "parallelism": spec.parallelism, "pruner": spec.pruner,
            "created_at": _iso(sweep.created_at), "finished_at": _iso(sweep.finished_at),
            "counts": counts, "best": _best(rows, spec.direction), "trials": rows, "spec": spec.to_dict(),
            "verdict": sweep_verdict(rows), "error": sweep.error, "ranking": ranking(rows, spec.direction)}


def list_sweeps(wb: Workbench, limit: int = 100) -> list[dict[str, Any]]:
    """Newest first: id, name, task, status, trial budget, how many trials exist."""
    with wb.db.session() as session:
        sweeps = session.scalars(select(Sweep).order_by(Sweep.id.desc()).limit(limit)).all()
        trial_counts: dict[int, dict[str, int]] = {}
        for sweep_id, status in session.execute(select(Run.sweep_id, Run.status)
                                                .where(Run.sweep_id.in_([s.id for s in sweeps]))):
            bucket = _BUCKETS.get(status, "running")
            trial_counts.setdefault(sweep_id, {}).setdefault(bucket, 0)
            trial_counts[sweep_id][bucket] += 1
    return [{"id": s.id, "name": s.name, "task": s.task, "status": s.status,
             "n_trials": s.spec.get("n_trials"), "parallelism": s.spec.get("parallelism"),
             "counts": trial_counts.get(s.id, {}), "created_at": _iso(s.created_at), "error": s.error}
            for s in sweeps]


def searched_settings(wb: Workbench, sweep_ids: list[int]) -> dict[str, str]:
    """The parameters these sweeps searched, in the order of their search spaces, each with the run-spec setting
    it sets (``learning_rate`` -> ``train.learning_rate``): what a trial's name no longer carries."""
    with wb.db.session() as session:
        specs = list(session.scalars(select(Sweep.spec).where(Sweep.id.in_(sweep_ids)).order_by(Sweep.id)))
    settings: dict[str, str] = {}
    for spec in specs:
        for name in (spec or {}).get("space") or {}:
            section, key = PARAMETERS.get(name, (None, name))
            settings.setdefault(name, f"{section}.{key}" if section else key)
    return settings


def cancel_sweep(wb: Workbench, sweep_id: int) -> str:
    """No new trials; every queued or running trial is cancelled (running ones stop at their next step).
    Returns the sweep's status: cancelled at once when nothing was running, else cancelling."""
    with wb.db.session() as session:
        sweep = _require(session, sweep_id)
        if sweep.status not in engine.OPEN:
            raise InvalidState(f"cannot cancel sweep {sweep_id}: it is {sweep.status}")
        session.execute(update(Sweep).where(Sweep.id == sweep_id, Sweep.status == SWEEP_RUNNING)
                        .values(status=SWEEP_CANCELLING).execution_options(synchronize_session=False))
    storage, owner = engine.open_storage(wb.db), f"cancel:{uuid.uuid4().hex[:6]}"
    # Once this process held the sweep's lease after the status change, nobody asks for trials any more
    # (a pass that started before it would have held the lease): the runs cancelled after that are all there are.
    deadline = time.monotonic() + CANCEL_LEASE_WAIT_S
    while not engine.advance(wb, storage, sweep_id, owner) and time.monotonic() < deadline:
        time.sleep(0.2)
    with wb.db.session() as session:
        run_ids = list(session.scalars(select(Run.id).where(Run.sweep_id == sweep_id,
                                                            Run.status.in_(engine.NOT_ENDED))))
    for run_id in run_ids:
        try:
            queue.request_cancel(wb.db, run_id)
        except InvalidState:
            pass  # it finished meanwhile
    engine.advance(wb, storage, sweep_id, owner, now=utcnow())
    with wb.db.session() as session:
        return _require(session, sweep_id).status


def top_runs(wb: Workbench, sweep_id: int, n: int = 5) -> list[int]:
    """The run ids of the ``n`` best completed trials, best first (for the Compare tab)."""
    sweep = get_sweep(wb, sweep_id)
    done = [r for r in sweep["trials"] if r["optuna_state"] == "complete" and r["run_id"] is not None
            and isinstance(r["value"], (int, float))]
    done.sort(key=lambda r: r["value"], reverse=sweep["direction"] == "maximize")
    return [r["run_id"] for r in done[:n]]


def best_run(wb: Workbench, sweep_id: int) -> int:
    """The run of the best trial so far; ``NotFound`` while no trial has completed."""
    runs = top_runs(wb, sweep_id, 1)
    if not runs:
        raise NotFound(f"sweep {sweep_id} has no completed trial yet")
    return runs[0]


def param_importance(wb: Workbench, sweep_id: int) -> dict[str, float]:
    """Optuna's parameter importances (fANOVA) over the completed trials; ``{}`` with fewer than two."""
    import optuna

    with wb.db.session() as session:
        sweep = _require(session, sweep_id)
    spec = SweepSpec.from_dict(sweep.spec)
    study = engine.load_study(engine.open_storage(wb.db), sweep.study_name, spec)
    complete = tuple(t.number for t in study.get_trials(deepcopy=False)
                     if t.state == optuna.trial.TrialState.COMPLETE)
    if len(complete) < 2:
        return {}
    key = (sweep.study_name, complete)
    if key not in _IMPORTANCE:
        # fANOVA fits a random forest: computed once per set of completed trials, not on every view tick.
        try:
            _IMPORTANCE[key] = {k: float(v) for k, v in optuna.importance.get_param_importances(study).items()}
        except (ValueError, RuntimeError) as exc:
            # All completed trials share one value of every parameter, or all have the same objective value.
            log.info("sweep %s: no parameter importance yet (%s)", sweep_id, exc)
            _IMPORTANCE[key] = {}
        while len(_IMPORTANCE) > 64:
            _IMPORTANCE.pop(next(iter(_IMPORTANCE)))
    return dict(_IMPORTANCE[key])


# -- confirming the best trials with more seeds ------------------------------------------------------------------

def confirm_top(wb: Workbench, sweep_id: int, top: int = 3, seeds: int = 3, *,
                owner_id: Optional[int] = None) -> list[dict[str, Any]]:
    """Queue more seeds of the sweep's ``top`` best completed trials, each grouped with its trial's run, until
    each group has ``seeds`` seeds (a trial confirmed already queues nothing again). Returns per trial, best
    first: ``{"trial", "run_id", "group", "ids", "seeds"}`` (the new runs and their seeds)."""
    from workbench.services import runs as runs_service

    if top < 1:
        raise ConfigError(f"--top must be 1 or more, not {top}")
    shown = get_sweep(wb, sweep_id)
    run_ids = top_runs(wb, sweep_id, top)
    if not run_ids:
        raise NotFound(f"sweep {sweep_id} has no completed trial yet; confirm its best trials once some finished")
    trials = {r["run_id"]: r["trial"] for r in shown["trials"]}
    return [{"trial": trials.get(run_id), "run_id": run_id, **runs_service.fill_seed_group(wb, run_id, seeds, owner_id=owner_id)}
            for run_id in run_ids]


def _add_groups(wb: Workbench, rows: list[dict[str, Any]], metric: str) -> None:
    """Each trial row gets ``group``: its seed group's ``{"ids", "mean", "std", "n"}`` on the sweep's metric
    (None for a trial not confirmed with more seeds)."""
    from workbench.services.runs import group_summaries

    summaries = group_summaries(wb, sorted({r["seed_group"] for r in rows if r.get("seed_group") is not None}),
                                (metric,))
    for row in rows:
        found = summaries.get(row.get("seed_group"))
        row["group"] = None if found is None else {
            "ids": found["ids"], "mean": found["mean"].get(metric), "std": found["std"].get(metric), "n": found["n"],
            "members": found["members"]}


def ranking(rows: list[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    """The completed trials best first: those confirmed with two or more finished seeds by their group's mean
    (``std`` its spread), then the others by their single value. ``{"trial", "run_id", "value", "mean",
    "std", "n", "confirmed"}``."""
    sign = -1.0 if direction == "maximize" else 1.0
    confirmed, single = [], []
    for row in rows:
        group = row.get("group") or {}
        if group.get("n", 0) >= 2 and isinstance(group.get("mean"), (int, float)):
            confirmed.append({"trial": row["trial"], "run_id": row["run_id"], "value": row["value"],
                              "mean": group["mean"], "std": group["std"], "n": group["n"], "confirmed": True})
        elif row["optuna_state"] == "complete" and isinstance(row["value"], (int, float)):
            single.append({"trial": row["trial"], "run_id": row["run_id"], "value": row["value"],
                           "mean": row["value"], "std": None, "n": 1, "confirmed": False})
    return (sorted(confirmed, key=lambda r: (sign * r["mean"], r["trial"]))
            + sorted(single, key=lambda r: (sign * r["value"], r["trial"])))


def time_left(wb: Workbench, sweep: dict[str, Any]) -> Optional[dict[str, Any]]:
    """How long a running sweep (``get_sweep``'s dict) still needs: its queued and running trials until the last
    ends (``runs.time_left``), then the trials not asked yet as ``estimates.estimate_sweep`` expects them (pruning
    included). ``{"seconds", "active", "to_ask"}``; None when the sweep is not running, or a trial has no time."""
    from workbench.services import estimates
    from workbench.services import runs as runs_service

    if sweep["status"] != SWEEP_RUNNING:
        return None
    active = [t["run_id"] for t in sweep["trials"]
              if t["run_id"] and (t["state"] in ACTIVE or t["state"] == QUEUED)]
    seconds = runs_service.time_left(wb, active) if active else 0.0
    to_ask = max(0, sweep["n_trials"] - len(sweep["trials"]))
    if to_ask:
        spec = SweepSpec.from_dict(sweep["spec"])
        rest = estimates.estimate_sweep(wb, RunSpec.from_dict(spec.base), to_ask, spec.parallelism, spec.pruner,
                                        workers=max(1, runs_service.worker_slots(wb)))
        seconds = None if rest is None or seconds is None else seconds + rest["wall_seconds"]
    if seconds is None:
        return None
    return {"seconds": round(seconds, 1), "active": len(active), "to_ask": to_ask}
