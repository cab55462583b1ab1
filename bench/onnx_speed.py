"""ONNX export on this CPU: PyTorch fp32 against ONNX fp32 and ONNX int8, as the export job measures them.

    python bench/onnx_speed.py [--data ../shared/data] [--only minilm-sms,minilm-wnut,base-sms,base-wnut]

Four models, each exported by the workbench's own export job (``jobs.export.job.run_export``: parity on the
run's validation split, then p50/p95 latency of single-row calls and rows/s in batches of 32, with the same
threads for PyTorch and ONNX Runtime):

- ``minilm-sms``: the default model (packaged all-MiniLM-L6-v2) after the workbench's default run on 1,000
  SMS messages, validated on 400 messages of the SMS dev split;
- ``minilm-wnut``: the default model after the default run on 1,000 WNUT-16 tweets (entity tags), validated
  on the 239 tweets of the dev split;
- ``base-sms`` / ``base-wnut``: a BERT-base-sized model (12 layers, hidden 768, 110 M parameters) built
  from a config (no BERT-base weights are on this machine) with the MiniLM vocabulary, trained by the
  workbench for 150 steps on the same data so its scores are not those of random weights. Its metric is
  far below a pretrained BERT-base's; the point of these rows is speed, size and agreement.

Results go to bench/results/onnx_speed.json; ``--table`` prints the markdown table of docs/export.md.
Run it alone: other work on the two cores changes every figure.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.shared_data import DEFAULT_DATA, read_csv, write_jsonl  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "onnx_speed.json"
log = logging.getLogger("bench.onnx_speed")
CASES = ("minilm-sms", "minilm-wnut", "base-sms", "base-wnut")
BASE_STEPS = 150


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def case_data(data: Path, case: str) -> tuple[str, list[dict], list[dict]]:
    """(task, training records, validation records) of a case, seeded samples of the shared splits."""
    if case.endswith("sms"):
        train, dev = read_csv(data / "sms_spam_collection" / "train.csv"), read_csv(data / "sms_spam_collection" / "dev.csv")
        task = "text-classification"
    else:
        folder = data / "wnut16_twitter_ner"
        train, dev = read_jsonl(folder / "train.jsonl"), read_jsonl(folder / "dev.jsonl")
        task = "token-classification"
    rng = random.Random(0)
    return task, rng.sample(train, min(1000, len(train))), rng.sample(dev, min(400, len(dev)))


def base_sized_model(folder: Path) -> Path:
    """A BERT-base-sized encoder from a config, seeded, with the packaged model's (uncased BERT) tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from jobs.training.catalogue import packaged_model_path

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def one_case(data: Path, case: str, work: Path) -> dict:
    from jobs.export.job import run_export
    from jobs.export.spec import ExportSpec
    from jobs.predict.spec import ModelRef
    from jobs.process.run_job import model_labels
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training

    task, train, validation = case_data(data, case)
    paths = DataSpec(train_path=write_jsonl(work / "train.jsonl", train),
                     validation_path=write_jsonl(work / "validation.jsonl", validation))
    if case.startswith("base"):
        spec = RunSpec(task=task, model=str(base_sized_model(work / "base")), data=paths,
                       train=TrainSpec(seed=0, max_steps=BASE_STEPS, learning_rate=1e-4, batch_size=16))
    else:
        spec = RunSpec(task=task, data=paths, train=TrainSpec(seed=0))
    started = time.perf_counter()
    trained = run_training(spec, work / "run", RecordingReporter())
    train_seconds = time.perf_counter() - started
    model_dir = work / "run" / "model"
    hp = json.loads((work / "run" / "metrics.json").read_text())["hyperparameters"]
    ref = ModelRef(run_id=1, task=task, model_dir=str(model_dir), hyperparameters=hp, labels=model_labels(model_dir))
    report = run_export(ExportSpec(run_id=1, int8=True), ref, spec, work / "export", RecordingReporter())
    return {"case": case, "task": task, "train_records": len(train), "train_seconds": round(train_seconds, 1),
            "validation_metric": {k: trained.get(k) for k in ("accuracy", "f1", "entity_f1", "f1_macro") if k in trained},
            "report": report}


def table(results: dict) -> str:
    lines = ["| model · data | runtime | rows/s (batch 32) | × PyTorch | p50 / p95 ms (batch 1) | size MB "
             "| agreement | metric | status |", "|---|---|---|---|---|---|---|---|---|"]
    for case in CASES:
        if case not in results:
            continue
        report = results[case]["report"]
        torch_row = report["pytorch"]
        for row in [torch_row, *report["variants"]]:
            speedup = row["rows_per_s"] / torch_row["rows_per_s"]
            agreement = "—" if row is torch_row else f"{row['agreement'] * 100:.1f} %"
            lines.append(f"| {case} | {row['name']} | {row['rows_per_s']:.0f} | {speedup:.2f}× "
                         f"| {row['p50_ms']:.1f} / {row['p95_ms']:.1f} | {row['bytes'] / 1e6:.0f} | {agreement} "
                         f"| {report['metric']} {row['metric']:.3f} | {row.get('status', '')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--table", action="store_true", help="print the table of the stored results and stop")
    args = parser.parse_args()
    stored = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.table:
        print(table(stored))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import platform

    import torch

    for case in args.only.split(","):
        with tempfile.TemporaryDirectory() as work:
            stored[case] = one_case(args.data, case, Path(work))
        stored[case]["machine"] = {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                                   "platform": platform.platform()}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(stored, indent=2))
        log.info("%s done", case)
    print(table(stored))


if __name__ == "__main__":
    main()
