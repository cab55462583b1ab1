"""Quick vs standard preset with the packaged MiniLM on the four shared datasets: main metric and wall time.

    python bench/presets.py [--data ../shared/data] [--only sms,trec,wnut,brown] [--presets quick,standard]

Each run goes through ``jobs.training.engine.run_training`` with nothing set but the preset,
on the full training file of each set (SMS 4,460, TREC 4,362, WNUT-16 1,915, Brown
3,000 sentences) and its ``dev`` file, exactly as a user's run does. Results go to
bench/results/presets.json after every run, with the machine's load average, since
wall times on a shared machine depend on what else runs.
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.shared_data import DEFAULT_DATA, read_conll, read_csv, write_jsonl  # noqa: E402

log = logging.getLogger("bench.presets")
RESULTS = Path(__file__).parent / "results"
KEPT = ("train_examples", "validation_examples", "samples_per_second", "train_seconds", "setup_seconds",
        "evaluation_seconds", "checkpoint_seconds", "final_eval_seconds", "finish_seconds", "steps", "wall_seconds")


def datasets(data: Path) -> dict:
    """name → (task, train records, validation records, main metric)."""
    wnut = data / "wnut16_twitter_ner"
    read_jsonl = lambda path: [json.loads(line) for line in path.open(encoding="utf-8")]  # noqa: E731
    return {
        "sms": ("text-classification", lambda: read_csv(data / "sms_spam_collection" / "train.csv"),
                lambda: read_csv(data / "sms_spam_collection" / "dev.csv"), "accuracy"),
        "trec": ("text-classification", lambda: read_csv(data / "trec_question_type_train5500" / "train.csv"),
                 lambda: read_csv(data / "trec_question_type_train5500" / "dev.csv"), "accuracy"),
        "wnut": ("token-classification", lambda: read_jsonl(wnut / "train.jsonl"),
                 lambda: read_jsonl(wnut / "dev.jsonl"), "entity_f1"),
        "brown": ("token-classification", lambda: read_conll(data / "brown_pos_sample" / "train.conll"),
                  lambda: read_conll(data / "brown_pos_sample" / "dev.conll"), "token_accuracy"),
    }


def run_one(task: str, train_path: str, validation_path: str, preset: str, out: Path) -> dict:
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training

    spec = RunSpec(task=task, data=DataSpec(train_path=train_path, validation_path=validation_path),
                   train=TrainSpec(preset=preset))
    started = time.perf_counter()
    metrics = run_training(spec, out, RecordingReporter())
    metrics["hyperparameters"] = json.loads((out / "metrics.json").read_text())["hyperparameters"]
    metrics["bench_wall_seconds"] = round(time.perf_counter() - started, 1)
    return metrics


# Standard-preset scores measured earlier on the same data with the same defaults (docs/training.md, "Measured figures").
README_STANDARD = {"wnut": 0.5305}


def projected_standard(quick: dict, n_train: int) -> float:
    """Seconds a standard run would take at the quick run's measured speed: 3 epochs on every example,
    an evaluation after each and a final one, a checkpoint after each, the same start-up and saving.
    A projection for the table, labelled as such, not a measurement."""
    evaluation = quick["final_eval_seconds"]
    return (3 * n_train / quick["samples_per_second"] + 4 * evaluation + 3 * (quick["checkpoint_seconds"] or 0)
            + quick["setup_seconds"] + quick["finish_seconds"])


def table(results: dict, sizes: dict) -> str:
    """The README's table: quick measured, standard measured (or from the README) and projected."""
    lines = ["| dataset (train / dev) | metric | quick: score | quick: wall (load avg at the end) | "
             "standard: score | standard: wall | quick / standard time |", "|---|---|---|---|---|---|---|"]
    for name, by_preset in results.items():
        quick, standard = by_preset.get("quick"), by_preset.get("standard")
        if not quick:
            continue
        if standard:
            score, wall = f"{standard['value']:.4f}", standard["wall_seconds"]
            wall_text = f"{wall:.0f} s (load {standard['load_average_after'][0]:.1f})"
        else:
            score = f"{README_STANDARD[name]:.4f} (README)" if name in README_STANDARD else "not measured"
            wall = projected_standard(quick, sizes[name])
            wall_text = f"≈ {wall:.0f} s projected"
        lines.append(f"| {name} ({sizes[name]:,} / {quick['validation_examples']:,}) | {quick['metric']} | "
                     f"{quick['value']:.4f} | {quick['wall_seconds']:.0f} s (load {quick['load_average_after'][0]:.1f}) "
                     f"| {score} | {wall_text} | {quick['wall_seconds'] / wall:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--only", default="", help="comma-separated dataset names")
    parser.add_argument("--presets", default="quick,standard")
    parser.add_argument("--table", action="store_true", help="print the README table from the stored results")
    args = parser.parse_args()
    if args.table:
        chosen = datasets(args.data)
        sizes = {name: len(train()) for name, (_, train, _, _) in chosen.items()}
        print(table(json.loads((RESULTS / "presets.json").read_text()), sizes))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("transformers", "peft", "jobs"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    RESULTS.mkdir(parents=True, exist_ok=True)
    result_file = RESULTS / "presets.json"
    chosen = datasets(args.data)
    names = [n for n in args.only.split(",") if n] or list(chosen)
    with tempfile.TemporaryDirectory(prefix="bench-presets-") as tmp:
        work = Path(tmp)
        for preset in [p for p in args.presets.split(",") if p]:
            for name in names:
                task, train, validation, metric = chosen[name]
                train_path = write_jsonl(work / name / "train.jsonl", train())
                validation_path = write_jsonl(work / name / "validation.jsonl", validation())
                load_before = os.getloadavg()
                metrics = run_one(task, train_path, validation_path, preset, work / "runs" / f"{name}-{preset}")
                row = {"metric": metric, "value": metrics[metric], **{k: metrics.get(k) for k in KEPT},
                       "bench_wall_seconds": metrics["bench_wall_seconds"],
                       "epochs": metrics["hyperparameters"]["epochs"],
                       "batch_size": metrics["hyperparameters"]["batch_size"],
                       "load_average_before": [round(x, 2) for x in load_before],
                       "load_average_after": [round(x, 2) for x in os.getloadavg()]}
                # re-read before writing: runs may go on in separate processes at the same time
                results = json.loads(result_file.read_text()) if result_file.is_file() else {}
                results.setdefault(name, {})[preset] = row
                result_file.write_text(json.dumps(results, indent=2, default=str))
                log.info("%s %s: %s=%.4f in %.0f s (load %s)", name, preset, metric, row["value"],
                         row["bench_wall_seconds"], row["load_average_after"])


if __name__ == "__main__":
    main()
