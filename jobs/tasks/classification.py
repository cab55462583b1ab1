"""Text classification: single texts or pairs; binary, multi-class and multi-label.

Multi-label uses one sigmoid per class (BCE loss, threshold 0.5). Optional class
weights are applied by the engine's trainer through ``weighted_loss``.
"""
from __future__ import annotations

import functools
from typing import Optional, Sequence

import numpy as np

from jobs.tasks.common import Evaluation, Prepared, keep_columns, model_uses_token_type_ids, read_jsonl, softmax
from storage.errors import TrainingError

MAIN_METRIC = "accuracy"
REQUIRED = ("text", "label")
THRESHOLD = 0.5


def read(path):
    return read_jsonl(path, REQUIRED)


def is_multi_label(records: Sequence[dict]) -> bool:
    """A dataset is multi-label when its labels are lists."""
    return any(isinstance(r["label"], list) for r in records)


def collect_labels(records: Sequence[dict], multi_label: bool) -> list[str]:
    """Sorted label names; sorting makes label ids stable across runs on the same data."""
    names: set[str] = set()
    for record in records:
        value = record["label"]
        if multi_label:
            if not isinstance(value, list):
                value = [value]
            names.update(str(v) for v in value)
        else:
            if isinstance(value, list):
                raise TrainingError("some records have a list of labels and some a single label",
                                    "use lists everywhere for a multi-label dataset")
            names.add(str(value))
    if len(names) < 2:
        raise TrainingError(f"classification needs at least 2 labels, found {sorted(names)}",
                            "check the label column of the dataset")
    return sorted(names)


def encode_label(value, label2id: dict[str, int], multi_label: bool):
    """A class id, or a multi-hot float vector for multi-label records."""
    if multi_label:
        vector = [0.0] * len(label2id)
        for name in value if isinstance(value, list) else [value]:
            vector[label2id[str(name)]] = 1.0
        return vector
    if str(value) not in label2id:
        raise TrainingError(f"validation label {value!r} does not occur in the training data",
                            "make sure every class has training examples")
    return label2id[str(value)]


def tokenize_batch(batch: dict, tokenizer, max_length: int, label2id: dict[str, int], multi_label: bool,
                   use_token_type_ids: bool) -> dict:
    """Tokenize a batch of records without padding (the collator pads each batch to its own longest)."""
    pairs = batch.get("text_pair")
    encoded = tokenizer(batch["text"], pairs if pairs and any(p is not None for p in pairs) else None,
                        truncation=True, max_length=max_length)
    if not use_token_type_ids:
        encoded.pop("token_type_ids", None)
    encoded["labels"] = [encode_label(v, label2id, multi_label) for v in batch["label"]]
    return encoded


def class_weights(label_ids: Sequence[int], num_labels: int) -> list[float]:
    """Inverse-frequency weights normalised to mean 1 (the 'balanced' heuristic of scikit-learn)."""
    counts = np.bincount(np.asarray(label_ids, dtype=np.int64), minlength=num_labels).astype(np.float64)
    counts[counts == 0] = 1.0
    weights = counts.sum() / (num_labels * counts)
    return (weights / weights.mean()).tolist()


def predict_labels(logits: np.ndarray, multi_label: bool):
    """Class ids (argmax) or a multi-hot matrix (sigmoid ≥ threshold), plus the scores behind them."""
    logits = np.asarray(logits, dtype=np.float64)
    if multi_label:
        probs = 1.0 / (1.0 + np.exp(-logits))
        return (probs >= THRESHOLD).astype(int), probs
    probs = softmax(logits)
    return probs.argmax(-1), probs


def compute_metrics_arrays(logits: np.ndarray, labels: np.ndarray, names: list[str], multi_label: bool):
    """Accuracy, macro F1, per-class P/R/F1, confusion matrix and binary ROC-AUC, from raw logits."""
    from sklearn.metrics import confusion_matrix, f1_score, precision_recall_fscore_support, roc_auc_score

    predicted, probs = predict_labels(logits, multi_label)
    labels = np.asarray(labels)
    if multi_label:
        labels = labels.astype(int)
        accuracy = float((predicted == labels).all(axis=1).mean())  # exact-set match
    else:
        accuracy = float((predicted == labels).mean())
    ids = list(range(len(names)))
    f1_macro = float(f1_score(labels, predicted, average="macro", labels=None if multi_label else ids,
                              zero_division=0))
    p, r, f, s = precision_recall_fscore_support(labels, predicted, labels=None if multi_label else ids,
                                                 zero_division=0)
    metrics = {"accuracy": accuracy, "f1_macro": f1_macro}
    per_class = [{"label": names[i], "precision": float(p[i]), "recall": float(r[i]), "f1": float(f[i]),
                  "support": int(s[i])} for i in ids]
    tables: dict = {"per_class": per_class}
    if not multi_label:
        tables["confusion_matrix"] = {"labels": names,
                                      "matrix": confusion_matrix(labels, predicted, labels=ids).tolist()}
        if len(names) == 2 and len(set(labels.tolist())) == 2:
            metrics["roc_auc"] = float(roc_auc_score(labels, probs[:, 1]))
    else:
        metrics["f1_micro"] = float(f1_score(labels, predicted, average="micro", zero_division=0))
    return metrics, tables


def trainer_metrics(eval_pred, names: list[str], multi_label: bool) -> dict:
    """``compute_metrics`` for the Trainer: the scalar metrics only."""
    logits, labels = eval_pred.predictions, eval_pred.label_ids
    if isinstance(logits, tuple):
        logits = logits[0]
    return compute_metrics_arrays(logits, labels, names, multi_label)[0]


