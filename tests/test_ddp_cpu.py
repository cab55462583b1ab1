"""Multi-process (DDP) training on the CPU with gloo, end to end through the queue (issue 13).

Each test trains a tiny config-built BERT with 2 processes launched by torchrun
(``workbench worker --procs 2`` / a spec's ``procs: 2``). Only SQLite: the
distributed path does not depend on the database, and the 2-core CI budget is small.

What "trains like one process with the same global batch" is checked against: a
1-process run of a dropout-free tiny BERT (so no rank draws masks of its own)
whose sampler is handed the order the two ranks draw (``jobs.training.sampling`` with the
shared seed, cut at the per-rank batch), so each of its steps trains on the very
examples the two ranks trained on together at that step (recorded by
``tests/ddp_probe.py``, compared step by step). Then every step's training loss
must match within LOSS_TOLERANCE (measured: at most 1.4e-6 relative apart for
text, 2.4e-7 for tokens; a reference with another seed is 17 % and 4 % apart).
The final metric is compared too, but on 16 validation examples made of 8
distinct texts one prediction moves it by 1/8: that comparison alone, between
runs trained on different batches, failed on a clean clone (0.875 against 1.0).
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from jobs.progress import RecordingReporter
from jobs.queue.runner import SubprocessRunner
from jobs.queue.worker import Worker
from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from jobs.training.engine import run_training
from storage.context import open_workbench
from storage.models import CANCELLED, FAILED, RUNNING, SUCCEEDED
from tests.queue_support import make_settings, wait_until
from tests.tiny_models import classification_records, ner_records, tiny_bert, write_jsonl
from workbench.services import runs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

METRIC_TOLERANCE = 0.05
LOSS_TOLERANCE = 1e-3  # relative, per step; see the module's docstring
EPOCHS, N_TRAIN, PER_RANK_BATCH = 3, 64, 4  # 64 = a whole number of global batches of 8: no padding at an epoch's end


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # no dropout: each rank would draw its own masks, and the 1-process reference others again
    return tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert", hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)


@pytest.fixture
def wb(tmp_path, monkeypatch):
    for key in list(os.environ):
        if key.startswith("WORKBENCH_") and not key.startswith("WORKBENCH_TEST_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PYTHONPATH", os.getcwd())  # the ranks import tests.ddp_probe
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # 2 ranks on a 2-core machine
    workbench = open_workbench(make_settings(tmp_path, f"sqlite:///{tmp_path / 'home' / 'workbench.db'}"))
    yield workbench
    workbench.close()


def _spec(tmp_path: Path, model: Path, task: str, procs: int, batch: int, **train) -> RunSpec:
    if task == "text-classification":
        records, validation = classification_records(N_TRAIN), classification_records(16, 1)
    else:
        records, validation = _four_words(N_TRAIN), _four_words(16, 1)
    train_path = write_jsonl(tmp_path / f"{task}.train.jsonl", records)
    validation_path = write_jsonl(tmp_path / f"{task}.validation.jsonl", validation)
    hp = {"epochs": EPOCHS, "batch_size": batch, "learning_rate": 5e-3, "max_length": 16, **train}
    return RunSpec(task=task, model=str(model), procs=procs,
                   data=DataSpec(train_path=str(train_path), validation_path=str(validation_path)),
                   train=TrainSpec(**hp))


def _four_words(n: int, seed: int = 0) -> list[dict]:
    """``ner_records`` of four words each ("alice flew to paris", never "new york"): every rank's batch then
    holds as many labelled tokens as the other's, so the mean of the ranks' mean losses, which DDP trains
    on, is the mean over the global batch that one process trains on (measured with "new york" among them:
    up to 0.9 % apart at a step)."""
    found = [r for r in ner_records(4 * n, seed) if len(r["tokens"]) == 4][:n]  # 2 places in 3 are one word
    assert len(found) == n
    return found


def _worker(wb) -> Worker:
    return Worker(wb, SubprocessRunner(module="tests.ddp_probe"), gpus=[], procs=2)


def _run_to_end(wb, run_id: int, worker: Worker, timeout: float = 180) -> dict:
    try:
        assert wait_until(lambda: runs.get_run(wb, run_id)["status"] not in ("queued", RUNNING), timeout=timeout,
                          step=worker.loop_once, interval=0.2)
        assert wait_until(lambda: not worker.slots, timeout=30, step=worker.loop_once, interval=0.2)
    finally:
        worker.shutdown()
    return runs.get_run(wb, run_id)


def _process_tree(pid: int) -> list[psutil.Process]:
    try:
        return [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _all_gone(processes: list[psutil.Process]) -> bool:
    def gone(p):
        try:
            return p.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    return all(gone(p) for p in processes)


def _seen_batches(path: Path) -> list[list[int]]:
    """The training batches one process loaded, in order (``tests/ddp_probe.py`` writes them)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def _seen_per_epoch(output_dir: Path, rank: int, batches_per_epoch: int) -> list[set[int]]:
    batches = _seen_batches(output_dir / f"seen.rank{rank}.jsonl")
    return [{i for batch in batches[e:e + batches_per_epoch] for i in batch}
            for e in range(0, len(batches), batches_per_epoch)]


