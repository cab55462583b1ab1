"""The short-job lane's share of the CPU: what a prediction in the lane costs the training run beside it.

    python bench/short_lane_share.py [--steps 400] [--rows 6000] [--data ../shared/data]

One worker as in production (``run_forever``, the real ``SubprocessRunner``, one main slot and the default
lane of one), the packaged MiniLM, SMS messages from the shared data (400 to train on, and ``--rows`` to
predict, the test file repeated). Three phases, one after another:

1. a training run of ``--steps`` steps (batch 8, 64 tokens) alone: its steps per second, sampled every
   0.25 s from the run's progress between its 10th step and its last evaluation;
2. a prediction of the file with that run's model, alone: its wall time (claim to end, model load included);
3. the same training run again, and once it is 20 steps in, the same prediction in the lane beside it:
   the training's steps per second while the prediction runs, and the prediction's wall time.

The lane's share is what each keeps of its speed alone: training steps/s beside the prediction over
steps/s alone, and prediction time alone over prediction time beside the training. On a machine with
nothing else running the two shares add up to about 1 when the two processes split the cores.
Writes bench/results/short_lane_share.json. Run it with nothing else on the machine.
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.shared_data import DEFAULT_DATA, read_csv  # noqa: E402
from jobs.queue.worker import Worker  # noqa: E402
from jobs.specs.run import DataSpec, RunSpec, TrainSpec  # noqa: E402
from storage.context import open_workbench  # noqa: E402
from storage.settings import Settings  # noqa: E402
from workbench.services import predictions, runs  # noqa: E402

log = logging.getLogger("bench.short_lane_share")
RESULTS = Path(__file__).parent / "results" / "short_lane_share.json"
FIRST_STEP = 10  # steps before this one pay for the start (threads, caches): left out of the rate


def _files(data: Path, folder: Path, rows: int) -> tuple[Path, Path]:
    sms = data / "sms_spam_collection"
    train = folder / "train.jsonl"
    with train.open("w", encoding="utf-8") as handle:
        for r in read_csv(sms / "train.csv")[:400]:
            handle.write(json.dumps({"text": r["text"], "label": r["label"]}) + "\n")
    texts = [r["text"] for r in read_csv(sms / "test.csv")]
    predict = folder / "predict.csv"
    with predict.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "text"])
        writer.writerows([i, texts[i % len(texts)]] for i in range(rows))
    return train, predict


def _wait(wb, job_id: int, samples: list | None = None, until=None) -> dict:
    """Poll a job every 0.25 s until it ends (or ``until(run)`` holds); ``samples`` gets (time, step)."""
    while True:
        run = runs.get_run(wb, job_id)
        if samples is not None and run["status"] == "running":
            samples.append((time.perf_counter(), int(run.get("step") or 0)))
        if until is not None and until(run):
            return run
        if run["status"] in ("succeeded", "failed", "cancelled"):
            if run["status"] != "succeeded":
                raise RuntimeError(f"job {job_id} {run['status']}: {run.get('error')}")
            return run
        time.sleep(0.25)


def _rate(samples: list[tuple[float, int]], start: float, end: float, last_step: int) -> float | None:
    """Steps per second over the samples taken between ``start`` and ``end`` (perf_counter), from step
    ``FIRST_STEP`` to ``last_step``."""
    inside = [(t, s) for t, s in samples if start <= t <= end and FIRST_STEP <= s <= last_step]
    if len(inside) < 2 or inside[-1][1] == inside[0][1]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def measure(data: Path, steps: int, rows: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wb = open_workbench(Settings.from_env({}, home=tmp))
        train, predict = _files(data, Path(tmp), rows)
        worker = Worker(wb, gpus=[], max_jobs=1, short_jobs=1)
        stop = threading.Event()
        thread = threading.Thread(target=worker.run_forever, args=(stop,), daemon=True)
        thread.start()
        spec = RunSpec(task="text-classification", data=DataSpec(train_path=str(train)),
                       train=TrainSpec(max_steps=steps, batch_size=8, max_length=64, seed=0))
        last = steps - 5  # the final evaluation and saving come after the last step
        try:
            alone: list = []
            first = runs.submit_run(wb, spec)
            _wait(wb, first, alone)
            train_alone = _rate(alone, 0.0, float("inf"), last)
            log.info("training alone: %.3f steps/s", train_alone)

            t0 = time.perf_counter()
            job = predictions.submit_prediction(wb, first, predict)
            _wait(wb, job, until=lambda r: r["status"] == "running")
            started = time.perf_counter()
            _wait(wb, job)
            predict_alone = time.perf_counter() - started
            log.info("prediction alone: %.1f s (%.1f s after submit)", predict_alone, time.perf_counter() - t0)

            beside: list = []
            second = runs.submit_run(wb, spec)
            _wait(wb, second, beside, until=lambda r: int(r.get("step") or 0) >= 2 * FIRST_STEP)
            job = predictions.submit_prediction(wb, first, predict)
            _wait(wb, job, beside, until=lambda r: r["status"] == "running")
            # the training's progress is sampled while the prediction runs (the prediction's own polls)
            p_started = time.perf_counter()
            while runs.get_run(wb, job)["status"] not in ("succeeded", "failed", "cancelled"):
                run = runs.get_run(wb, second)
                if run["status"] == "running":
                    beside.append((time.perf_counter(), int(run.get("step") or 0)))
                time.sleep(0.25)
            p_ended = time.perf_counter()
            predict_beside = p_ended - p_started
            if runs.get_run(wb, job)["status"] != "succeeded":
                raise RuntimeError(f"prediction {job} did not succeed")
            _wait(wb, second, beside)
            train_beside = _rate(beside, p_started, p_ended, last)
            train_after = _rate(beside, p_ended, float("inf"), last)
            overlap_steps = [s for t, s in beside if p_started <= t <= p_ended]
        finally:
            stop.set()
            thread.join(60)
            wb.close()
    result = {
        "cpu_count": os.cpu_count(), "steps": steps, "rows": rows, "model": "packaged all-MiniLM-L6-v2",
        "train_steps_per_s_alone": round(train_alone, 3),
        "train_steps_per_s_beside_prediction": round(train_beside, 3) if train_beside else None,
        "train_steps_per_s_after_prediction": round(train_after, 3) if train_after else None,
        "training_steps_during_prediction": [min(overlap_steps), max(overlap_steps)] if overlap_steps else None,
        "prediction_seconds_alone": round(predict_alone, 1),
        "prediction_seconds_beside_training": round(predict_beside, 1),
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
    }
    if train_beside:
        result["training_keeps"] = round(train_beside / train_alone, 3)
    result["prediction_keeps"] = round(predict_alone / predict_beside, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rows", type=int, default=6000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("transformers", "jobs", "datasets"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    result = measure(args.data, args.steps, args.rows)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
