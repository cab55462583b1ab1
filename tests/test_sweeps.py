"""Sweeps on the queue with the fake runner: trials distinct, pruning, failure, cancel, restarts.

Real SQLite (and PostgreSQL with ``-m postgres``), real Optuna storage in the same database, the
worker driven one iteration at a time; the fake's ``fake:sweep:N`` model reports ``eval/accuracy``
every 5 steps with a value set by the learning rate.
"""
from __future__ import annotations

import datetime as dt
import time

import optuna
import pytest
from sqlalchemy import select, update

from jobs.process.fake_runner import InProcessRunner, sweep_accuracy
from jobs.queue import table as queue
from jobs.queue.worker import Worker
from jobs.specs.sweep import ParamSpec, SweepSpec, apply_params, parse_param
from jobs.sweeps import driver as engine
from storage.models import FAILED, PRUNED, RUNNING, SUCCEEDED, Run, Sweep
from tests.queue_support import fake_spec, qwb, second_workbench, wait_until  # noqa: F401
from workbench.errors import ConfigError, InvalidState
from workbench.services import runs as runs_service
from workbench.services import sweeps


def sweep_spec(wb, model="fake:sweep:20:0.005", **fields) -> SweepSpec:
    base = fake_spec(wb, model=model).to_dict()
    values = {"base": base, "space": {"learning_rate": {"low": 1e-6, "high": 1e-2, "log": True},
                                      "batch_size": [8, 16, 32]},
              "n_trials": 6, "parallelism": 2, "pruner": "none", **fields}
    return SweepSpec.from_dict(values)


def trial_runs(wb, sweep_id):
    with wb.db.session() as session:
        return session.execute(select(Run.id, Run.trial_number, Run.status, Run.spec, Run.metrics)
                               .where(Run.sweep_id == sweep_id).order_by(Run.trial_number)).all()


def sweep_status(wb, sweep_id):
    with wb.db.session() as session:
        return session.get(Sweep, sweep_id).status


def drive(worker, wb, sweep_id, timeout=60.0):
    return wait_until(lambda: sweep_status(wb, sweep_id) in ("finished", "cancelled"), timeout, worker.loop_once)


# -- the spec ------------------------------------------------------------------------------------------

def test_spec_parses_flag_forms_and_rejects_unknown_parameters(qwb):
    assert parse_param("learning_rate", "1e-5..1e-4:log") == ParamSpec("float", 1e-5, 1e-4, log=True)
    assert parse_param("epochs", "1..3") == ParamSpec("int", 1, 3)
    assert parse_param("batch_size", "16,32").choices == [16, 32]
    assert parse_param("model", "a,b").choices == ["a", "b"]
    with pytest.raises(ConfigError, match="unknown sweep parameter 'lr'"):
        sweep_spec(qwb, space={"lr": [1]})
    with pytest.raises(ConfigError, match="log-scaled range must start above 0"):
        sweep_spec(qwb, space={"learning_rate": "0..1:log"})
    spec = sweep_spec(qwb)
    assert (spec.metric, spec.direction) == ("accuracy", "maximize")
    assert SweepSpec.from_dict(spec.to_dict()) == spec


def test_apply_params_sets_nested_fields_and_turns_lora_on(qwb):
    base = fake_spec(qwb).to_dict()
    run = apply_params(base, {"learning_rate": 3e-5, "lora_r": 4, "model": "fake:succeed"}, name="t")
    assert (run.train.learning_rate, run.lora.r, run.lora.enabled, run.model, run.name) == (
        3e-5, 4, True, "fake:succeed", "t")
    assert base["lora"]["enabled"] is False  # the base spec is not changed


# -- the sweep on the queue ----------------------------------------------------------------------------

