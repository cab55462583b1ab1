"""Training throughput: a workbench run against two plain Trainer scripts, same model and data.

    python bench/train_throughput.py [--data TRAIN.csv --dev DEV.csv] [--rows 2000]   (default: SMS spam)

(a) the tutorial's recipe: every example padded to max_length=128;
(b) a careful plain script: dynamic padding (DataCollatorWithPadding);
(w) the workbench: ``jobs.training.engine.run_training`` (dynamic padding + class-mixed length buckets, jobs/training/sampling.py).

All three train the packaged MiniLM for one epoch, batch 16, lr 5e-5, same seed.
Samples/s counts optimisation time only (the workbench's own evaluation and
checkpoint writing are excluded; the plain scripts do neither). Targets:
w ≥ 3 × (a) and w ≥ 0.97 × (b).
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

from bench.shared_data import DEFAULT_DATA, read_csv, write_jsonl  # noqa: E402

log = logging.getLogger("bench.throughput")
BATCH, LR, SEED = 16, 5e-5, 42


def plain_trainer(records: list[dict], dev: list[dict], padding_max_length: bool, out: Path) -> tuple[float, float]:
    """Samples/s and dev accuracy of a hand-written Trainer script (the two baselines)."""
    from datasets import Dataset
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                              TrainingArguments, default_data_collator)

    from jobs.training.catalogue import packaged_model_path

    path = str(packaged_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    labels = sorted({r["label"] for r in records})
    def tokenize(batch):
        if padding_max_length:
            return tokenizer(batch["text"], padding="max_length", truncation=True, max_length=128)
        return tokenizer(batch["text"], truncation=True, max_length=128)
    ds, dev_ds = (Dataset.from_list([{"text": r["text"], "label": labels.index(r["label"])} for r in rows])
                  .map(tokenize, batched=True, remove_columns=["text"]) for rows in (records, dev))
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=len(labels))
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=BATCH, learning_rate=LR,
                             num_train_epochs=1, warmup_steps=0.06, weight_decay=0.01, seed=SEED,
                             save_strategy="no", eval_strategy="no", report_to=[], use_cpu=True,
                             logging_steps=25, disable_tqdm=True)
    collator = default_data_collator if padding_max_length else DataCollatorWithPadding(tokenizer)
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=collator)
    started = time.perf_counter()
    trainer.train()
    samples_per_second = len(records) / (time.perf_counter() - started)
    output = trainer.predict(dev_ds)
    return samples_per_second, float((output.predictions.argmax(-1) == output.label_ids).mean())


def workbench(records: list[dict], dev: list[dict], work: Path) -> tuple[float, float]:
    from jobs.training.engine import run_training
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec

    train = write_jsonl(work / "train.jsonl", records)
    validation = write_jsonl(work / "validation.jsonl", dev)
    spec = RunSpec(task="text-classification", data=DataSpec(train_path=train, validation_path=validation),
                   train=TrainSpec(epochs=1, learning_rate=LR, batch_size=BATCH, seed=SEED))
    metrics = run_training(spec, work / "run", RecordingReporter())
    return metrics["samples_per_second"], metrics["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA / "sms_spam_collection" / "train.csv")
    parser.add_argument("--dev", type=Path, default=DEFAULT_DATA / "sms_spam_collection" / "dev.csv")
    parser.add_argument("--rows", type=int, default=2000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    records, dev = read_csv(args.data, args.rows), read_csv(args.dev)
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        work = Path(tmp)
        runs = {
            "a_max_length_padding": plain_trainer(records, dev, True, work / "a"),
            "b_dynamic_padding": plain_trainer(records, dev, False, work / "b"),
            "workbench": workbench(records, dev, work / "w"),
        }
    figures = {name: round(speed, 2) for name, (speed, _) in runs.items()}
    figures["dev_accuracy"] = {name: round(acc, 4) for name, (_, acc) in runs.items()}
    figures["workbench_vs_a"] = round(figures["workbench"] / figures["a_max_length_padding"], 2)
    figures["workbench_vs_b"] = round(figures["workbench"] / figures["b_dynamic_padding"], 2)
    figures["b_vs_a"] = round(figures["b_dynamic_padding"] / figures["a_max_length_padding"], 2)
    figures.update(rows=len(records), data=str(args.data))
    out = Path(__file__).parent / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "train_throughput.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))
    print(f"workbench / (a) max_length padding = {figures['workbench_vs_a']}x (target >= 3)")
    print(f"workbench / (b) dynamic padding    = {figures['workbench_vs_b']}x (target >= 0.97)")


if __name__ == "__main__":
    main()
