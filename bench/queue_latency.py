"""Queue latency: time from submitting a run to its first training step, packaged MiniLM, this CPU.

    python bench/queue_latency.py [--runs 5] [--idle 3] [--preload both|on|off]

A worker runs as in production (``run_forever`` with its idle back-off and the
real ``SubprocessRunner``). With ``WORKBENCH_PRELOAD_JOBS`` off each run pays for a fresh
process importing torch and transformers; on (the default), runs are forked from a warm
process (``jobs.process.preload``), which learns from the first run what the next import.
Before each submission the worker idles ``--idle`` seconds, so the figure includes the
back-off a quiet worker is in. Each run stops after 2 steps. ``cpu_s`` is the CPU time of
every process the worker started, the warm process included. Writes
bench/results/queue_latency.json and prints the medians.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.queue.worker import Worker  # noqa: E402
from jobs.specs.run import DataSpec, RunSpec, TrainSpec  # noqa: E402
from storage.context import open_workbench  # noqa: E402
from storage.settings import Settings  # noqa: E402
from workbench.services import runs  # noqa: E402

log = logging.getLogger("bench.queue_latency")
RESULTS = Path(__file__).parent / "results"


def _data(folder: Path) -> Path:
    words = ["great", "awful", "film", "plot", "acting", "boring", "moving", "fine"]
    lines = [json.dumps({"text": " ".join(words[(i + k) % len(words)] for k in range(6)), "label": "pos" if i % 2 else "neg"})
             for i in range(64)]
    path = folder / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(n_runs: int, idle: float, preload: bool = True) -> dict:
    cpu_before = _children_cpu()
    with tempfile.TemporaryDirectory() as tmp:
        wb = open_workbench(Settings.from_env({}, home=tmp, preload_jobs=preload))
        train = _data(Path(tmp))
        worker = Worker(wb, gpus=[])
        stop = threading.Event()
        thread = threading.Thread(target=worker.run_forever, args=(stop,), daemon=True)
        thread.start()
        samples = []
        try:
            for i in range(n_runs):
                time.sleep(idle)
                spec = RunSpec(task="text-classification", data=DataSpec(train_path=str(train)),
                               train=TrainSpec(max_steps=2, batch_size=8, max_length=32))
                submitted = time.perf_counter()
                run_id = runs.submit_run(wb, spec)
                claimed = first_step = None
                while first_step is None:
                    run = runs.get_run(wb, run_id)
                    if claimed is None and run["status"] != "queued":
                        claimed = time.perf_counter() - submitted
                    if run["step"] >= 1:
                        first_step = time.perf_counter() - submitted
                    elif run["status"] in ("failed", "cancelled"):
                        raise RuntimeError(f"run {run_id} {run['status']}: {run['error']}")
                    time.sleep(0.05)
                runs.wait_for_run(wb, run_id, timeout=600)
                samples.append({"run": run_id, "claimed_s": round(claimed, 2), "first_step_s": round(first_step, 2),
                                "done_s": round(time.perf_counter() - submitted, 2)})
                log.info("run %d: claimed after %.2f s, first step after %.2f s", run_id, claimed, first_step)
        finally:
            stop.set()
            thread.join(60)
            warm = getattr(worker.runner, "_warm", None)
            if warm is not None:  # it died with the worker thread; wait for it, so that its CPU is counted
                warm.process.wait(60)
            wb.close()
    firsts = [s["first_step_s"] for s in samples]
    return {"preload": preload, "runs": samples, "median_first_step_s": round(statistics.median(firsts), 2),
            "median_claim_s": round(statistics.median(s["claimed_s"] for s in samples), 2),
            "median_done_s": round(statistics.median(s["done_s"] for s in samples), 2),
            "cpu_s": round(_children_cpu() - cpu_before, 1), "load_before": round(os.getloadavg()[0], 2),
            "idle_before_submit_s": idle, "cpu_count": os.cpu_count(), "model": "packaged all-MiniLM-L6-v2"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--idle", type=float, default=3.0)
    parser.add_argument("--preload", choices=("both", "on", "off"), default="both")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    modes = {"both": (False, True), "on": (True,), "off": (False,)}[args.preload]
    results = [measure(args.runs, args.idle, preload) for preload in modes]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "queue_latency.json").write_text(json.dumps(results, indent=2))
    for result in results:
        print(f"preload {'on' if result['preload'] else 'off'}: median time from submission to first training "
              f"step over {args.runs} runs {result['median_first_step_s']:.2f} s (claimed after "
              f"{result['median_claim_s']:.2f} s, done after {result['median_done_s']:.2f} s), "
              f"{result['cpu_s']:.1f} s of CPU in all")


if __name__ == "__main__":
    main()