def test_sweep_runs_distinct_trials_at_its_parallelism_and_finds_the_best(qwb):
    sweep_id = sweeps.create_sweep(qwb, sweep_spec(qwb, n_trials=6, parallelism=2))
    assert [r.status for r in trial_runs(qwb, sweep_id)] == ["queued", "queued"]  # queued at creation
    worker = Worker(qwb, InProcessRunner(qwb), max_jobs=4, gpus=[])
    most_active = 0

    def step():
        nonlocal most_active
        worker.loop_once()
        most_active = max(most_active, sum(r.status in ("queued", RUNNING) for r in trial_runs(qwb, sweep_id)))

    assert wait_until(lambda: sweep_status(qwb, sweep_id) == "finished", 60, step)
    rows = trial_runs(qwb, sweep_id)
    assert [r.trial_number for r in rows] == list(range(6))
    assert all(r.status == SUCCEEDED for r in rows)
    assert most_active == 2  # never more than the parallelism, although the worker had 4 slots
    params = {(r.spec["train"]["learning_rate"], r.spec["train"]["batch_size"]) for r in rows}
    assert len(params) == 6  # constant_liar / per-trial seeds: no two trials alike
    shown = sweeps.get_sweep(qwb, sweep_id)
    assert shown["counts"] == {"done": 6, "running": 0, "pruned": 0, "failed": 0}
    values = {r["trial"]: r["value"] for r in shown["trials"]}
    for row in rows:
        assert values[row.trial_number] == pytest.approx(row.metrics["accuracy"])
    assert shown["best"]["value"] == max(values.values())
    assert sweeps.best_run(qwb, sweep_id) == shown["best"]["run_id"]
    assert sweeps.top_runs(qwb, sweep_id, 3)[0] == shown["best"]["run_id"]
    assert len(sweeps.top_runs(qwb, sweep_id, 5)) == 5


def test_trials_are_named_by_their_sweep_and_number(qwb):
    sweep_id = sweeps.create_sweep(qwb, sweep_spec(qwb, name="named", parallelism=3))
    with qwb.db.session() as session:
        names = session.execute(select(Run.trial_number, Run.name, Run.spec).where(Run.sweep_id == sweep_id)
                                .order_by(Run.trial_number)).all()
    # Short: the parameters (and the sweep's own name) are in the views' columns, not in every trial's name.
    assert [(n, name, spec["name"]) for n, name, spec in names] == [
        (n, f"sweep {sweep_id} #{n}", f"sweep {sweep_id} #{n}") for n in range(3)]


def test_pruner_stops_bad_trials_which_end_pruned_and_free_their_worker(qwb):
    # Trials 0-1 are good and complete; the later ones have a learning rate far from the best and
    # report a value below the median at their first evaluation.
    spec = sweep_spec(qwb, model="fake:sweep:40:0.002", n_trials=5, parallelism=1, pruner="median",
                      space={"learning_rate": [5e-5, 5e-5, 1e-2]})
    # A fixed order of learning rates: enqueued trials are asked first.
    sweep_id = sweeps.create_sweep(qwb, spec)
    with qwb.db.session() as session:
        study_name = session.get(Sweep, sweep_id).study_name
    study = engine.load_study(engine.open_storage(qwb.db), study_name, spec)
    for lr in (5e-5, 1e-2, 1e-2, 1e-2):
        study.enqueue_trial({"learning_rate": lr})
    worker = Worker(qwb, InProcessRunner(qwb), max_jobs=1, gpus=[])
    assert drive(worker, qwb, sweep_id)
    rows = trial_runs(qwb, sweep_id)
    by_lr = {}
    for row in rows:
        by_lr.setdefault(row.spec["train"]["learning_rate"], []).append(row)
    assert all(r.status == SUCCEEDED for r in by_lr[5e-5])
    bad = by_lr[1e-2]
    assert bad and all(r.status == PRUNED for r in bad)
    with qwb.db.session() as session:
        steps = [session.get(Run, r.id).step for r in bad]
    assert all(s < 40 for s in steps)  # stopped early, right after an evaluation
    shown = sweeps.get_sweep(qwb, sweep_id)
    assert shown["counts"]["pruned"] == len(bad)
    assert {t["optuna_state"] for t in shown["trials"] if t["state"] == PRUNED} == {"pruned"}
    with pytest.raises(InvalidState, match="sweep trial"):
        runs_service.retry_run(qwb, bad[0].id)


def test_a_trial_whose_worker_died_is_resumed_as_the_same_trial_and_told_once(qwb):
    spec = sweep_spec(qwb, n_trials=2, parallelism=2)
    sweep_id = sweeps.create_sweep(qwb, spec)
    first = trial_runs(qwb, sweep_id)[0]
    claimed = queue.claim(qwb.db, "dead-worker")  # a worker that claims and dies
    assert claimed.id == first.id
    later = dt.datetime.utcnow() + dt.timedelta(seconds=qwb.settings.lease_seconds + 5)
    assert queue.reclaim_expired(qwb.db, qwb.settings.lease_seconds, later, max_attempts=3) == [(first.id, "queued")]
    worker = Worker(qwb, InProcessRunner(qwb), max_jobs=2, gpus=[])
    assert drive(worker, qwb, sweep_id)
    rows = trial_runs(qwb, sweep_id)
    assert [r.status for r in rows] == [SUCCEEDED, SUCCEEDED] and len(rows) == 2
    with qwb.db.session() as session:
        study_name = session.get(Sweep, sweep_id).study_name
    trials = engine.load_study(engine.open_storage(qwb.db), study_name, spec).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]  # two trials, no extra one for the retry


