"""Fake training for tests: the real run_job plumbing around a train function that needs no torch.

The behaviour is chosen by the run's model name, so one queue can mix them:

    fake:succeed          one step, a model folder, accuracy 1.0 (any non-fake model name too)
    fake:steps:N[:SEC]    N steps of SEC seconds, a checkpoint every 5 steps, resumes from it,
                          stops at a checkpoint on cancel (like the engine's callback)
    fake:sweep:N[:SEC]    like steps, plus an evaluation (``eval/accuracy``) every 5 steps whose value depends
                          on the learning rate (best at 5e-5) and grows with the step: a sweep objective
    fake:abort            os.abort(): a real SIGABRT, as a segfault would be
    fake:oom              raises the RuntimeError torch raises on CUDA OOM
    fake:raise            raises ValueError
    fake:hang             sleeps without ever checking for a cancel (to test the kill after a timeout)

A prediction job runs the real ``jobs.predict.job.predict_file`` (reading, chunks, resume, output) with
``LengthPredictor`` in place of a model (``fake_predict``); it sleeps ``FAKE_PREDICT_SECONDS_PER_CHUNK``
seconds (default 0) after each chunk, so a test can kill it between chunks.

``python -m jobs.process.fake_runner RUN_ID --attempt N`` is the subprocess form
(``fake_subprocess_runner()``); ``InProcessRunner`` runs the same in a thread for
tests that only exercise the queue. When ``FAKE_RUNNER_LOG`` is set, every
executed attempt appends ``run_id`` to that file (O_APPEND, one write), so tests
can check that each run executed exactly once.
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from jobs.predict.job import predict_file
from jobs.predict.spec import ModelRef, PredictSpec
from jobs.process import run_job
from jobs.progress import Cancelled, Reporter
from jobs.queue.runner import Launch, SubprocessRunner
from jobs.specs.run import RunSpec
from storage.exiting import exit_process

CHECKPOINT_EVERY = 5


def _record_execution(output_dir: Path) -> None:
    path = os.environ.get("FAKE_RUNNER_LOG")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{output_dir.name}\n".encode())
        finally:
            os.close(fd)


def _save_checkpoint(output_dir: Path, step: int) -> None:
    folder = output_dir / "checkpoints" / f"checkpoint-{step}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def _last_checkpoint(output_dir: Path) -> int:
    steps = [int(p.name.split("-")[1]) for p in (output_dir / "checkpoints").glob("checkpoint-*")]
    return max(steps, default=0)


def sweep_accuracy(spec: RunSpec, step: int, total: int) -> float:
    """The fake sweep objective: a learning rate near 5e-5 is best; every run improves with its steps."""
    lr = spec.train.learning_rate or 5e-5
    quality = math.exp(-(math.log10(lr) - math.log10(5e-5)) ** 2)
    return round(quality * (0.5 + 0.5 * step / total), 6)


def _steps(output_dir: Path, reporter: Reporter, total: int, delay: float,
           spec: Optional[RunSpec] = None) -> dict[str, float]:
    start = _last_checkpoint(output_dir)
    for step in range(start + 1, total + 1):
        time.sleep(delay)
        reporter.progress(step, total, step / total)
        reporter.metrics(step, step / total, {"train/loss": 1.0 / step})
        if step % CHECKPOINT_EVERY == 0:
            _save_checkpoint(output_dir, step)
            if spec is not None:
                reporter.metrics(step, step / total, {"eval/accuracy": sweep_accuracy(spec, step, total)})
        if reporter.cancel_requested():
            _save_checkpoint(output_dir, step)
            raise Cancelled()
    metrics = {"loss": 1.0 / total, "resumed_from": float(start)}
    if spec is not None:
        metrics["accuracy"] = sweep_accuracy(spec, total, total)
    return metrics


def fake_train(spec: RunSpec, output_dir: Path, reporter: Reporter, *, device: str = "auto",
               init_model_path: Optional[Path] = None) -> Mapping[str, Any]:
    _record_execution(output_dir)
    mode, *args = (spec.model.split(":", 1)[1] if spec.model.startswith("fake:") else "succeed").split(":")
    if mode == "abort":
        os.abort()
    if mode == "oom":
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    if mode == "raise":
        raise ValueError("boom")
    if mode == "hang":
        time.sleep(3600)
    if mode in ("steps", "sweep"):
        metrics = _steps(output_dir, reporter, int(args[0]), float(args[1]) if len(args) > 1 else 0.05,
                         spec if mode == "sweep" else None)
    else:
        reporter.progress(1, 1, 1.0)
        reporter.metrics(1, 1.0, {"train/loss": 0.5})
        metrics = {"accuracy": 1.0}
    (output_dir / "model").mkdir(parents=True, exist_ok=True)
    (output_dir / "model" / "config.json").write_text(json.dumps({"init_from": str(init_model_path or "")}))
    return metrics


class LengthPredictor:
    """A torch-free text classifier for queue tests: "long" for a text over 20 characters, else "short"."""

    task, labels, batch_size = "text-classification", ("long", "short"), 16

    def predict(self, rows: list[dict]) -> list[dict]:
        out = []
        for row in rows:
            label = "long" if len(row["text"]) > 20 else "short"
            out.append({"label": label, "score": 1.0, "scores": {name: float(name == label) for name in self.labels}})
        return out


def fake_predict(spec: PredictSpec, model: ModelRef, output_dir: Path, reporter: Reporter, *,
                 device: str = "auto") -> Mapping[str, Any]:
    """A prediction job through the real chunked writer, with ``LengthPredictor`` for the model."""
    _record_execution(Path(output_dir))
    pause = float(os.environ.get("FAKE_PREDICT_SECONDS_PER_CHUNK") or 0)
    return predict_file(spec, LengthPredictor(), output_dir, reporter, after_chunk=lambda _k: time.sleep(pause))


def fake_subprocess_runner(preload: bool = False) -> SubprocessRunner:
    """A real subprocess per run, with fake training inside (forked from a warm process with ``preload``)."""
    return SubprocessRunner(module="jobs.process.fake_runner", preload=preload)


class ThreadHandle:
    def __init__(self, thread: threading.Thread, result: list[int]):
        self.thread, self.result, self.pid = thread, result, os.getpid()

    def poll(self) -> Optional[int]:
        return None if self.thread.is_alive() else (self.result[0] if self.result else 1)

    def kill(self) -> None:
        """A thread cannot be killed; the fake stops at its next cancel check instead."""


class InProcessRunner:
    """Runs fake training in a thread of the calling process: fast, for queue-only tests."""

    def __init__(self, wb):
        self.wb = wb

    def launch(self, job: Launch, env: Mapping[str, str]) -> ThreadHandle:
        result: list[int] = []

        def target() -> None:
            result.append(run_job.execute(self.wb, job.run_id, job.attempt, fake_train, predict_fn=fake_predict))

        thread = threading.Thread(target=target, name=f"fake-run-{job.run_id}", daemon=True)
        thread.start()
        return ThreadHandle(thread, result)


if __name__ == "__main__":
    exit_process(run_job.main(train_fn=fake_train, predict_fn=fake_predict))
