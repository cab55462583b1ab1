"""Time estimates against the time runs really took: short and long texts, sizes and loads.

    python bench/estimates.py [--data ../shared/data] [--runs 10] [--out bench/results/estimates.json]

Each run goes through the queue as a user's does: the dataset is imported (its token statistics
measured), ``runs.submit_run`` stores the estimate at the load of that moment, an embedded worker
trains the packaged MiniLM in its own process, and the run's time is ``finished_at - started_at`` (what
the run page compares). The runs follow one another in one workbench, so the first is estimated with no
past run and each later one is calibrated on those before it. Texts: SMS messages and TREC-6 questions
(short) and long movie reviews (median 688 words, cut at 128 tokens); 3–7 steps each, so a run takes
about 0.5–1 min on an idle machine (several times that on this 2-CPU machine shared with other work). Beside some runs 1 or 2 busy-loop processes run (each stopped after the run, and
after 10 min at most), on top of whatever else the shared machine runs: the load per CPU is sampled
every 2 s during each run, as it is and weighted by the priority of what runs
(``jobs.progress.machine_load``: the other engineers' test suites run at ``nice 10``). Results go to ``--out`` after every run.
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.shared_data import DEFAULT_DATA, read_csv  # noqa: E402

log = logging.getLogger("bench.estimates")
RESULTS = Path(__file__).parent / "results" / "estimates.json"
# (dataset, steps, batch size, busy-loop processes beside the run)
PLAN = [("sms", 4, 8, 0), ("movies", 4, 8, 0), ("trec", 6, 8, 1), ("movies", 3, 16, 1), ("sms", 6, 16, 2),
        ("movies", 5, 8, 0), ("trec", 3, 16, 2), ("sms", 5, 8, 1), ("movies", 3, 8, 2), ("trec", 7, 8, 0),
        ("movies", 3, 16, 0), ("sms", 6, 8, 2)]
SOURCES = {"sms": "sms_spam_collection", "trec": "trec_question_type_train5500", "movies": "movie_reviews_long"}
SIZES = {"sms": (400, 30), "trec": (400, 30), "movies": (200, 20)}  # train, validation records taken
BUSY_LIMIT_SECONDS = 600


def _subset(data: Path, name: str, folder: Path) -> tuple[Path, Path]:
    """The first records of the set's train and dev files, as CSV files of ``text,label``."""
    paths = []
    for split, size in zip(("train", "dev"), SIZES[name]):
        rows = read_csv(data / SOURCES[name] / f"{split}.csv")[:size]
        path = folder / f"{name}_{split}.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows([row["text"], row["label"]] for row in rows)
        paths.append(path)
    return paths[0], paths[1]


def _busy(count: int) -> list[subprocess.Popen]:
    loop = f"import time\nend = time.time() + {BUSY_LIMIT_SECONDS}\nwhile time.time() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]


class LoadSampler:
    """The 1-minute load average per CPU every ``every`` seconds while a run runs: as it is (``raw``), and
    weighted by the priority of what runs (``samples``, what the estimates and the engine use)."""

    def __init__(self, every: float = 2.0):
        self.samples: list[float] = []
        self.raw: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(every,), daemon=True)

    def _loop(self, every: float) -> None:
        from jobs.progress import machine_load

        while not self._stop.wait(every):
            self.raw.append(os.getloadavg()[0] / (os.cpu_count() or 1))
            self.samples.append(machine_load() or 0.0)

    def __enter__(self) -> "LoadSampler":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def run_all(data: Path, runs: int, out: Path) -> list[dict]:
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.queue.worker import start_embedded_worker
    from storage.context import open_workbench
    from storage.settings import Settings
    from workbench.services import datasets, estimates, runs as runs_service

    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-estimates-") as work, \
            open_workbench(Settings.from_env({}, home=str(Path(work) / "home"), device="cpu")) as wb:
        ids = {}
        for name in SOURCES:
            train, dev = _subset(data, name, Path(work))
            ids[name] = datasets.import_dataset(wb, train, "text-classification", name=name,
                                                validation_path=dev).id
        worker = start_embedded_worker(wb, max_jobs=1, gpus=[])
        try:
            for number, (name, steps, batch, busy) in enumerate(PLAN[:runs], start=1):
                spec = RunSpec(task="text-classification", name=f"{name} {steps}×{batch}",
                               data=DataSpec(dataset_id=ids[name]),
                               train=TrainSpec(preset="quick", max_steps=steps, batch_size=batch))
                loops = _busy(busy)
                try:
                    time.sleep(5 if busy else 0)  # the loops show in the 1-minute load the estimate reads
                    with LoadSampler() as sampler:
                        run_id = runs_service.submit_run(wb, spec)
                        record = runs_service.wait_for_run(wb, run_id, timeout=1800)
                finally:
                    for loop in loops:
                        loop.kill()
                        loop.wait()
                est, actual = record["estimate"] or {}, estimates.actual_seconds(record)
                row = {"run": number, "dataset": name, "steps": steps, "batch_size": batch, "busy_loops": busy,
                       "status": record["status"], "tokens_per_example": est.get("tokens_per_example"),
                       "calibrated_on": est.get("runs"), "estimate": est.get("seconds"), "low": est.get("low"),
                       "high": est.get("high"), "actual": round(actual, 1) if actual else None,
                       "load_at_submit": (est.get("load") or {}).get("now"),
                       "load_during": _mean(sampler.samples), "raw_load_during": _mean(sampler.raw),
                       "sureness": est.get("sureness")}
                if actual and est.get("seconds"):
                    row["ratio"] = round(actual / est["seconds"], 2)
                    row["within_2x"] = 0.5 <= row["ratio"] <= 2.0
                    row["inside_range"] = est["low"] <= actual <= est["high"]
                results.append(row)
                log.info("%s", json.dumps(row))
                _write(out, results)
        finally:
            worker.stop()
    return results


def _mean(samples: list[float]) -> float | None:
    return round(sum(samples) / len(samples), 2) if samples else None


def _write(out: Path, results: list[dict]) -> None:
    done = [r for r in results if "ratio" in r]
    summary = {"runs": len(done), "within_2x": sum(r["within_2x"] for r in done),
               "inside_range": sum(r["inside_range"] for r in done),
               "cpus": os.cpu_count(), "model": "packaged MiniLM (all-MiniLM-L6-v2)"}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "runs": results}, indent=2) + "\n")


def table(results: list[dict]) -> str:
    """The runs as a markdown table (docs/training.md, "Time estimates")."""
    lines = ["| # | texts | steps × batch | busy loops | past runs | load at submit / during (raw) | estimate "
             "(range) | took | took / estimate |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "ratio" not in r:
            continue
        lines.append(f"| {r['run']} | {r['dataset']} ({r['tokens_per_example']:.0f} tok) | {r['steps']} × "
                     f"{r['batch_size']} | {r['busy_loops']} | {r['calibrated_on']} | {r['load_at_submit']:.1f} / "
                     f"{r['load_during']:.1f} ({r['raw_load_during']:.1f}) | {r['estimate']:.0f} s ({r['low']:.0f}–"
                     f"{r['high']:.0f}) | {r['actual']:.0f} s | {r['ratio']:.2f}"
                     f"{'' if r['inside_range'] else ' (outside)'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--table", action="store_true", help="print the table of --out's runs and stop")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())["runs"]))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in ("jobs", "workbench", "storage", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    run_all(args.data, args.runs, args.out)


if __name__ == "__main__":
    main()