def test_lease_expired_past_max_attempts_is_a_failed_trial(qwb):
    spec = sweep_spec(qwb, n_trials=1, parallelism=1)
    sweep_id = sweeps.create_sweep(qwb, spec)
    now = dt.datetime.utcnow()
    for attempt in range(2):
        queue.claim(qwb.db, "dying-worker", now)
        now += dt.timedelta(seconds=qwb.settings.lease_seconds + 5)
        queue.reclaim_expired(qwb.db, qwb.settings.lease_seconds, now, max_attempts=2)
    assert trial_runs(qwb, sweep_id)[0].status == FAILED
    engine.advance(qwb, engine.open_storage(qwb.db), sweep_id, "test")
    shown = sweeps.get_sweep(qwb, sweep_id)
    assert shown["status"] == "finished" and shown["trials"][0]["optuna_state"] == "fail"


def test_cancel_stops_running_trials_asks_no_more_and_tells_them_failed(qwb):
    spec = sweep_spec(qwb, model="fake:steps:2000:0.01", n_trials=6, parallelism=2)
    sweep_id = sweeps.create_sweep(qwb, spec)
    worker = Worker(qwb, InProcessRunner(qwb), max_jobs=2, gpus=[])
    assert wait_until(lambda: [r.status for r in trial_runs(qwb, sweep_id)] == [RUNNING, RUNNING], 20,
                      worker.loop_once)
    # Cancelled at once when both trials saw the cancel before the sweep looked again; else cancelling.
    assert sweeps.cancel_sweep(qwb, sweep_id) in ("cancelling", "cancelled")
    assert drive(worker, qwb, sweep_id)
    shown = sweeps.get_sweep(qwb, sweep_id)
    assert shown["status"] == "cancelled"
    assert [t["state"] for t in shown["trials"]] == ["cancelled", "cancelled"]  # no third trial asked
    assert {t["optuna_state"] for t in shown["trials"]} == {"fail"}
    with pytest.raises(InvalidState, match="it is cancelled"):
        sweeps.cancel_sweep(qwb, sweep_id)


def test_cancel_with_only_queued_trials_is_immediate(qwb):
    sweep_id = sweeps.create_sweep(qwb, sweep_spec(qwb))
    assert sweeps.cancel_sweep(qwb, sweep_id) == "cancelled"
    assert [r.status for r in trial_runs(qwb, sweep_id)] == ["cancelled", "cancelled"]


def test_a_restarted_worker_and_server_continue_the_sweep_where_it_was(qwb):
    spec = sweep_spec(qwb, model="fake:sweep:10:0.005", n_trials=5, parallelism=2)
    sweep_id = sweeps.create_sweep(qwb, spec)
    worker = Worker(qwb, InProcessRunner(qwb), max_jobs=2, gpus=[])
    assert wait_until(lambda: sum(r.status == SUCCEEDED for r in trial_runs(qwb, sweep_id)) >= 2, 30,
                      worker.loop_once)
    worker.shutdown()  # the server stops: its running trials go back to the queue
    # A new process: new connection pool, new Optuna storage, new worker id.
    other = second_workbench(qwb.settings)
    try:
        restarted = Worker(other, InProcessRunner(other), max_jobs=2, gpus=[])
        assert drive(restarted, other, sweep_id)
    finally:
        other.close()
    rows = trial_runs(qwb, sweep_id)
    assert [r.trial_number for r in rows] == list(range(5))
    assert all(r.status == SUCCEEDED for r in rows)
    assert sweeps.get_sweep(qwb, sweep_id)["counts"]["done"] == 5


