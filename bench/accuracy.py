"""Acceptance figures of the training engine with the packaged MiniLM, default hyper-parameters.

    python bench/accuracy.py [--data ../shared/data] [--only sms,trec,...]

Each experiment goes through ``jobs.training.engine.run_training`` exactly as a user's run
does; only the epochs (part of the acceptance protocol) are given. Results are
written to bench/results/accuracy.json after every experiment.
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

from bench.shared_data import DEFAULT_DATA, read_conll, read_csv, squad_split, write_jsonl  # noqa: E402

log = logging.getLogger("bench.accuracy")
RESULTS = Path(__file__).parent / "results"


def experiments(data: Path, work: Path) -> dict:
    """name → (task, train path, validation path, spec overrides, headline metric, target)."""
    sms = data / "sms_spam_collection"
    trec = data / "trec_question_type_train5500"
    wnut = data / "wnut16_twitter_ner"
    brown = data / "brown_pos_sample"
    def files(name, train, validation):
        return write_jsonl(work / name / "train.jsonl", train), write_jsonl(work / name / "validation.jsonl", validation)
    squad_train, squad_val = squad_split(data / "squad_v1.1_sample" / "dev-v1.1-sample500.json")
    sms_files = lambda: files("sms", read_csv(sms / "train.csv", 2000), read_csv(sms / "dev.csv"))  # noqa: E731
    return {
        "sms": ("text-classification", sms_files, {"epochs": 1}, {}, "accuracy", 0.985),
        "trec": ("text-classification", lambda: files("trec", read_csv(trec / "train.csv"), read_csv(trec / "dev.csv")),
                 {"epochs": 2}, {}, "accuracy", 0.925),
        "wnut": ("token-classification", lambda: files("wnut", [json.loads(l) for l in open(wnut / "train.jsonl")],
                                                       [json.loads(l) for l in open(wnut / "dev.jsonl")]),
                 {"epochs": 3}, {}, "entity_f1", 0.44),
        "brown": ("token-classification", lambda: files("brown", read_conll(brown / "train.conll", 2000),
                                                        read_conll(brown / "dev.conll")),
                  {"epochs": 1}, {}, "token_accuracy", None),
        "squad": ("question-answering", lambda: files("squad", squad_train, squad_val), {"epochs": 2}, {}, "f1", None),
        "sms_lora": ("text-classification", sms_files, {"epochs": 1}, {"enabled": True}, "accuracy", None),
    }


def run_one(name: str, task: str, paths, train_overrides: dict, lora: dict, out: Path) -> dict:
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, LoraSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training

    train_path, validation_path = paths
    spec = RunSpec(task=task, data=DataSpec(train_path=train_path, validation_path=validation_path, name=name),
                   train=TrainSpec(**train_overrides), lora=LoraSpec(**lora))
    started = time.perf_counter()
    metrics = run_training(spec, out / name, RecordingReporter())
    metrics["wall_seconds"] = round(time.perf_counter() - started, 1)
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--only", default="", help="comma-separated experiment names")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("transformers", "peft", "jobs"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    RESULTS.mkdir(parents=True, exist_ok=True)
    result_file = RESULTS / "accuracy.json"
    with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as tmp:
        work = Path(tmp)
        chosen = experiments(args.data, work)
        names = [n for n in args.only.split(",") if n] or list(chosen)
        for name in names:
            task, make_files, overrides, lora, metric, target = chosen[name]
            metrics = run_one(name, task, make_files(), overrides, lora, work / "runs")
            metrics.update(metric=metric, target=target,
                           passed=None if target is None else metrics[metric] >= target)
            # re-read before writing: experiments may run in separate processes at the same time
            results = json.loads(result_file.read_text()) if result_file.is_file() else {}
            results[name] = metrics
            result_file.write_text(json.dumps(results, indent=2, default=str))
            log.info("%s: %s=%.4f (target %s) trainable=%s rss=%sMB samples/s=%s", name, metric, metrics[metric],
                     target, metrics["trainable_parameters"], metrics["peak_rss_mb"], metrics["samples_per_second"])


if __name__ == "__main__":
    main()