def _train_alone_on_the_ranks_order(spec: RunSpec, output_dir: Path, monkeypatch) -> tuple[dict, RecordingReporter]:
    """``spec`` trained by one process whose every step takes the examples all ranks took at that step.

    The ranks draw one bucketed order per epoch from ``seed + epoch``, cut it into per-rank batches and
    deal them out in turn, so step k trains on the order's k-th slice of ``procs x batch_size`` examples.
    One process with the global batch takes the same slices when its sampler draws the same order.
    """
    import jobs.training.trainer
    from tests.ddp_probe import RecordingDataset

    per_rank, shared_seed, sampler = spec.train.batch_size, spec.train.seed, jobs.training.trainer.BucketedSampler
    monkeypatch.setattr(jobs.training.trainer, "BucketedSampler",
                        lambda lengths, batch_size, strata=None, seed=None: sampler(lengths, per_rank, strata,
                                                                                    seed=shared_seed))
    base_init = jobs.training.trainer.WorkbenchTrainer.__init__

    def init(self, *args, **kwargs):
        kwargs["train_dataset"] = RecordingDataset(kwargs["train_dataset"], output_dir / "seen.alone.jsonl")
        base_init(self, *args, **kwargs)

    monkeypatch.setattr(jobs.training.trainer.WorkbenchTrainer, "__init__", init)
    alone = dataclasses.replace(spec, procs=1, train=dataclasses.replace(spec.train, batch_size=spec.procs * per_rank))
    reporter = RecordingReporter()
    output_dir.mkdir(parents=True, exist_ok=True)
    return run_training(alone, output_dir, reporter, device="cpu"), reporter


@pytest.mark.parametrize("task, metric", [("text-classification", "accuracy"),
                                          ("token-classification", "entity_f1")])
def test_two_cpu_processes_train_like_one_with_the_same_global_batch(wb, tiny, tmp_path, task, metric, monkeypatch):
    spec = _spec(tmp_path, tiny, task, procs=2, batch=PER_RANK_BATCH)
    run_id = runs.submit_run(wb, spec)
    record = _run_to_end(wb, run_id, _worker(wb))
    assert record["status"] == SUCCEEDED, record["error_detail"]
    assert record["device"] == "cpu x2"
    out = Path(record["output_dir"])
    two = record["metrics"]
    steps = EPOCHS * N_TRAIN // (2 * PER_RANK_BATCH)
    assert two["processes"] == 2 and two["steps"] == record["total_steps"] == record["step"] == steps

    one, reporter = _train_alone_on_the_ranks_order(spec, tmp_path / "one", monkeypatch)
    assert one["steps"] == steps and one["processes"] == 1
    # The same examples at every step: rank 0's k-th batch and rank 1's k-th batch make the k-th global batch.
    rank0, rank1 = _seen_batches(out / "seen.rank0.jsonl"), _seen_batches(out / "seen.rank1.jsonl")
    alone = _seen_batches(tmp_path / "one" / "seen.alone.jsonl")
    assert len(rank0) == len(rank1) == len(alone) == steps
    for step, (a, b, c) in enumerate(zip(rank0, rank1, alone), start=1):
        assert sorted(a + b) == sorted(c), f"step {step}: the ranks trained on {a} + {b}, one process on {c}"
    # ...hence the same losses, step by step (the 2-process figure is the mean of the ranks' mean losses).
    two_losses = [(p["step"], p["value"]) for p in runs.run_curves(wb, run_id)["train/loss"]]
    one_losses = [(step, values["train/loss"]) for step, _, values in reporter.points if "train/loss" in values]
    assert [s for s, _ in two_losses] == [s for s, _ in one_losses] == list(range(1, steps + 1))
    for (step, loss2), (_, loss1) in zip(two_losses, one_losses):
        assert abs(loss2 - loss1) <= LOSS_TOLERANCE * loss1, f"step {step}: {loss2} with 2 processes, {loss1} alone"
    assert one[metric] == 1.0  # the model learned the task, and two processes did as well
    assert abs(two[metric] - one[metric]) <= METRIC_TOLERANCE, (two, one)

    # Only rank 0 wrote the model, the outputs and the database rows; rank 1 kept its own log.
    assert (out / "model" / "model.safetensors").is_file() and (out / "metrics.json").is_file()
    assert json.loads((out / "metrics.json").read_text())["processes"] == 2
    rank1_log = (out / "train.rank1.log").read_text()
    assert "rank 1 of 2: done; rank 0 writes the model" in rank1_log
    assert "rank 1 of 2" not in (out / "train.log").read_text()
    for name, points in runs.run_curves(wb, run_id).items():
        point_steps = [p["step"] for p in points]
        assert point_steps == sorted(set(point_steps)), name

    # The bucketed sampler: in each epoch the two ranks trained on disjoint halves that cover the data.
    per_epoch = steps // EPOCHS
    rank0, rank1 = _seen_per_epoch(out, 0, per_epoch), _seen_per_epoch(out, 1, per_epoch)
    assert len(rank0) == len(rank1) == EPOCHS
    for epoch in range(EPOCHS):
        assert not rank0[epoch] & rank1[epoch], f"epoch {epoch}: an example was trained on by both ranks"
        assert rank0[epoch] | rank1[epoch] == set(range(N_TRAIN))