def test_a_trial_asked_by_a_process_that_died_before_queuing_it_gets_its_run(qwb):
    spec = sweep_spec(qwb, n_trials=3, parallelism=3)
    with qwb.db.session() as session:
        sweep = Sweep(name="", task=spec.task, spec=spec.to_dict(), study_name="lost-ask", n_trials=spec.n_trials)
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    storage = engine.open_storage(qwb.db)
    engine.create_study(storage, "lost-ask", spec)
    asked = engine.load_study(storage, "lost-ask", spec).ask(engine.distributions(spec.space))  # ...and died
    engine.advance(qwb, storage, sweep_id, "next-process")
    rows = trial_runs(qwb, sweep_id)
    assert [r.trial_number for r in rows] == [0, 1, 2]
    assert rows[0].spec["train"]["learning_rate"] == asked.params["learning_rate"]


def test_only_the_lease_holder_tops_a_sweep_up(qwb):
    spec = sweep_spec(qwb, n_trials=4, parallelism=2)
    sweep_id = sweeps.create_sweep(qwb, spec)
    with qwb.db.session() as session:
        session.execute(update(Sweep).where(Sweep.id == sweep_id)
                        .values(lock_owner="other", lock_until=dt.datetime.utcnow() + dt.timedelta(seconds=30)))
    runs_service.cancel_run(qwb, trial_runs(qwb, sweep_id)[0].id)
    storage = engine.open_storage(qwb.db)
    assert engine.advance(qwb, storage, sweep_id, "me") is False
    assert len(trial_runs(qwb, sweep_id)) == 2
    later = dt.datetime.utcnow() + dt.timedelta(seconds=engine.LEASE_SECONDS + 1)
    assert engine.advance(qwb, storage, sweep_id, "me", now=later) is True  # the stale lease is taken over
    assert len(trial_runs(qwb, sweep_id)) == 3


def test_two_workers_share_a_sweep_without_doubling_a_trial(qwb):
    spec = sweep_spec(qwb, model="fake:sweep:5:0.002", n_trials=8, parallelism=3)
    sweep_id = sweeps.create_sweep(qwb, spec)
    other = second_workbench(qwb.settings)
    try:
        workers = [Worker(qwb, InProcessRunner(qwb), max_jobs=2, gpus=[]),
                   Worker(other, InProcessRunner(other), max_jobs=2, gpus=[])]

        def step():
            for worker in workers:
                worker.loop_once()

        assert wait_until(lambda: sweep_status(qwb, sweep_id) == "finished", 60, step)
    finally:
        other.close()
    rows = trial_runs(qwb, sweep_id)
    assert [r.trial_number for r in rows] == list(range(8))
    with qwb.db.session() as session:
        study_name = session.get(Sweep, sweep_id).study_name
    trials = engine.load_study(engine.open_storage(qwb.db), study_name, spec).get_trials()
    assert len(trials) == 8 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)


def test_parameter_importance_over_completed_trials(qwb):
    sweep_id = sweeps.create_sweep(qwb, sweep_spec(qwb, model="fake:sweep:5:0.001", n_trials=6, parallelism=3))
    assert sweeps.param_importance(qwb, sweep_id) == {}
    worker = Worker(qwb, InProcessRunner(qwb), max_jobs=3, gpus=[])
    assert drive(worker, qwb, sweep_id)
    importance = sweeps.param_importance(qwb, sweep_id)
    assert set(importance) == {"learning_rate", "batch_size"}
    # The fake's accuracy depends on the learning rate only.
    assert importance["learning_rate"] > importance["batch_size"]


def test_fake_objective_is_best_near_5e_5():
    good = fake_spec_for(5e-5)
    bad = fake_spec_for(1e-3)
    assert sweep_accuracy(good, 10, 10) > sweep_accuracy(bad, 10, 10)


def fake_spec_for(lr):
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec

    return RunSpec(task="text-classification", data=DataSpec(train_path="x"), train=TrainSpec(learning_rate=lr))


def test_start_up_trials_spread_over_the_range(qwb):
    """Per-trial sampler seeds must not give near-identical first draws (seeds 0 and 3 once did)."""
    import math

    spec = sweep_spec(qwb, n_trials=12, space={"learning_rate": "1e-5..1e-3:log"})
    storage = engine.open_storage(qwb.db)
    engine.create_study(storage, "spread", spec)
    points = sorted(math.log10(engine.load_study(storage, "spread", spec, trial_number=n)
                               .ask(engine.distributions(spec.space)).params["learning_rate"]) for n in range(4))
    assert min(b - a for a, b in zip(points, points[1:])) > 0.02  # no two within 5% of each other


# -- the trial budget is the database's, not a check in Python ------------------------------------------

