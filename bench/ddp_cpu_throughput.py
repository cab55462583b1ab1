"""Throughput of 1 vs N CPU processes per run (DDP on gloo), through the queue and the worker.

    python bench/ddp_cpu_throughput.py [--data TRAIN.csv --dev DEV.csv] [--rows 320] [--procs 2] [--repeat 1]

The packaged MiniLM trains one epoch on the first ``--rows`` SMS messages
(../shared/data), with the same global batch of 16: one process with batch
16 and all cores, then N processes with batch 16/N and cores/N threads each.
Reported per setting: the engine's samples/s (optimisation only: evaluation and
checkpoints excluded), the run's wall time from submit to done (process start,
model loading and evaluation included), accuracy, and the load average at the
end (other jobs on the machine disturb the times, not the accuracy).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shared_data import DEFAULT_DATA, read_csv, write_jsonl  # noqa: E402

GLOBAL_BATCH = 16


def one_run(home: Path, train: str, dev: str, procs: int) -> dict:
    """Submit one run with ``procs`` processes and drive a worker until it ends."""
    from jobs.queue.worker import Worker
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.catalogue import packaged_model_path
    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.services import runs

    wb = open_workbench(Settings.from_env({}, home=str(home), device="cpu"))
    try:
        spec = RunSpec(task="text-classification", model=str(packaged_model_path()), procs=procs,
                       data=DataSpec(train_path=train, validation_path=dev),
                       train=TrainSpec(epochs=1, batch_size=GLOBAL_BATCH // procs, learning_rate=5e-5, seed=42))
        started = time.perf_counter()
        run_id = runs.submit_run(wb, spec)
        worker = Worker(wb, gpus=[], procs=procs)
        try:
            while runs.get_run(wb, run_id)["status"] in ("queued", "running") or worker.slots:
                worker.loop_once()
                time.sleep(0.2)
        finally:
            worker.shutdown()
        wall = time.perf_counter() - started
        record = runs.get_run(wb, run_id)
    finally:
        wb.close()
    metrics = record["metrics"] or {}
    return {"procs": procs, "batch_per_process": GLOBAL_BATCH // procs, "status": record["status"],
            "error": record["error"], "samples_per_second": metrics.get("samples_per_second"),
            "train_seconds": metrics.get("train_seconds"), "wall_seconds": round(wall, 1),
            "accuracy": metrics.get("accuracy"), "steps": metrics.get("steps"),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA / "sms_spam_collection" / "train.csv")
    parser.add_argument("--dev", type=Path, default=DEFAULT_DATA / "sms_spam_collection" / "dev.csv")
    parser.add_argument("--rows", type=int, default=320)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    results = []
    with tempfile.TemporaryDirectory(prefix="ddp-cpu-") as tmp:
        train = write_jsonl(Path(tmp) / "train.jsonl", read_csv(args.data, args.rows))
        dev = write_jsonl(Path(tmp) / "dev.jsonl", read_csv(args.dev, 400))
        for i in range(args.repeat):
            for procs in (1, args.procs):
                result = one_run(Path(tmp) / f"home-{procs}-{i}", train, dev, procs)
                print(json.dumps(result), flush=True)
                results.append(result)
    print(json.dumps({"cores": os.cpu_count(), "rows": args.rows, "global_batch": GLOBAL_BATCH, "runs": results}))
    return 0 if all(r["status"] == "succeeded" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