def _ranks_of(wb, run_id: int) -> list[psutil.Process]:
    """The launcher of the run's attempt and its two ranks (once both have started)."""
    found: list[psutil.Process] = []

    def started() -> bool:
        found[:] = _process_tree(runs.get_run(wb, run_id)["pid"] or -1)
        return len([p for p in found if "jobs.process.run_job" in " ".join(p.cmdline()) or "ddp_probe" in " ".join(p.cmdline())]) >= 2
    assert wait_until(started, timeout=60, interval=0.2)
    return found


def test_cancel_stops_every_rank_at_a_checkpoint(wb, tiny, tmp_path):
    run_id = runs.submit_run(wb, _spec(tmp_path, tiny, "text-classification", procs=2, batch=PER_RANK_BATCH,
                                       epochs=None, max_steps=2000, eval_steps=500))
    worker = _worker(wb)
    try:
        assert wait_until(lambda: runs.get_run(wb, run_id)["step"] >= 3, timeout=120, step=worker.loop_once,
                          interval=0.1)
        processes = _ranks_of(wb, run_id)
        runs.cancel_run(wb, run_id)
        started = time.monotonic()
        assert wait_until(lambda: runs.get_run(wb, run_id)["status"] == CANCELLED, timeout=30,
                          step=worker.loop_once, interval=0.1)
        elapsed = time.monotonic() - started
        assert wait_until(lambda: _all_gone(processes), timeout=30, step=worker.loop_once, interval=0.2), \
            "a rank outlived the cancelled run"
    finally:
        worker.shutdown()
    record = runs.get_run(wb, run_id)
    assert elapsed < 10 and record["error"] is None
    assert list((Path(record["output_dir"]) / "checkpoints").glob("checkpoint-*/trainer_state.json"))
    log = (Path(record["output_dir"]) / "process.log").read_text()
    assert "ChildFailedError" not in log  # a cancel is no failure for the launcher either


def test_kill_9_of_the_worker_kills_every_rank_and_the_resumed_run_finishes(wb, tiny, tmp_path):
    run_id = runs.submit_run(wb, _spec(tmp_path, tiny, "text-classification", procs=None, batch=PER_RANK_BATCH,
                                       epochs=None, max_steps=30, eval_steps=10))
    env = {**os.environ, **wb.settings.as_env()}
    with open(tmp_path / "worker.log", "ab") as log:
        first = subprocess.Popen([str(Path(sys.executable).parent / "workbench"), "worker", "--gpus", "none",
                                  "--procs", "2"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: runs.get_run(wb, run_id)["step"] >= 13, timeout=120, interval=0.1), \
            (tmp_path / "worker.log").read_text()[-3000:]
        processes = _ranks_of(wb, run_id)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    assert wait_until(lambda: _all_gone(processes), timeout=15, interval=0.2), \
        f"orphans left: {[p.pid for p in processes if p.is_running()]}"
    killed_at = runs.get_run(wb, run_id)
    assert killed_at["status"] == RUNNING and killed_at["device"] == "cpu x2" and killed_at["step"] < 30
    # The next worker takes the run over once its lease expires, and resumes it from the checkpoint.
    record = _run_to_end(wb, run_id, Worker(wb, gpus=[], procs=2))
    assert record["status"] == SUCCEEDED, record["error_detail"]
    assert record["attempts"] == 2 and record["metrics"]["steps"] == record["total_steps"] == record["step"] == 30
    log = Path(record["output_dir"], "train.log").read_text()
    starts = [json.loads(line.split("run starts: ", 1)[1]) for line in log.splitlines() if "run starts: " in line]
    assert starts[0]["resumed_from"] is None and "checkpoint-" in starts[-1]["resumed_from"]
    assert starts[-1]["processes"] == 2 and starts[-1]["total_steps"] == 30


def test_a_rank_that_crashes_fails_the_run_with_its_own_message(wb, tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_CRASH_RANK", "1")
    monkeypatch.setenv("PROBE_CRASH_STEP", "2")
    run_id = runs.submit_run(wb, _spec(tmp_path, tiny, "text-classification", procs=2, batch=PER_RANK_BATCH))
    worker = _worker(wb)
    record = _run_to_end(wb, run_id, worker)
    assert record["status"] == FAILED
    assert record["error"].startswith("rank 1 of 2: "), record["error"]
    assert "probe: rank 1 broke on purpose at step 2" in record["error"]
    assert wait_until(lambda: not [p for p in psutil.process_iter(["cmdline"])
                                   if f"tests.ddp_probe {run_id} --attempt" in " ".join(p.info["cmdline"] or [])
                                   and p.status() != psutil.STATUS_ZOMBIE], timeout=15), "a rank outlived the failed run"