def bare_sweep(wb, spec, study_name):
    """A sweep row and its study, no trial asked yet (``create_sweep`` would ask at once)."""
    with wb.db.session() as session:
        sweep = Sweep(name="", task=spec.task, spec=spec.to_dict(), study_name=study_name, n_trials=spec.n_trials)
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    engine.create_study(engine.open_storage(wb.db), study_name, spec)
    return sweep_id


def test_the_database_refuses_a_trial_past_n_trials(qwb):
    from sqlalchemy import insert
    from sqlalchemy.exc import IntegrityError

    spec = sweep_spec(qwb, n_trials=3, parallelism=1)
    sweep_id = sweeps.create_sweep(qwb, spec)
    row = {"name": "", "task": spec.task, "model": "fake:succeed", "spec": {}, "sweep_id": sweep_id}
    refused = [{"trial_number": 3, "sweep_n_trials": 3},    # the CHECK: number < n_trials
               {"trial_number": 3, "sweep_n_trials": 10},   # the foreign key: the copied n_trials cannot lie
               {"trial_number": 3, "sweep_n_trials": None},  # nor be left out
               {"trial_number": None, "sweep_n_trials": 3},
               {"trial_number": -1, "sweep_n_trials": 3}]
    for values in refused:
        with pytest.raises(IntegrityError):
            with qwb.db.session() as session:
                session.execute(insert(Run.__table__).values(**row, **values))
    with pytest.raises(IntegrityError):
        queue.submit(qwb.db, fake_spec(qwb), qwb.settings.runs_dir, sweep_id=sweep_id, trial_number=3)
    with pytest.raises(IntegrityError):  # nor can the budget grow under the trials that point at it
        with qwb.db.session() as session:
            session.execute(update(Sweep).where(Sweep.id == sweep_id).values(n_trials=10))
    with qwb.db.session() as session:  # the last place left is taken as any other
        session.execute(insert(Run.__table__).values(**row, trial_number=2, sweep_n_trials=3))
    assert [r.trial_number for r in trial_runs(qwb, sweep_id)] == [0, 2]


def test_two_askers_interleaving_never_overshoot_n_trials(qwb, monkeypatch):
    """Asker A's snapshot is taken, then B (whose lease overran A's) runs a whole pass before A inserts
    its first trial: A then asks on from a stale count. The database refuses A's trial 6."""
    spec = sweep_spec(qwb, n_trials=6, parallelism=6)
    sweep_id = bare_sweep(qwb, spec, "race")
    other = second_workbench(qwb.settings)
    real_submit, raced = queue.submit, []

    def submit(*args, **kwargs):
        if not raced:
            raced.append(True)
            engine._advance_locked(other, engine.open_storage(other.db), sweep_id, dt.datetime.utcnow())
        return real_submit(*args, **kwargs)

    monkeypatch.setattr(queue, "submit", submit)
    try:
        assert engine.advance(qwb, engine.open_storage(qwb.db), sweep_id, "A") is True
    finally:
        other.close()
    assert raced and [r.trial_number for r in trial_runs(qwb, sweep_id)] == list(range(6))
    trials = engine.load_study(engine.open_storage(qwb.db), "race", spec).get_trials()
    # A's extra ask got no run and was told failed; the sweep's views show its 6 trials only.
    assert [t.number for t in trials if t.state == optuna.trial.TrialState.FAIL] == [6]
    assert [t["trial"] for t in sweeps.get_sweep(qwb, sweep_id)["trials"]] == list(range(6))
    engine.advance(qwb, engine.open_storage(qwb.db), sweep_id, "A")  # and later passes ask no more
    assert len(trial_runs(qwb, sweep_id)) == 6


def test_a_long_pass_renews_its_lease_so_nobody_else_asks_meanwhile(qwb, monkeypatch):
    # a lease several times one trial's submit: on a loaded machine the rest of a pass's step (Optuna's ask,
    # the renewal) took over 0.6 s with a 1 s lease, and the intruder won without anything being wrong
    monkeypatch.setattr(engine, "LEASE_SECONDS", 2.5)
    spec = sweep_spec(qwb, n_trials=6, parallelism=6)
    sweep_id = bare_sweep(qwb, spec, "long-pass")
    real_submit, intruder_won = queue.submit, []

    def slow_submit(*args, **kwargs):
        time.sleep(0.8)  # 6 trials: 4.8 s in all, about twice the lease
        intruder_won.append(engine._take_lease(qwb.db, sweep_id, "intruder", dt.datetime.utcnow()))
        return real_submit(*args, **kwargs)

    monkeypatch.setattr(queue, "submit", slow_submit)
    assert engine.advance(qwb, engine.open_storage(qwb.db), sweep_id, "creator") is True
    assert intruder_won == [False] * 6
    assert [r.trial_number for r in trial_runs(qwb, sweep_id)] == list(range(6))


