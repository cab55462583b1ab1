"""The worker loop, driven by ``loop_once`` with real subprocesses running fake training.

Each test runs on SQLite and on PostgreSQL.
"""
from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from jobs.process.fake_runner import InProcessRunner, fake_subprocess_runner
from jobs.queue import table as queue
from jobs.queue.runner import ForkedHandle, Launch, SubprocessRunner
from jobs.queue.worker import Worker, detect_gpus
from jobs.specs.run import TrainSpec
from storage.models import CANCELLED, FAILED, QUEUED, RUNNING, SUCCEEDED, Run, utcnow
from tests.queue_support import alive, fake_spec, qwb, wait_until  # noqa: F401
from workbench.services import runs


@pytest.fixture(params=[False, True], ids=["new-process", "forked"])
def job_runner(request, tmp_path):
    """The subprocess runner both ways a job starts: as a new process, and forked from a warm one (started here
    and ready: a launch does not wait for it)."""
    runner = fake_subprocess_runner(preload=request.param)
    if request.param:
        warm = runner.warm_up(dict(os.environ), tmp_path)
        assert warm is not None and wait_until(lambda: warm.ready, timeout=120)
    return runner


def _run(wb, run_id) -> Run:
    with wb.db.session() as session:
        return session.get(Run, run_id)


def _submit(wb, model, **kw):
    return runs.submit_run(wb, fake_spec(wb, model, **kw))


def _finished(wb, *ids):
    return lambda: all(_run(wb, i).status in (SUCCEEDED, FAILED, CANCELLED) for i in ids)


def test_segfaulting_run_fails_with_a_sentence_and_the_worker_goes_on(qwb, job_runner):
    """Acceptance 4: os.abort() in the training process -> failed with a message; the next job runs."""
    crash = _submit(qwb, "fake:abort")
    after = _submit(qwb, "fake:succeed")
    worker = Worker(qwb, job_runner, max_jobs=1, gpus=[])
    assert wait_until(_finished(qwb, crash, after), timeout=60, step=worker.loop_once)
    failed = _run(qwb, crash)
    assert failed.status == FAILED
    assert failed.error == "the training process crashed (signal SIGABRT) — see the log"
    assert "training fake:abort" in failed.error_detail  # the log tail
    assert _run(qwb, after).status == SUCCEEDED
    assert wait_until(lambda: not worker.slots, timeout=10, step=worker.loop_once)  # reaped


def test_exceptions_become_human_sentences(qwb, job_runner):
    oom = _submit(qwb, "fake:oom", train=TrainSpec(batch_size=32))
    boom = _submit(qwb, "fake:raise")
    worker = Worker(qwb, job_runner, max_jobs=2, gpus=[])
    assert wait_until(_finished(qwb, oom, boom), timeout=60, step=worker.loop_once)
    assert _run(qwb, oom).error == "CUDA out of memory at batch size 32 — try 16 or enable LoRA"
    assert _run(qwb, boom).error == "training failed: ValueError: boom"
    assert "Traceback" in _run(qwb, boom).error_detail


def test_missing_dataset_file_fails_before_training(qwb):
    spec = fake_spec(qwb)
    spec.data.train_path = str(qwb.settings.home / "gone.jsonl")
    run_id = runs.submit_run(qwb, spec)
    worker = Worker(qwb, fake_subprocess_runner(), gpus=[])
    assert wait_until(_finished(qwb, run_id), timeout=30, step=worker.loop_once)
    assert _run(qwb, run_id).error.startswith("dataset file missing: ")


