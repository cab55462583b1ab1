"""End-to-end: the queue with the real training engine on a tiny config-built BERT.

Acceptance 2 (kill -9 of `workbench worker`, then a new worker resumes with the same total
steps) and acceptance 3 (cancel reaches "cancelled" within 10 s with a checkpoint), each on
SQLite and on PostgreSQL.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.queue.worker import Worker
from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from storage.models import CANCELLED, RUNNING, SUCCEEDED
from tests.queue_support import qwb, wait_until  # noqa: F401
from tests.tiny_models import classification_records, tiny_bert, write_jsonl
from workbench.services import runs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


def _spec(tmp_path: Path, model: Path, max_steps: int, eval_steps: int) -> RunSpec:
    train = write_jsonl(tmp_path / "train.jsonl", classification_records(64))
    validation = write_jsonl(tmp_path / "validation.jsonl", classification_records(8, 1))
    return RunSpec(task="text-classification", model=str(model),
                   data=DataSpec(train_path=str(train), validation_path=str(validation)),
                   train=TrainSpec(max_steps=max_steps, eval_steps=eval_steps, batch_size=4, learning_rate=1e-3,
                                   max_length=16))


def _worker_process(wb, log: Path) -> subprocess.Popen:
    env = {**os.environ, **wb.settings.as_env(), "HF_HUB_OFFLINE": "1"}
    with open(log, "ab") as fh:
        return subprocess.Popen([str(Path(sys.executable).parent / "workbench"), "worker", "--gpus", "none"],
                                env=env, stdout=fh, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def test_kill_9_of_the_worker_then_a_new_worker_resumes_from_the_checkpoint(qwb, tiny, tmp_path):
    run_id = runs.submit_run(qwb, _spec(tmp_path, tiny, max_steps=40, eval_steps=10))
    first = _worker_process(qwb, tmp_path / "worker1.log")
    try:
        assert wait_until(lambda: runs.get_run(qwb, run_id)["step"] >= 13, timeout=120, interval=0.1), \
            (tmp_path / "worker1.log").read_text()[-3000:]
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    killed_at = runs.get_run(qwb, run_id)
    assert killed_at["status"] == RUNNING and killed_at["step"] < 40
    checkpoints = Path(killed_at["output_dir"]) / "checkpoints"
    assert list(checkpoints.glob("checkpoint-*"))
    second = _worker_process(qwb, tmp_path / "worker2.log")
    try:
        assert wait_until(lambda: runs.get_run(qwb, run_id)["status"] not in ("queued", RUNNING), timeout=240,
                          interval=0.5), (tmp_path / "worker2.log").read_text()[-3000:]
    finally:
        _stop(second)
    record = runs.get_run(qwb, run_id)
    assert record["status"] == SUCCEEDED, record["error_detail"]
    assert record["attempts"] == 2
    assert record["metrics"]["steps"] == record["total_steps"] == record["step"] == 40
    log = Path(record["output_dir"], "process.log").read_text()
    starts = [json.loads(line.split("run starts: ", 1)[1]) for line in log.splitlines() if "run starts: " in line]
    assert starts[0]["resumed_from"] is None and "checkpoint-" in starts[-1]["resumed_from"]
    assert starts[-1]["total_steps"] == 40
    # No step logged twice: not across the two attempts, not by the final evaluation at the last step.
    curves = runs.run_curves(qwb, run_id)
    assert "eval/accuracy" in curves and curves["eval/accuracy"][-1]["step"] == 40
    for name, points in curves.items():
        steps = [p["step"] for p in points]
        assert steps == sorted(set(steps)), name


def test_cancel_reaches_cancelled_within_10_s_with_a_checkpoint(qwb, tiny, tmp_path):
    run_id = runs.submit_run(qwb, _spec(tmp_path, tiny, max_steps=2000, eval_steps=500))
    worker = Worker(qwb, gpus=[])
    try:
        assert wait_until(lambda: runs.get_run(qwb, run_id)["step"] >= 3, timeout=120, step=worker.loop_once,
                          interval=0.1)
        runs.cancel_run(qwb, run_id)
        started = time.monotonic()
        assert wait_until(lambda: runs.get_run(qwb, run_id)["status"] == CANCELLED, timeout=10,
                          step=worker.loop_once, interval=0.1)
        elapsed = time.monotonic() - started
    finally:
        worker.shutdown()
    record = runs.get_run(qwb, run_id)
    assert elapsed < 10 and record["error"] is None and record["device"] == "cpu"
    assert list((Path(record["output_dir"]) / "checkpoints").glob("checkpoint-*/trainer_state.json"))
