"""The training process's reporter: each curve holds one point per step, through retries and takeovers.

Runs on SQLite and on PostgreSQL. A lost attempt is played by a ``DbReporter`` driven by hand; the
attempt that resumes is the fake runner's (``fake:steps``: a checkpoint every 5 steps, resumed from).
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

from jobs.process.fake_runner import InProcessRunner
from jobs.process.run_job import DbReporter
from jobs.queue import table as queue
from jobs.queue.worker import Worker
from storage.models import FAILED, QUEUED, SUCCEEDED, utcnow
from tests.queue_support import fake_spec, qwb, wait_until  # noqa: F401
from workbench.services import runs


def _lost_attempt(wb, run_id: int, attempt: int, last_step: int, checkpoint: int) -> DbReporter:
    """What an attempt that stops at ``last_step`` leaves behind: points up to it, a checkpoint before it."""
    reporter = DbReporter(wb.db, run_id, attempt, interval=0.0)
    for step in range(1, last_step + 1):
        reporter.progress(step, 20, step / 20)
        reporter.metrics(step, step / 20, {"train/loss": 1.0 / step})
    folder = Path(runs.get_run(wb, run_id)["output_dir"]) / "checkpoints" / f"checkpoint-{checkpoint}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text("{}")
    return reporter


def _drain(wb, run_id: int) -> None:
    worker = Worker(wb, InProcessRunner(wb), gpus=[])
    assert wait_until(lambda: runs.get_run(wb, run_id)["status"] == SUCCEEDED, timeout=30, step=worker.loop_once)


def _points_per_step(wb, run_id: int) -> dict[str, Counter]:
    return {name: Counter(p["step"] for p in points) for name, points in runs.run_curves(wb, run_id).items()}


def test_a_value_logged_again_at_a_step_replaces_the_first(qwb):
    """The engine logs the final evaluation (of the best model) at the last step, where the periodic one was."""
    run_id = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:20"))
    claimed = queue.claim(qwb.db, "w")
    reporter = DbReporter(qwb.db, run_id, claimed.attempt, interval=0.0)
    reporter.progress(20, 20, 1.0)
    reporter.metrics(20, 1.0, {"eval/accuracy": 0.5, "eval/loss": 0.9})
    reporter.metrics(20, 1.0, {"eval/accuracy": 0.7, "eval/loss": 0.6})
    curves = runs.run_curves(qwb, run_id)
    assert [(p["step"], p["value"]) for p in curves["eval/accuracy"]] == [(20, 0.7)]
    assert [(p["step"], p["value"]) for p in curves["eval/loss"]] == [(20, 0.6)]


def test_a_retried_run_replays_its_steps_once(qwb):
    run_id = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:20:0.01"))
    claimed = queue.claim(qwb.db, "w")
    _lost_attempt(qwb, run_id, claimed.attempt, last_step=12, checkpoint=10)
    queue.finish(qwb.db, run_id, claimed.attempt, FAILED, error="the machine rebooted")
    assert runs.get_run(qwb, run_id)["step"] == 12

    runs.retry_run(qwb, run_id)
    record = runs.get_run(qwb, run_id)
    assert (record["status"], record["step"], record["progress"]) == (QUEUED, 0, 0.0)  # not the lost step 12

    _drain(qwb, run_id)
    record = runs.get_run(qwb, run_id)
    assert record["metrics"]["resumed_from"] == 10.0 and record["step"] == 20
    assert _points_per_step(qwb, run_id)["train/loss"] == Counter(range(1, 21))


def test_a_taken_over_run_replays_its_steps_once_and_the_old_attempt_writes_nothing(qwb):
    run_id = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:20:0.01"))
    t0 = utcnow()
    claimed = queue.claim(qwb.db, "dead-worker", now=t0)
    old = _lost_attempt(qwb, run_id, claimed.attempt, last_step=12, checkpoint=10)
    moved = queue.reclaim_expired(qwb.db, qwb.settings.lease_seconds,
                                  t0 + dt.timedelta(seconds=qwb.settings.lease_seconds + 1), qwb.settings.max_attempts)
    assert moved == [(run_id, QUEUED)]
    assert (runs.get_run(qwb, run_id)["step"], runs.get_run(qwb, run_id)["progress"]) == (0, 0.0)

    # The old process has not noticed yet: what it logs now must not land on the run.
    old.progress(13, 20, 0.65)
    old.metrics(13, 0.65, {"train/loss": 99.0})
    assert 13 not in _points_per_step(qwb, run_id)["train/loss"]
    assert runs.get_run(qwb, run_id)["step"] == 0
    assert old.cancel_requested()  # it stops at a checkpoint and leaves the run to the next worker

    _drain(qwb, run_id)
    record = runs.get_run(qwb, run_id)
    assert record["attempts"] == 2 and record["metrics"]["resumed_from"] == 10.0
    curve = runs.run_curves(qwb, run_id)["train/loss"]
    assert [p["step"] for p in curve] == list(range(1, 21)) and 99.0 not in [p["value"] for p in curve]


def test_the_phase_goes_to_the_database_and_the_log_and_ends_with_the_run(qwb, caplog):
    """After the last step a run says it evaluates (n of N), saves and writes predictions; done, it says nothing."""
    run_id = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:20"))
    claimed = queue.claim(qwb.db, "w")
    reporter = DbReporter(qwb.db, run_id, claimed.attempt, interval=3600.0)  # only changes are written at once
    reporter.progress(20, 20, 1.0)
    caplog.set_level("INFO", logger="jobs.process.run_job")
    reporter.phase("evaluating", 0, 560)
    record = runs.get_run(qwb, run_id)
    assert (record["phase"], record["phase_done"], record["phase_total"]) == ("evaluating", 0, 560)
    reporter.phase("evaluating", 280, 560)  # throttled: not written yet
    assert runs.get_run(qwb, run_id)["phase_done"] == 0
    listed = runs.list_runs(qwb)[0]
    assert (listed["phase"], listed["phase_total"]) == ("evaluating", 560)  # the table's query has it
    reporter.phase("evaluating", 560, 560)  # the end of a phase is written at once
    assert runs.get_run(qwb, run_id)["phase_done"] == 560
    reporter.phase("writing predictions", 0, 560)
    assert runs.get_run(qwb, run_id)["phase"] == "writing predictions"
    logged = [r.getMessage() for r in caplog.records]
    assert f"run {run_id}: evaluating (560 examples)" in logged and f"run {run_id}: evaluating 280/560" in logged
    assert f"run {run_id}: writing predictions (560 examples)" in logged
    queue.finish(qwb.db, run_id, claimed.attempt, SUCCEEDED)
    record = runs.get_run(qwb, run_id)
    assert (record["phase"], record["phase_done"], record["phase_total"]) == (None, None, None)


def test_a_run_sent_back_to_the_queue_has_no_phase(qwb):
    run_id = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:20"))
    claimed = queue.claim(qwb.db, "w")
    DbReporter(qwb.db, run_id, claimed.attempt, interval=0.0).phase("saving checkpoint")
    assert queue.release(qwb.db, run_id, claimed.attempt, "running", QUEUED)
    assert runs.get_run(qwb, run_id)["phase"] is None
