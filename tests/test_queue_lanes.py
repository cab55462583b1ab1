"""Issue 39: short jobs do not wait behind long ones.

A worker's short-job lane (``WORKBENCH_SHORT_JOBS``, ``jobs.queue.worker``) runs a prediction, evaluation or export
job beside a training run. Real subprocesses run fake training and the real chunked prediction
(``jobs.process.fake_runner``), on SQLite and on PostgreSQL.
"""
from __future__ import annotations

import csv
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from jobs.queue import table as queue
from jobs.process.fake_runner import fake_subprocess_runner
from jobs.queue.worker import Worker
from storage.models import FAILED, KIND_TRAIN, QUEUED, RUNNING, SHORT_KINDS, SUCCEEDED, Run, utcnow
from tests.predict_support import reviews_csv, trained_run
from tests.queue_support import alive, fake_spec, qwb, wait_until  # noqa: F401
from workbench.services import predictions, runs

# The lane's claim is the worker's next iteration (0.5 s apart while it is busy); a second is ample for one
# iteration even on a loaded machine, where 22 minutes was the wait without the lane.
STARTS_WITHIN_S = 2.0


def _run(wb, run_id) -> Run:
    with wb.db.session() as session:
        return session.get(Run, run_id)


def test_the_lane_claim_takes_only_short_jobs_in_claim_order(qwb):
    training = runs.submit_run(qwb, fake_spec(qwb, "fake:succeed"))
    model = trained_run(qwb)  # claimed and finished: not in the queue any more
    first = predictions.submit_prediction(qwb, model, reviews_csv(qwb.settings.home / "in"))
    urgent = predictions.submit_prediction(qwb, model, reviews_csv(qwb.settings.home / "in"), priority=3)
    assert queue.claim(qwb.db, "w", kinds=SHORT_KINDS).id == urgent
    assert queue.claim(qwb.db, "w", kinds=SHORT_KINDS).id == first
    assert queue.claim(qwb.db, "w", kinds=SHORT_KINDS) is None
    assert _run(qwb, training).status == QUEUED and queue.claim(qwb.db, "w").id == training


@pytest.mark.timeout(180)
def test_a_prediction_queued_behind_a_long_training_run_starts_at_once(qwb, tmp_path):
    """One worker, one slot, busy with a training run of about 60 s: the prediction queued after it is claimed
    within STARTS_WITHIN_S and ends while the training still runs."""
    model = trained_run(qwb)
    training = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:600:0.1"))
    worker = Worker(qwb, fake_subprocess_runner(), max_jobs=1, gpus=[])
    assert worker.short_jobs == 1  # the default
    try:
        assert wait_until(lambda: _run(qwb, training).status == RUNNING, timeout=10, step=worker.loop_once)
        job = predictions.submit_prediction(qwb, model, reviews_csv(tmp_path, rows=7))
        queued_at = time.monotonic()
        assert wait_until(lambda: _run(qwb, job).status != QUEUED, timeout=STARTS_WITHIN_S, step=worker.loop_once), \
            f"the prediction waited more than {STARTS_WITHIN_S} s behind the training run"
        waited = time.monotonic() - queued_at
        assert wait_until(lambda: _run(qwb, job).status in (SUCCEEDED, FAILED), timeout=60, step=worker.loop_once,
                          interval=0.2)
        assert _run(qwb, job).status == SUCCEEDED, _run(qwb, job).error
        assert _run(qwb, training).status == RUNNING, f"the training ended first (the job waited {waited:.1f} s)"
        assert wait_until(lambda: job not in worker.slots, timeout=30, step=worker.loop_once)  # its process ended
        assert [(run_id, slot.short) for run_id, slot in worker.slots.items()] == [(training, False)]
        [output] = predictions.job_outputs(qwb, job)
        assert len(list(csv.DictReader(output.open()))) == 7
        # the lane holds one: a second and third short job do not take the training's slot or a second lane slot
        more = [predictions.submit_prediction(qwb, model, reviews_csv(tmp_path / str(i))) for i in range(2)]
        worker.loop_once()
        assert sorted(s.short for s in worker.slots.values()) == [False, True]
        assert [_run(qwb, j).status for j in more].count(QUEUED) == 1
    finally:
        worker.shutdown()


