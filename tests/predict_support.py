"""What the prediction and evaluation tests share: a trained run with a model folder, job functions that
``jobs.process.run_job.execute`` is handed as the real ``predict_fn`` / ``evaluate_fn`` are, a runner and input files.

A prediction is ``jobs.process.fake_runner.fake_predict``: the real chunked reader and writer of ``jobs.predict``
with a torch-free predictor ("long" for a text over 20 characters, else "short"). An evaluation scores a
test set with a rule of this module. Everything around them is the real queue, worker and run_job code.
"""
from __future__ import annotations

import csv
import json
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from jobs.process import run_job
from jobs.process.fake_runner import ThreadHandle, fake_predict, fake_train
from jobs.progress import Cancelled
from jobs.queue import table as queue
from jobs.queue.worker import Worker
from storage.models import CANCELLED, FAILED, RUNNING, SUCCEEDED, Run
from tests.queue_support import fake_spec, wait_until
from workbench.services import runs

LABELS = ("neg", "pos")


# -- the model's run, and the job functions -----------------------------------------------------------------

def trained_run(wb, status: str = SUCCEEDED, *, model: bool = True) -> int:
    """A training run that ended in ``status``, with a saved model folder as the engine leaves one."""
    run_id = runs.submit_run(wb, fake_spec(wb, name="sentiment"))
    claimed = queue.claim(wb.db, "trainer", only=[run_id])
    out = Path(claimed.output_dir)
    if model:
        (out / "model").mkdir(parents=True)
        (out / "model" / "config.json").write_text(json.dumps({"id2label": {"1": "pos", "0": "neg"}}))
        (out / "metrics.json").write_text(json.dumps({"accuracy": 0.9, "hyperparameters": {"max_length": 64}}))
    if status != RUNNING:
        assert queue.finish(wb.db, run_id, claimed.attempt, status)
    return run_id


class Jobs:
    """Records what ``execute`` hands the job functions. A prediction is ``fake_predict``, after ``delay``
    seconds per row (checking for a cancel after each) when a delay is given; ``fail`` raises instead."""

    def __init__(self, delay: float = 0.0, fail: str = ""):
        self.delay, self.fail = delay, fail
        self.calls: list[dict[str, Any]] = []

    def predict(self, spec, model, output_dir, reporter, *, device):
        self.calls.append({"spec": spec, "model": model, "output_dir": output_dir, "device": device})
        if self.fail:
            raise ValueError(self.fail)
        if self.delay:
            with open(spec.input_path, newline="", encoding="utf-8") as handle:
                total = sum(1 for _ in csv.DictReader(handle))
            for done in range(1, total + 1):
                time.sleep(self.delay)
                reporter.progress(done, total, 0.0)
                if reporter.cancel_requested():
                    raise Cancelled()
        return fake_predict(spec, model, output_dir, reporter, device=device)

    def evaluate(self, spec, model, records_paths, output_dir, reporter, *, device):
        self.calls.append({"spec": spec, "model": model, "records": records_paths})
        records = [json.loads(line) for path in records_paths for line in Path(path).read_text().splitlines()]
        right = sum(("good" in r["text"]) == (r["label"] == "pos") for r in records)
        reporter.progress(len(records), len(records), 0.0)
        metrics = {"accuracy": right / len(records), "examples": len(records)}
        (output_dir / "metrics.json").write_text(json.dumps(metrics))
        (output_dir / "tables.json").write_text(json.dumps({"per_class": {}}))
        (output_dir / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return {"metrics": metrics}


class JobRunner:
    """``jobs.process.fake_runner.InProcessRunner`` with this module's job functions: an attempt per thread."""

    def __init__(self, wb, jobs: Jobs):
        self.wb, self.jobs = wb, jobs

    def launch(self, job, env):
        result: list[int] = []

        def target() -> None:
            result.append(run_job.execute(self.wb, job.run_id, job.attempt, fake_train,
                                          predict_fn=self.jobs.predict, evaluate_fn=self.jobs.evaluate))

        thread = threading.Thread(target=target, name=f"job-{job.run_id}", daemon=True)
        thread.start()
        return ThreadHandle(thread, result)


def drain(wb, jobs: Jobs, *ids: int, timeout: float = 30) -> None:
    worker = Worker(wb, JobRunner(wb, jobs), gpus=[])
    assert wait_until(lambda: all(runs.get_run(wb, i)["status"] in (SUCCEEDED, FAILED, CANCELLED) for i in ids),
                      timeout=timeout, step=worker.loop_once)
    worker.shutdown()


def reviews_csv(folder: Path, name: str = "reviews.csv", rows: int = 5) -> Path:
    """Rows whose text is long (over 20 characters: "long" to ``LengthPredictor``) at odd ids."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["id,text"] + [f"{i},{'a good film all the way' if i % 2 else 'bad'} {i}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def labelled_jsonl(folder: Path, rows: int = 20) -> Path:
    path = folder / "test.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": f"{'good' if i % 2 else 'bad'} film number {i}",
                                        "label": "pos" if i % 2 else "neg"}) + "\n" for i in range(rows)))
    return path


def job_count(wb) -> int:
    with wb.db.session() as session:
        return session.scalar(select(func.count()).select_from(Run).where(Run.kind != "train"))


