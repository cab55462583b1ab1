"""Multi-label decision thresholds: macro-F1 at 0.5 against the per-class thresholds tuned on validation.

    python bench/multilabel_thresholds.py [--data ../shared/data] [--seeds 0,1,2]

The multi-label set is built from the shared WNUT-16 tweets (``wnut16_twitter_ner``): each tweet's labels
are the entity types it mentions (``B-person`` ... → ``person``; 10 types, most tweets mention none, so
the classes are rare: what thresholds are for). Its own splits: train 1,915 tweets, dev 239 (the run's
validation split, where the thresholds are tuned) and test 240 (where both are scored). Each seed trains
the workbench's default run (``jobs.training.engine.run_training`` with nothing set), then scores the test split
with the test-set evaluation job (``jobs.predict.evaluate.run_evaluation``), which decides at 0.5 and at
the thresholds stored with the model (never re-tuned on the test split).

Results go to bench/results/multilabel_thresholds.json.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shared_data import DEFAULT_DATA, write_jsonl  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "multilabel_thresholds.json"
log = logging.getLogger("bench.multilabel_thresholds")
KEYS = ("f1_macro", "f1_macro_tuned", "f1_micro", "f1_micro_tuned")


def entity_types(path: Path) -> list[dict]:
    """One record per tweet: its text and the sorted entity types it mentions (maybe none)."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        tweet = json.loads(line)
        types = sorted({tag[2:] for tag in tweet["tags"] if tag != "O"})
        records.append({"text": " ".join(tweet["tokens"]), "label": types})
    return records


def one_seed(folder: Path, seed: int, work: Path) -> dict:
    from jobs.predict.evaluate import run_evaluation
    from jobs.predict.spec import ModelRef, PredictSpec
    from jobs.process.run_job import model_labels
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training

    paths = {split: write_jsonl(work / f"{split}.jsonl", entity_types(folder / f"{split}.jsonl"))
             for split in ("train", "dev", "test")}
    spec = RunSpec(task="text-classification", data=DataSpec(train_path=paths["train"], validation_path=paths["dev"]),
                   train=TrainSpec(seed=seed))
    started = time.perf_counter()
    validation = run_training(spec, work / "run", RecordingReporter())
    seconds = time.perf_counter() - started
    model_dir = work / "run" / "model"
    hp = json.loads((work / "run" / "metrics.json").read_text())["hyperparameters"]
    ref = ModelRef(run_id=1, task="text-classification", model_dir=str(model_dir), hyperparameters=hp,
                   labels=model_labels(model_dir))
    test = run_evaluation(PredictSpec(kind="evaluate", run_id=1, dataset_id="wnut-types-test"), ref,
                          [paths["test"]], work / "test", RecordingReporter())
    thresholds = json.loads((model_dir / "calibration.json").read_text()).get("thresholds", {})
    return {"seed": seed, "seconds": round(seconds, 1), "thresholds": thresholds,
            "validation": {k: validation.get(k) for k in KEYS}, "test": {k: test.get(k) for k in KEYS}}


def summary(runs: list[dict]) -> dict:
    out = {}
    for split in ("validation", "test"):
        for key in KEYS:
            values = [r[split][key] for r in runs if r[split].get(key) is not None]
            if values:
                out[f"{split}_{key}"] = {"mean": round(statistics.mean(values), 4),
                                         "std": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0}
    return out


def report(result: dict) -> str:
    s = result["summary"]
    lines = ["| split | macro-F1 at 0.5 | macro-F1 tuned | micro-F1 at 0.5 | micro-F1 tuned |", "|---|---|---|---|---|"]
    for split in ("validation", "test"):
        cells = [f"{s[f'{split}_{k}']['mean']:.3f} ± {s[f'{split}_{k}']['std']:.3f}" for k in KEYS]
        lines.append(f"| {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        with tempfile.TemporaryDirectory() as work:
            runs.append(one_seed(args.data / "wnut16_twitter_ner", seed, Path(work)))
            log.info("seed %d: %s", seed, json.dumps(runs[-1]))
    result = {"set": "WNUT-16 tweets → entity types mentioned (10 labels)", "runs": runs, "summary": summary(runs)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2))
    print(report(result))


if __name__ == "__main__":
    main()
