"""What the task modules share: reading the normalized JSONL files, the prepared bundle, evaluation results."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Optional

from storage.errors import TrainingError


@dataclasses.dataclass
class Prepared:
    """Everything the engine needs to train one task, built by the task's ``prepare``."""

    train_dataset: Any
    eval_dataset: Any
    collator: Callable
    validation_records: list[dict]
    compute_metrics: Optional[Callable] = None  # for Trainer evaluations during training
    main_metric: str = "loss"
    greater_is_better: bool = False
    label_names: Optional[list[str]] = None  # Trainer's label_names (QA: start/end positions)
    labels: Optional[list[str]] = None  # class / tag names, in id order
    strata: Optional[list[int]] = None  # per training example, a class the batches keep mixed (jobs.training.sampling)
    extra: dict = dataclasses.field(default_factory=dict)  # task-specific state (eval features, flags)


@dataclasses.dataclass
class Evaluation:
    """The final evaluation of a trained model: headline metrics, tables and per-example rows."""

    metrics: dict[str, float]
    tables: dict[str, Any]
    predictions: list[dict]
    # per-unit arrays for ``jobs.evaluation.outcomes`` when the rows cannot give them (masked-LM blocks' summed losses)
    outcomes: Optional[dict] = None


def read_jsonl(path: str | Path, required: tuple[str, ...]) -> list[dict]:
    """Read a normalized JSONL file; a missing file or a record without a required key is a TrainingError."""
    path = Path(path)
    if not path.is_file():
        raise TrainingError(f"data file not found: {path}", "import the dataset again or check the path")
    records = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TrainingError(f"{path}:{number}: not valid JSON ({exc.msg})", "re-import the dataset") from None
            missing = [key for key in required if key not in record]
            if missing:
                raise TrainingError(
                    f"{path}:{number}: record has no {', '.join(repr(k) for k in missing)}",
                    "the file does not match the task you chose; check the task or re-import the dataset",
                )
            records.append(record)
    if not records:
        raise TrainingError(f"data file is empty: {path}", "add records or choose another dataset")
    return records


def model_uses_token_type_ids(tokenizer, config) -> bool:
    """Segment ids only help a model that has a trained segment embedding (RoBERTa's type_vocab_size is 1)."""
    return "token_type_ids" in tokenizer.model_input_names and getattr(config, "type_vocab_size", 0) > 1


def keep_columns(dataset, wanted: list[str]):
    """Drop every column the model's forward does not take (we set remove_unused_columns=False)."""
    drop = [name for name in dataset.column_names if name not in wanted]
    return dataset.remove_columns(drop) if drop else dataset


def softmax(logits):
    import numpy as np

    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)