def test_cancel_stops_at_a_checkpoint_within_10_seconds(qwb, job_runner):
    """Acceptance 3 (fake training; tests/test_worker_e2e.py does it with the real engine)."""
    run_id = _submit(qwb, "fake:steps:400:0.05")
    worker = Worker(qwb, job_runner, gpus=[])
    assert wait_until(lambda: _run(qwb, run_id).step >= 3, timeout=30, step=worker.loop_once)
    assert runs.cancel_run(qwb, run_id) == "cancelling"
    started = time.monotonic()
    assert wait_until(_finished(qwb, run_id), timeout=10, step=worker.loop_once)
    assert time.monotonic() - started < 10
    run = _run(qwb, run_id)
    assert run.status == CANCELLED and run.error is None
    assert list((Path(run.output_dir) / "checkpoints").glob("checkpoint-*"))


def test_a_run_that_ignores_cancel_is_killed_after_the_timeout(qwb, job_runner):
    run_id = _submit(qwb, "fake:hang")
    worker = Worker(qwb, job_runner, gpus=[])
    worker.loop_once()
    pid = _run(qwb, run_id).pid
    runs.cancel_run(qwb, run_id)
    t0 = utcnow()
    worker.loop_once(now=t0)  # sees the cancel
    assert alive(pid)
    worker.loop_once(now=t0 + dt.timedelta(seconds=qwb.settings.cancel_timeout_seconds + 1))  # kills it
    assert wait_until(_finished(qwb, run_id), timeout=10, step=worker.loop_once)
    assert _run(qwb, run_id).status == CANCELLED
    assert not alive(pid)