def test_a_pass_that_lost_its_lease_stops_asking(qwb, monkeypatch):
    monkeypatch.setattr(engine, "LEASE_SECONDS", 1.0)
    spec = sweep_spec(qwb, n_trials=6, parallelism=6)
    sweep_id = bare_sweep(qwb, spec, "lost-lease")
    real_submit = queue.submit

    def submit(*args, **kwargs):
        time.sleep(0.3)
        with qwb.db.session() as session:  # another process took the lease over
            session.execute(update(Sweep).where(Sweep.id == sweep_id).values(lock_owner="other"))
        return real_submit(*args, **kwargs)

    monkeypatch.setattr(queue, "submit", submit)
    assert engine.advance(qwb, engine.open_storage(qwb.db), sweep_id, "slow") is True
    assert 1 <= len(trial_runs(qwb, sweep_id)) < 6


def test_each_pass_asks_for_a_bounded_number_of_trials(qwb, monkeypatch):
    monkeypatch.setattr(engine, "ASKS_PER_ADVANCE", 4)
    spec = sweep_spec(qwb, n_trials=10, parallelism=10)
    sweep_id = sweeps.create_sweep(qwb, spec)
    assert len(trial_runs(qwb, sweep_id)) == 4  # creating the sweep returns after 4 asks, not 10
    storage = engine.open_storage(qwb.db)
    counts = []
    for _ in range(3):
        engine.advance(qwb, storage, sweep_id, "worker")
        counts.append(len(trial_runs(qwb, sweep_id)))
    assert counts == [8, 10, 10]


# -- a sweep whose trials all fail the same way ---------------------------------------------------------

def test_trials_that_all_fail_alike_stop_the_sweep_which_says_why(qwb):
    spec = sweep_spec(qwb, model="fake:raise", n_trials=10, parallelism=2)
    sweep_id = sweeps.create_sweep(qwb, spec)
    worker = Worker(qwb, InProcessRunner(qwb), max_jobs=2, gpus=[])
    assert wait_until(lambda: sweep_status(qwb, sweep_id) == "failed", 60, worker.loop_once)
    for _ in range(5):
        worker.loop_once()
    shown = sweeps.get_sweep(qwb, sweep_id)
    assert shown["status"] == "failed"
    assert "trials all failed with the same error" in shown["error"] and "ValueError: boom" in shown["error"]
    # The trials that failed, and not one more asked after the stop (one still running is cancelled).
    assert engine.FAIL_FAST_TRIALS <= len(shown["trials"]) < engine.FAIL_FAST_TRIALS + spec.parallelism
    states = [t["state"] for t in shown["trials"]]
    assert states.count(FAILED) >= engine.FAIL_FAST_TRIALS and set(states) <= {FAILED, "cancelled"}
    assert {t["optuna_state"] for t in shown["trials"]} == {"fail"}
    assert shown["best"] is None and shown["counts"]["failed"] == len(shown["trials"])
    with pytest.raises(InvalidState, match="counted by the sweep"):
        runs_service.retry_run(qwb, shown["trials"][0]["run_id"])
    with pytest.raises(InvalidState, match="it is failed"):
        sweeps.cancel_sweep(qwb, sweep_id)


def test_a_sweep_stops_only_when_its_first_trials_failed_with_one_error():
    from types import SimpleNamespace as Row

    def rows(*ended, running=0):
        return [Row(status=s, error=e) for s, e in ended] + [Row(status=RUNNING, error=None)] * running

    boom, oom = (FAILED, "ValueError: boom"), (FAILED, "CUDA out of memory")
    assert engine._fails_alike(rows(boom, boom, boom, running=2)).endswith("ValueError: boom")
    assert engine._fails_alike(rows(boom, boom, running=2)) is None  # too few ended yet
    assert engine._fails_alike(rows(boom, oom, boom)) is None  # not the same way
    assert engine._fails_alike(rows(boom, boom, (SUCCEEDED, None), boom)) is None
    assert engine._fails_alike(rows(boom, boom, ("cancelled", None))) is None
    assert engine._fails_alike(rows((FAILED, None), (FAILED, None), (FAILED, None))) is None
