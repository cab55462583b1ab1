"""Training on documents against windows labelled independently, on a task built to tell them apart.

The documents of ``tests/test_chunking.py``: about 45 tokens of filler words that say nothing of the label,
then "it was great." or "it was awful."; windows of 24 tokens (3 per document). A tiny BERT built from a
config (``tests.tiny_models.tiny_bert``), 48 training and 48 scored documents, 3 seeds, each pooling:

- documents: the workbench's chunked run (``train.chunking`` = the pooling), loss on the pooled logits;
- windows: every window of a training document becomes an example with its document's label (chunking off,
  ``max_length`` = the window), then the same pooling over the windows of each scored document.

Writes ``bench/results/chunk_training_modes.json``. Seconds on a CPU.

    python bench/chunk_training_modes.py
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).parent / "results" / "chunk_training_modes.json"
WINDOW, STRIDE = 24, 6


def train(folder: Path, model: Path, records: list[dict], validation: list[dict], chunking: str, seed: int):
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training
    from tests.tiny_models import write_jsonl

    folder.mkdir(parents=True, exist_ok=True)
    spec = RunSpec(task="text-classification", model=str(model),
                   data=DataSpec(train_path=write_jsonl(folder / "train.jsonl", records).as_posix(),
                                 validation_path=write_jsonl(folder / "validation.jsonl", validation).as_posix()),
                   train=TrainSpec(max_length=WINDOW, chunking=chunking, chunk_stride=STRIDE, learning_rate=3e-3,
                                   epochs=6, batch_size=8, method="finetune", calibrate="off", select_by="last",
                                   seed=seed))
    run_training(spec, folder / "run", RecordingReporter())
    return folder / "run" / "model"


def window_records(tokenizer, records: list[dict]) -> list[dict]:
    """Every window of every record as a text of its own, with the record's label."""
    from jobs.training.chunking import split_windows

    windows = split_windows(tokenizer, [r["text"] for r in records], None, WINDOW, STRIDE)
    return [{"text": tokenizer.decode(ids, skip_special_tokens=True), "label": records[doc]["label"]}
            for ids, doc in zip(windows.features["input_ids"], windows.document)]


def score(model_dir: Path, records: list[dict]) -> float:
    from jobs.predict.infer import TorchPredictor

    predicted = TorchPredictor(model_dir, "text-classification").predict([{"text": r["text"]} for r in records])
    return sum(p["label"] == r["label"] for p, r in zip(predicted, records)) / len(records)


def main() -> None:
    import torch
    from transformers import AutoTokenizer

    from jobs.training.chunking import Chunking, save_config
    from tests.test_chunking import last_sentence_documents
    from tests.tiny_models import tiny_bert

    torch.set_num_threads(1)
    results: dict = {"task": __doc__.split("\n\n")[1].replace("\n", " "), "rows": {}}
    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        model = tiny_bert(root / "tiny", hidden_dropout_prob=0.0)
        tokenizer = AutoTokenizer.from_pretrained(str(model))
        train_docs, scored = last_sentence_documents(48, 0), last_sentence_documents(48, 1)
        windows = window_records(tokenizer, train_docs)
        for pooling in ("mean", "max"):
            for seed in (0, 1, 2):
                documents = train(root / f"doc-{pooling}-{seed}", model, train_docs, scored[:8], pooling, seed)
                independent = train(root / f"win-{pooling}-{seed}", model, windows, scored[:8], "off", seed)
                save_config(independent, Chunking(pooling, WINDOW, STRIDE))  # read the scored documents alike
                for mode, folder in (("documents", documents), ("windows", independent)):
                    accuracy = score(folder, scored)
                    results["rows"].setdefault(f"{mode}-{pooling}", {})[str(seed)] = accuracy
                    print(mode, pooling, seed, accuracy, flush=True)
    for name, seeds in results["rows"].items():
        values = list(seeds.values())
        results["rows"][name]["mean"] = round(statistics.mean(values), 3)
    RESULTS.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