@pytest.mark.timeout(240)
def test_kill_9_of_a_worker_with_a_lane_job_then_a_new_worker_resumes_both(qwb, tmp_path):
    """The lane job is leased like any run: its worker killed with SIGKILL, the child dies with it, the lease
    expires and the next worker resumes the training from its checkpoint and the prediction from its last
    chunk — each executed twice in all, no row lost or repeated."""
    log = tmp_path / "executions.log"
    model = trained_run(qwb)
    training = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:60:0.1"))
    job = predictions.submit_prediction(qwb, model, reviews_csv(tmp_path, rows=9))
    env = {**qwb.settings.as_env(), **os.environ, "FAKE_RUNNER_LOG": str(log),
           "FAKE_PREDICT_SECONDS_PER_CHUNK": "600"}  # the prediction sleeps after its only chunk until killed
    code = ("from jobs.process.fake_runner import fake_subprocess_runner; from jobs.queue.worker import Worker; "
            "from storage.context import open_workbench; "
            "Worker(open_workbench(), fake_subprocess_runner(), gpus=[]).run_forever()")
    worker_process = subprocess.Popen([sys.executable, "-c", code], env={**env, **qwb.settings.as_env()})
    chunk = Path(_run(qwb, job).output_dir) / "chunks" / "chunk-000000.jsonl"
    try:
        assert wait_until(lambda: _run(qwb, training).step >= 12 and chunk.exists(), timeout=90, interval=0.1)
        children = [_run(qwb, training).pid, _run(qwb, job).pid]
        worker_process.send_signal(signal.SIGKILL)
        worker_process.wait(10)
    finally:
        worker_process.kill()
    assert wait_until(lambda: not any(alive(pid) for pid in children), timeout=10), "a child outlived its worker"
    assert (_run(qwb, training).status, _run(qwb, job).status) == (RUNNING, RUNNING)  # nobody has noticed yet
    os.environ["FAKE_RUNNER_LOG"] = str(log)
    try:
        worker = Worker(qwb, fake_subprocess_runner(), gpus=[])
        # this worker's first iteration takes over both expired leases
        worker.loop_once(now=utcnow() + dt.timedelta(seconds=qwb.settings.lease_seconds + 1))
        assert wait_until(lambda: all(_run(qwb, r).status in (SUCCEEDED, FAILED) for r in (training, job)),
                          timeout=90, step=worker.loop_once, interval=0.1)
    finally:
        del os.environ["FAKE_RUNNER_LOG"]
        worker.shutdown()
    done, trained = _run(qwb, job), _run(qwb, training)
    assert (done.status, done.attempts, trained.status, trained.attempts) == (SUCCEEDED, 2, SUCCEEDED, 2), done.error
    assert done.metrics["rows"] == 9 and done.metrics["resumed_rows"] == 9
    assert trained.metrics["resumed_from"] >= 10 and trained.step == trained.total_steps == 60
    assert Counter(log.read_text().split()) == {str(training): 2, str(job): 2}
    [output] = predictions.job_outputs(qwb, job)
    assert [r["id"] for r in csv.DictReader(output.open())] == [str(i) for i in range(9)]


def test_a_worker_without_a_lane_keeps_short_jobs_in_line(qwb):
    """WORKBENCH_SHORT_JOBS=0: the queue is one line again, and the worker says it has no lane."""
    training = runs.submit_run(qwb, fake_spec(qwb, "fake:hang"))
    model = trained_run(qwb)
    job = predictions.submit_prediction(qwb, model, reviews_csv(qwb.settings.home / "in"))
    worker = Worker(qwb, fake_subprocess_runner(), max_jobs=1, gpus=[], short_jobs=0)
    try:
        worker.loop_once()
        assert list(worker.slots) == [training] and _run(qwb, job).status == QUEUED
        assert runs.lane_slots(qwb) == 0 and runs.queue_position(qwb, job)["lane"] == "main"
    finally:
        worker.shutdown()
    assert _run(qwb, training).kind == KIND_TRAIN


class _Held:
    """A launched job that runs until the test sets its exit code."""

    def __init__(self):
        self.pid, self.code = os.getpid(), None

    def poll(self):
        return self.code

    def kill(self):
        self.code = -9


class _RecordingRunner:
    def __init__(self):
        self.launched = {}

    def launch(self, job, env):
        self.launched[job.run_id] = (job, dict(env), _Held())
        return self.launched[job.run_id][2]


def test_a_lane_job_beside_a_cpu_training_run_takes_a_quarter_of_the_cores(qwb, tmp_path):
    """bench/short_lane_share.py, 2 cores: with every core each, a prediction beside a training run left the
    training 13 % of its speed; with the lane's one thread and the training's other, 65 %, and the prediction
    its own one-thread speed."""
    from jobs.progress import LANE_MARKER_ENV, lane_threads

    model = trained_run(qwb)
    runner = _RecordingRunner()
    worker = Worker(qwb, runner, max_jobs=1, gpus=[])
    alone = predictions.submit_prediction(qwb, model, reviews_csv(tmp_path / "a", rows=7))
    worker.loop_once()
    job, env, handle = runner.launched[alone]
    assert job.threads is None  # nothing else runs: every core
    assert env[LANE_MARKER_ENV] == str(worker.lane_marker) and worker.lane_marker.exists()
    handle.code = 0
    worker.loop_once()
    assert not worker.lane_marker.exists()  # the lane is empty: training runs take every core again

    training = runs.submit_run(qwb, fake_spec(qwb, "fake:succeed"))
    worker.loop_once()
    assert runner.launched[training][0].threads is None and not worker.lane_marker.exists()
    beside = predictions.submit_prediction(qwb, model, reviews_csv(tmp_path / "b", rows=7))
    worker.loop_once()
    job, env, handle = runner.launched[beside]
    assert job.threads == lane_threads() and worker.lane_marker.exists()
    assert runner.launched[training][1][LANE_MARKER_ENV] == str(worker.lane_marker)
    handle.code = 0
    worker.loop_once()
    assert not worker.lane_marker.exists()
    runner.launched[training][2].code = 0
    worker.loop_once()


def test_a_training_run_leaves_the_lane_its_cores_while_the_marker_is_there(tmp_path):
    import torch

    from jobs.progress import LaneShare, lane_threads
    from jobs.training.trainer import ShareCoresWithLane

    before = torch.get_num_threads()
    marker = tmp_path / "worker.lane"
    callback = ShareCoresWithLane(LaneShare(str(marker)))
    try:
        callback.on_step_begin(None, None, None)
        assert torch.get_num_threads() == before
        marker.touch()
        callback.on_step_begin(None, None, None)
        assert torch.get_num_threads() == max(1, before - lane_threads())
        marker.unlink()
        callback.on_step_begin(None, None, None)
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)