def prediction_rows(records: Sequence[dict], logits: np.ndarray, names: list[str], multi_label: bool) -> list[dict]:
    """One row per validation record for error analysis."""
    predicted, probs = predict_labels(logits, multi_label)
    label2id = {n: i for i, n in enumerate(names)}
    rows = []
    for record, pred, prob in zip(records, predicted, probs):
        if multi_label:
            pred_names = [names[i] for i, on in enumerate(pred) if on]
            gold = sorted(str(v) for v in (record["label"] if isinstance(record["label"], list) else [record["label"]]))
            row = {"gold": gold, "predicted": pred_names, "correct": sorted(pred_names) == gold,
                   "score": {names[i]: round(float(x), 4) for i, x in enumerate(prob)}}
        else:
            gold_id = label2id.get(str(record["label"]))
            row = {"gold": str(record["label"]), "predicted": names[int(pred)],
                   "correct": names[int(pred)] == str(record["label"]), "score": round(float(prob[int(pred)]), 4),
                   # the probability of the given label: the Errors view ranks by it (jobs.label_issues)
                   "gold_score": None if gold_id is None else round(float(prob[gold_id]), 4)}
        row = {"text": record["text"], **({"text_pair": record["text_pair"]} if record.get("text_pair") else {}), **row}
        rows.append(row)
    return rows


def prepare(train: list[dict], validation: list[dict], tokenizer, config, hp: dict) -> Prepared:
    """Tokenize both splits and describe the task for the engine."""
    from datasets import Dataset
    from transformers import DataCollatorWithPadding

    multi_label = hp.get("multi_label")
    if multi_label is None:
        multi_label = is_multi_label(train)
    # an evaluation (jobs.predict.evaluate) passes the trained model's labels: ids must be the model's
    names = list(hp["model_labels"]) if hp.get("model_labels") else collect_labels(train, multi_label)
    label2id = {n: i for i, n in enumerate(names)}
    use_tt = model_uses_token_type_ids(tokenizer, config)
    kwargs = dict(tokenizer=tokenizer, max_length=hp["max_length"], label2id=label2id, multi_label=multi_label,
                  use_token_type_ids=use_tt)
    columns = ["input_ids", "attention_mask", "labels"] + (["token_type_ids"] if use_tt else [])
    datasets_ = []
    for records in (train, validation):
        rows = [{"text": r["text"], "text_pair": r.get("text_pair"), "label": r["label"]} for r in records]
        ds = Dataset.from_list(rows).map(tokenize_batch, batched=True, fn_kwargs=kwargs)
        datasets_.append(keep_columns(ds, columns))
    weights = None
    if hp.get("class_weights") and not multi_label:
        weights = class_weights([label2id[str(r["label"])] for r in train], len(names))
    return Prepared(
        train_dataset=datasets_[0], eval_dataset=datasets_[1],
        collator=DataCollatorWithPadding(tokenizer),
        validation_records=validation,
        compute_metrics=functools.partial(trainer_metrics, names=names, multi_label=multi_label),
        main_metric=MAIN_METRIC, greater_is_better=True, labels=names,
        strata=None if multi_label else list(datasets_[0]["labels"]),
        extra={"multi_label": multi_label, "class_weights": weights, "max_length": hp["max_length"]},
    )


def build_model(path: str, prepared: Prepared, config):
    from transformers import AutoModelForSequenceClassification

    names = prepared.labels
    problem = "multi_label_classification" if prepared.extra["multi_label"] else "single_label_classification"
    return AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=len(names), id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)},
        problem_type=problem, ignore_mismatched_sizes=True)


def evaluate(prepared: Prepared, predictions) -> Evaluation:
    logits = predictions.predictions[0] if isinstance(predictions.predictions, tuple) else predictions.predictions
    multi = prepared.extra["multi_label"]
    metrics, tables = compute_metrics_arrays(logits, predictions.label_ids, prepared.labels, multi)
    return Evaluation(metrics, tables, prediction_rows(prepared.validation_records, logits, prepared.labels, multi))


def predict_heldout(trainer, prepared: Prepared, records: list[dict]) -> dict:
    """Every class probability for records the model never saw (an audit's held-out fold).

    Their labels are not read: a held-out label may even be missing from this fold's training part.
    """
    from datasets import Dataset

    if prepared.extra["multi_label"]:
        raise TrainingError("finding suspicious labels needs single-label data",
                            "audit a dataset with one label per example")
    tokenizer = trainer.processing_class
    use_tt = "token_type_ids" in prepared.train_dataset.column_names
    pairs = [r.get("text_pair") for r in records]
    encoded = tokenizer([r["text"] for r in records], pairs if any(p is not None for p in pairs) else None,
                        truncation=True, max_length=prepared.extra["max_length"])
    columns = ["input_ids", "attention_mask"] + (["token_type_ids"] if use_tt else [])
    dataset = Dataset.from_dict({c: encoded[c] for c in columns})
    output = trainer.predict(dataset)
    logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
    return {"probs": softmax(logits), "labels": list(prepared.labels), "record": list(range(len(records))),
            "word": [-1] * len(records)}


def weighted_loss(logits, labels, weights: Optional[list[float]]):
    """Cross-entropy with per-class weights (torch); used only when class weights are on."""
    import torch

    weight = torch.tensor(weights, dtype=logits.dtype, device=logits.device)
    return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), weight=weight)
