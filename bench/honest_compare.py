"""Issue 24's measurement: are the intervals honest, and does the paired test tell two settings apart?

For one shared set (``--only trec`` or ``sms``) at ``--size`` training examples, the default workbench run
(``jobs.training.engine.run_training`` with nothing set, as ``bench/small_data.py`` runs it) is trained with each
seed of ``--seeds`` and scored on the set's whole test file (its predict_path, never used for training or
checkpoint choice). Reported:

* each seed's test accuracy with its 95 % bootstrap interval (``jobs.evaluation.stats``, 1,000 resamples of the
  test questions), the mean and sample std across seeds, and the mean interval width: the spread across
  seeds and the width of one run's interval should roughly agree (a run's interval covers the test
  sample's noise; the seeds' spread covers the training's noise, so they are related, not equal);
* each run's validation ECE before and after temperature scaling, and the fitted temperature;
* a paired comparison on the test questions of two learning rates (``--lrs A,B``, both at the first
  seed): the difference with its paired-bootstrap interval, p-value, McNemar's exact test and verdict.

Run it alone (2 cores: anything beside it slows it). Results go to bench/results/honest_compare.json.

    python bench/honest_compare.py --only trec --size 1000 --seeds 0,1,2,3,4 --lrs 5e-5,1e-4
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
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.shared_data import DEFAULT_DATA  # noqa: E402
from bench.small_data import load_sets, sample, write_jsonl  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "honest_compare.json"
log = logging.getLogger("bench.honest_compare")


def train_and_score(task: str, train: list[dict], test: list[dict], seed: int, work: Path, **train_kw) -> dict:
    """One workbench run on ``train``; its test predictions (in test order) as per-question correctness."""
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training
    from jobs.training.outputs import HELDOUT_FILE

    spec = RunSpec(task=task, data=DataSpec(train_path=write_jsonl(work / "train.jsonl", train),
                                            predict_path=write_jsonl(work / "test.jsonl", test)),
                   train=TrainSpec(seed=seed, **train_kw))
    started = time.perf_counter()
    metrics = run_training(spec, work / "run", RecordingReporter())
    held = np.load(work / "run" / HELDOUT_FILE)
    labels = [str(x) for x in held["labels"]]
    predicted = [labels[i] for i in held["probs"].argmax(axis=1)]
    correct = np.array([p == str(r["label"]) for p, r in zip(predicted, test)], dtype=np.float64)
    hp = json.loads((work / "run" / "metrics.json").read_text())["hyperparameters"]
    return {"seed": seed, "correct": correct, "seconds": round(time.perf_counter() - started, 1),
            "learning_rate": hp.get("learning_rate"), "ece": metrics.get("ece"),
            "ece_calibrated": metrics.get("ece_calibrated"), "temperature": metrics.get("temperature"),
            "validation_accuracy": metrics.get("accuracy")}


def with_interval(run: dict) -> dict:
    from jobs.evaluation import stats

    ci = stats.bootstrap_ci(np.stack([run["correct"], np.ones_like(run["correct"])], axis=1), stats.ratio)
    return {**{k: v for k, v in run.items() if k != "correct"}, "test_accuracy": ci["value"],
            "low": ci["low"], "high": ci["high"]}


def paired(a: dict, b: dict, name_a: str, name_b: str) -> dict:
    from jobs.evaluation import stats

    columns = [np.stack([r["correct"], np.ones_like(r["correct"])], axis=1) for r in (a, b)]
    result = stats.paired_bootstrap(columns[0], columns[1], stats.ratio)
    only_a, only_b = stats.discordant(a["correct"], b["correct"])
    return {**result, "mcnemar_p": stats.mcnemar_exact(only_a, only_b), "only_a": only_a, "only_b": only_b,
            "verdict": stats.verdict("accuracy", name_a, name_b, result)}


def run(data: Path, name: str, size: str, seeds: list[int], lrs: list[float]) -> dict:
    task, train_all, test = load_sets(data)[name]
    runs, by_lr = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            work = Path(tmp) / f"seed{seed}"
            work.mkdir()
            found = train_and_score(task, sample(train_all, size, seed), test, seed, work)
            runs.append(found)
            log.info("%s %s seed %d: %.4f in %.0f s", name, size, seed, found["correct"].mean(), found["seconds"])
        for lr in lrs:
            work = Path(tmp) / f"lr{lr}"
            work.mkdir()
            by_lr[lr] = train_and_score(task, sample(train_all, size, seeds[0]), test, seeds[0], work,
                                        learning_rate=lr)
            log.info("%s %s lr %g: %.4f", name, size, lr, by_lr[lr]["correct"].mean())
    scored = [with_interval(r) for r in runs]
    accuracies = [r["test_accuracy"] for r in scored]
    result = {"set": name, "size": size, "test_questions": len(test), "runs": scored,
              "mean": statistics.mean(accuracies), "std": statistics.stdev(accuracies) if len(runs) > 1 else None,
              "mean_half_width": statistics.mean((r["high"] - r["low"]) / 2 for r in scored)}
    if len(lrs) == 2:
        a, b = (by_lr[lr] for lr in lrs)
        result["learning_rates"] = {"a": with_interval(a), "b": with_interval(b),
                                    "paired": paired(a, b, f"lr {lrs[0]:g}", f"lr {lrs[1]:g}")}
    return result


def report(result: dict) -> str:
    lines = [f"{result['set']} at {result['size']} training examples, {result['test_questions']} test questions:"]
    for r in result["runs"]:
        lines.append(f"  seed {r['seed']}: test accuracy {r['test_accuracy']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
                     f" · validation ECE {r['ece']} -> {r['ece_calibrated']} (T {r['temperature']})"
                     f" · lr {r['learning_rate']} · {r['seconds']} s")
    std = f"{result['std']:.4f}" if result["std"] is not None else "n/a"
    lines.append(f"  across seeds: mean {result['mean']:.4f}, std {std}; "
                 f"mean half-width of one run's 95 % interval {result['mean_half_width']:.4f}")
    if "learning_rates" in result:
        pair = result["learning_rates"]["paired"]
        lines.append(f"  {pair['verdict']}; McNemar p = {pair['mcnemar_p']:.4f} "
                     f"({pair['only_a']} only A right, {pair['only_b']} only B right)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--only", default="trec", choices=("trec", "sms"))
    parser.add_argument("--size", default="1000", help="training examples drawn per seed, or 'all'")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--lrs", default="5e-5,1e-4", help="two learning rates compared at the first seed")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    result = run(args.data, args.only, args.size, [int(s) for s in args.seeds.split(",")],
                 [float(x) for x in args.lrs.split(",") if x])
    stored = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    stored[f"{args.only}:{args.size}"] = result
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(stored, indent=2))
    print(report(result))


if __name__ == "__main__":
    main()