def test_dead_workers_run_is_resumed_by_another_worker(qwb):
    """A lease that expires sends the run to another worker, which resumes from the checkpoint."""
    run_id = _submit(qwb, "fake:steps:20:0.01")
    t0 = utcnow()
    queue.claim(qwb.db, "dead-worker", now=t0)
    output = Path(_run(qwb, run_id).output_dir)
    for step, complete in ((10, True), (15, False)):  # what the dead attempt left: 15 was being saved
        (output / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
        if complete:
            (output / "checkpoints" / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    worker = Worker(qwb, fake_subprocess_runner(), gpus=[])
    worker.loop_once(now=t0 + dt.timedelta(seconds=1))
    assert _run(qwb, run_id).worker_id == "dead-worker"  # lease still valid
    worker.loop_once(now=t0 + dt.timedelta(seconds=qwb.settings.lease_seconds + 1))
    run = _run(qwb, run_id)
    assert (run.status, run.attempts, run.worker_id) == (RUNNING, 2, worker.worker_id)
    assert wait_until(_finished(qwb, run_id), timeout=30, step=worker.loop_once)
    run = _run(qwb, run_id)
    assert run.status == SUCCEEDED and run.metrics["resumed_from"] == 10.0 and run.step == run.total_steps == 20


def test_heartbeat_renews_the_lease_of_running_runs(qwb, job_runner):
    run_id = _submit(qwb, "fake:hang")
    worker = Worker(qwb, job_runner, gpus=[])
    t0 = utcnow()
    worker.loop_once(now=t0)
    later = t0 + dt.timedelta(seconds=qwb.settings.lease_seconds * 3)
    worker.loop_once(now=later)  # heartbeat first, so its own reclaim finds nothing stale
    run = _run(qwb, run_id)
    assert run.status == RUNNING and run.heartbeat_at == later and run.attempts == 1
    worker.shutdown()  # hands the run back for the next worker
    assert _run(qwb, run_id).status == QUEUED


def test_each_run_claimed_in_a_pass_gets_the_time_of_its_own_claim(qwb):
    """A launch takes a moment (a process to start, a warm process to answer): the second run of a pass is claimed
    after the first one's launch, and its lease starts then, not at the start of the pass."""
    class Slow:
        def launch(self, job, env):
            time.sleep(1.5)
            return type("Running", (), {"pid": os.getpid(), "poll": lambda self: None, "kill": lambda self: None})()

    first, second = _submit(qwb, "fake:hang"), _submit(qwb, "fake:hang")
    worker = Worker(qwb, Slow(), max_jobs=2, gpus=[])
    t0 = utcnow() - dt.timedelta(hours=1)
    assert worker.loop_once(now=t0) == 2
    one, two = _run(qwb, first), _run(qwb, second)
    assert one.heartbeat_at - t0 < dt.timedelta(seconds=1)
    assert two.heartbeat_at - t0 >= dt.timedelta(seconds=1.5) and two.started_at == two.heartbeat_at
    worker.slots.clear()


def test_a_forked_run_goes_on_when_its_warm_process_dies(qwb, tmp_path):
    """The OOM killer or a user ends the warm process in the middle of a run: the run is the worker's, not the warm
    process's, and ends as it would have (before, it was killed with it and recorded as out of memory)."""
    runner = fake_subprocess_runner(preload=True)
    warm = runner.warm_up(dict(os.environ), tmp_path)
    assert warm is not None and wait_until(lambda: warm.ready, timeout=120)
    run_id = _submit(qwb, "fake:steps:30:0.1")
    worker = Worker(qwb, runner, gpus=[])
    assert wait_until(lambda: (_run(qwb, run_id).step or 0) >= 3, timeout=60, step=worker.loop_once)
    assert isinstance(worker.slots[run_id].handle, ForkedHandle)
    os.kill(warm.process.pid, signal.SIGKILL)
    assert wait_until(_finished(qwb, run_id), timeout=60, step=worker.loop_once)
    run = _run(qwb, run_id)
    assert not warm.alive and run.status == SUCCEEDED, run.error
    assert wait_until(lambda: not worker.slots, timeout=10, step=worker.loop_once)


def test_a_run_that_cannot_start_fails_and_the_worker_continues(qwb):
    class Broken:
        def launch(self, job, env):
            raise OSError("no such interpreter")

    run_id = _submit(qwb, "fake:succeed")
    worker = Worker(qwb, Broken(), gpus=[])
    worker.loop_once()
    assert _run(qwb, run_id).error == "the training process could not start: no such interpreter"
    assert worker.slots == {}


def test_slots_limit_concurrency_and_gpus_are_assigned(qwb):
    ids = [_submit(qwb, "fake:hang") for _ in range(3)]
    worker = Worker(qwb, fake_subprocess_runner(), max_jobs=3, gpus=[4, 7])
    try:
        worker.loop_once()
        assert len(worker.slots) == 2  # one GPU each, two GPUs
        devices = sorted(_run(qwb, i).device for i in ids[:2])
        assert devices == ["cuda:4", "cuda:7"]
        assert _run(qwb, ids[2]).status == QUEUED
    finally:
        worker.shutdown()


def test_continue_and_clone_run_through_the_worker(qwb):
    first = _submit(qwb, "fake:succeed", name="base")
    worker = Worker(qwb, InProcessRunner(qwb), gpus=[])
    assert wait_until(_finished(qwb, first), timeout=30, step=worker.loop_once)
    more = runs.continue_run(qwb, first, 2)
    assert wait_until(_finished(qwb, more), timeout=30, step=worker.loop_once)
    record = runs.get_run(qwb, more)
    assert record["status"] == SUCCEEDED and record["name"] == "base (+2 epochs)"
    init = (Path(record["output_dir"]) / "model" / "config.json").read_text()
    assert str(Path(runs.get_run(qwb, first)["output_dir"]) / "model") in init


def test_subprocess_argv_and_environment(tmp_path):
    runner = SubprocessRunner()
    one = Launch(5, 2, tmp_path, (1,))
    assert runner.argv(one)[1:] == ["-m", "jobs.process.run_job", "5", "--attempt", "2"]
    ddp = runner.argv(Launch(5, 1, tmp_path, (0, 1)))
    assert ddp[1:6] == ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    assert ddp[6:8] == ["--main_process_ip", "127.0.0.1"] and ddp[8] == "--main_process_port"
    assert ddp[10:13] == ["-m", "jobs.process.run_job", "5"]
    assert Launch(5, 1, tmp_path, (0, 1)).device == "cuda:0,1" and Launch(5, 1, tmp_path).device == "cpu"
    # the child sees exactly its GPUs, and an empty list (CPU) as an empty CUDA_VISIBLE_DEVICES
    probe = SubprocessRunner(module="tests.print_env")
    for gpus, expected in (((), ""), ((3,), "3")):
        handle = probe.launch(Launch(1, 1, tmp_path / str(len(gpus)), gpus), {**os.environ, "PYTHONPATH": os.getcwd()})
        assert wait_until(lambda: handle.poll() is not None, timeout=30)
        assert (tmp_path / str(len(gpus)) / "process.log").read_text().strip().endswith(f"CVD=[{expected}]")


def test_detect_gpus_from_settings_and_environment(monkeypatch):
    assert detect_gpus("cpu") == []
    assert detect_gpus("cuda:2") == [2]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3")
    assert detect_gpus("auto") == [0, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_gpus("auto") == []


@pytest.mark.timeout(120)
def test_kill_9_of_the_worker_process_then_a_new_worker_resumes(qwb, tmp_path):
    """The worker is a real process killed with SIGKILL; its training child dies with it (no orphan
    keeps writing), and the next worker resumes from the checkpoint with the same total steps."""
    log = tmp_path / "executions.log"
    run_id = _submit(qwb, "fake:steps:60:0.1")
    env = {**os.environ, **qwb.settings.as_env(), "FAKE_RUNNER_LOG": str(log)}
    code = ("from jobs.process.fake_runner import fake_subprocess_runner; from jobs.queue.worker import Worker; "
            "from storage.context import open_workbench; "
            "Worker(open_workbench(), fake_subprocess_runner(), gpus=[]).run_forever()")
    worker_process = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        assert wait_until(lambda: _run(qwb, run_id).step >= 12, timeout=60, interval=0.1)
        child = _run(qwb, run_id).pid
        worker_process.send_signal(signal.SIGKILL)
        worker_process.wait(10)
    finally:
        worker_process.kill()
    assert wait_until(lambda: not alive(child), timeout=10), "the training child outlived its worker"
    assert _run(qwb, run_id).status == RUNNING  # nobody has noticed yet
    os.environ["FAKE_RUNNER_LOG"] = str(log)
    try:
        worker = Worker(qwb, fake_subprocess_runner(), gpus=[])
        assert wait_until(_finished(qwb, run_id), timeout=60, step=worker.loop_once, interval=0.1)
    finally:
        del os.environ["FAKE_RUNNER_LOG"]
    run = _run(qwb, run_id)
    assert run.status == SUCCEEDED and run.attempts == 2
    assert run.metrics["resumed_from"] >= 10 and run.step == run.total_steps == 60
    assert Counter(log.read_text().split()) == {str(run_id): 2}
    curve = runs.run_curves(qwb, run_id)["train/loss"]
    assert [p["step"] for p in curve] == list(range(1, 61))  # replayed steps are not logged twice


def test_max_attempts_comes_from_the_settings(qwb):
    """WORKBENCH_MAX_ATTEMPTS=1: a run whose only worker died fails at once instead of being retried."""
    import dataclasses

    strict = dataclasses.replace(qwb.settings, max_attempts=1)
    qwb.settings, default_settings = strict, qwb.settings
    try:
        run_id = _submit(qwb, "fake:ok")
        t = utcnow()
        queue.claim(qwb.db, "dead-worker", now=t)
        worker = Worker(qwb, InProcessRunner(qwb), gpus=[])
        assert worker.max_attempts == 1
        worker._reclaim(t + dt.timedelta(seconds=strict.lease_seconds + 1))
        run = _run(qwb, run_id)
        assert run.status == FAILED and "stopped responding 1 times" in run.error
    finally:
        qwb.settings = default_settings
