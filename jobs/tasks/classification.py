"""Text classification: single texts or pairs; binary, multi-class and multi-label.

Multi-label uses one sigmoid per class (BCE loss, threshold 0.5). Optional class
weights are applied by the engine's trainer through ``weighted_loss``. A run's final evaluation also
fits a temperature and the decision thresholds (per class for multi-label; optionally the positive
class's for binary) that its model predicts with (``calibrate``); the metrics at 0.5 stay the headline.
"""
from __future__ import annotations

import functools
import logging
from typing import Optional, Sequence

import numpy as np

from jobs.tasks.common import Evaluation, Prepared, keep_columns, model_uses_token_type_ids, read_jsonl, softmax
from storage.errors import TrainingError

log = logging.getLogger(__name__)
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


def tokenize_documents(batch: dict, tokenizer, chunking, label2id: dict[str, int], multi_label: bool,
                       use_token_type_ids: bool) -> dict:
    """Each record as the list of its windows (``jobs.training.chunking.split_windows``): one row per document,
    each feature a list of windows; ``dropped`` counts the windows beyond ``max_windows``."""
    from jobs.training.chunking import split_windows

    pairs = batch.get("text_pair")
    windows = split_windows(tokenizer, batch["text"], pairs if pairs and any(p for p in pairs) else None,
                            chunking.window, chunking.stride, chunking.max_windows, use_token_type_ids)
    out: dict = {name: [[] for _ in batch["text"]] for name in windows.features}
    for row, doc in enumerate(windows.document):
        for name, values in windows.features.items():
            out[name][doc].append(values[row])
    out["dropped"] = windows.dropped
    if "label" in batch:
        out["labels"] = [encode_label(v, label2id, multi_label) for v in batch["label"]]
    return out


def document_dataset(records: Sequence[dict], tokenizer, chunking, label2id: dict[str, int], multi_label: bool,
                     use_token_type_ids: bool, labelled: bool = True):
    """A dataset of documents read in windows, and how many windows ``max_windows`` dropped."""
    from datasets import Dataset

    from jobs.training.chunking import dropped_message

    rows = [{"text": r["text"], "text_pair": r.get("text_pair"), **({"label": r["label"]} if labelled else {})}
            for r in records]
    ds = Dataset.from_list(rows).map(tokenize_documents, batched=True, fn_kwargs=dict(
        tokenizer=tokenizer, chunking=chunking, label2id=label2id, multi_label=multi_label,
        use_token_type_ids=use_token_type_ids))
    dropped = list(ds["dropped"])
    message = dropped_message(dropped, chunking.max_windows)
    if message:
        log.warning("%s", message)
    columns = ["input_ids", "attention_mask"] + (["labels"] if labelled else []) + (
        ["token_type_ids"] if use_token_type_ids else [])
    return keep_columns(ds, columns), sum(dropped)


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
                   # the probability of the given label: the Errors view ranks by it (jobs.audits.confident_learning)
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
    chunking = hp.get("chunking_plan")  # jobs.training.chunking.resolve: the run reads long texts in windows
    datasets_, dropped = [], 0
    for records in (train, validation):
        if chunking is not None:
            ds, cut = document_dataset(records, tokenizer, chunking, label2id, multi_label, use_tt)
            datasets_.append(ds)
            dropped += cut
            continue
        rows = [{"text": r["text"], "text_pair": r.get("text_pair"), "label": r["label"]} for r in records]
        ds = Dataset.from_list(rows).map(tokenize_batch, batched=True, fn_kwargs=kwargs)
        datasets_.append(keep_columns(ds, columns))
    weights = None
    if hp.get("class_weights") and not multi_label:
        weights = class_weights([label2id[str(r["label"])] for r in train], len(names))
    if chunking is not None:
        from jobs.training.chunking import document_collator

        collator = document_collator(tokenizer)
    else:
        collator = DataCollatorWithPadding(tokenizer)
    return Prepared(
        train_dataset=datasets_[0], eval_dataset=datasets_[1],
        collator=collator,
        validation_records=validation,
        compute_metrics=functools.partial(trainer_metrics, names=names, multi_label=multi_label),
        main_metric=MAIN_METRIC, greater_is_better=True, labels=names,
        strata=None if multi_label else list(datasets_[0]["labels"]),
        extra={"multi_label": multi_label, "class_weights": weights, "max_length": hp["max_length"],
               "head": hp.get("head", "classifier"), "seed": hp.get("seed", 42), "chunking": chunking,
               "windows_dropped": dropped},
    )


def build_model(path: str, prepared: Prepared, config):
    """A transformers sequence classifier, or for ``hp["head"] == "sentence"`` the sentence-transformers
    model with its own pooling and a linear head (``jobs.training.sentence_head.build_sentence_classifier``)."""
    from transformers import AutoModelForSequenceClassification

    names = prepared.labels
    if prepared.extra.get("head") == "sentence":
        from jobs.training.sentence_head import build_sentence_classifier

        return build_sentence_classifier(path, names, prepared.extra["max_length"], prepared.train_dataset,
                                         prepared.collator, balanced=bool(prepared.extra["class_weights"]),
                                         seed=prepared.extra["seed"])
    problem = "multi_label_classification" if prepared.extra["multi_label"] else "single_label_classification"
    # a chunked run's windows classifier; the engine wraps it (after LoRA) to train on documents (chunked_model)
    return AutoModelForSequenceClassification.from_pretrained(
        path, num_labels=len(names), id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)},
        problem_type=problem, ignore_mismatched_sizes=True)


def chunked_model(model, prepared: Prepared):
    """``model`` trained on documents read in windows when the run chunks (``jobs.training.chunking``), else itself."""
    chunking = prepared.extra.get("chunking")
    if chunking is None:
        return model
    from jobs.training.chunking import chunked_classifier

    return chunked_classifier(model, chunking.pooling, prepared.extra["multi_label"], prepared.extra["class_weights"],
                              chunking.scorer)


def evaluate(prepared: Prepared, predictions) -> Evaluation:
    """The metrics, tables and rows of the model's predictions; a training run's final evaluation (the
    engine sets ``prepared.extra["calibrate"]``) also fits the calibration stored with the model."""
    logits = predictions.predictions[0] if isinstance(predictions.predictions, tuple) else predictions.predictions
    multi = prepared.extra["multi_label"]
    metrics, tables = compute_metrics_arrays(logits, predictions.label_ids, prepared.labels, multi)
    found_metrics = found_tables = None
    if prepared.extra.get("calibrate"):
        found_metrics, found_tables = calibrate(logits, predictions.label_ids, prepared.labels, multi,
                                                prepared.extra["calibrate"], prepared.extra.get("threshold", "none"))
    elif prepared.extra.get("stored_calibration") is not None:  # a test set: the run's own calibration, not refitted
        found_metrics, found_tables = apply_stored(logits, predictions.label_ids, prepared.labels, multi,
                                                   prepared.extra["stored_calibration"])
    if found_metrics is not None:
        merge_calibration(metrics, tables, found_metrics, found_tables)
    return Evaluation(metrics, tables, prediction_rows(prepared.validation_records, logits, prepared.labels, multi))


def merge_calibration(metrics: dict, tables: dict, found_metrics: dict, found_tables: dict) -> None:
    """Fold what ``calibrate`` or ``apply_stored`` found into an evaluation's metrics and tables (in place):
    the per-class thresholds join the per-class rows."""
    metrics.update(found_metrics)
    for entry, tuned in zip(tables["per_class"], found_tables.pop("per_class", ())):
        entry.update(tuned)
    tables.update(found_tables)


def calibrate(logits: np.ndarray, labels: np.ndarray, names: list[str], multi_label: bool, setting: str,
              target: str = "none") -> tuple[dict, dict]:
    """Temperature scaling, and the decision thresholds, fitted on the validation logits (``jobs.evaluation.calibration``).

    ``setting`` (``train.calibrate``): "auto" applies the temperature where it lowers the ECE (and the
    fit found a minimum inside its range), "on" always, "off" never; the ECE before and after is reported
    either way. Multi-label runs get per-class thresholds of best F1, tuned on the scores the model will
    serve (scaled when the temperature is applied), with their metrics beside those at 0.5. A binary run
    with a ``target`` (``train.threshold``) gets its positive class's threshold and the precision-recall
    curve. ``tables["calibration"]["model"]`` is what ``model/calibration.json`` holds
    (``jobs.evaluation.postprocess.load_calibration`` reads it).
    """
    from jobs.evaluation import calibration as cal

    logits, labels = np.asarray(logits, dtype=np.float64), np.asarray(labels)
    # "auto" on a split too small to support a temperature fits none ("on" is the user's explicit choice)
    too_few = cal.too_few_to_calibrate(len(labels)) if setting == "auto" else None
    temperature = 1.0 if too_few else cal.fit_temperature(logits, labels, multi_label)
    before, after = cal.probabilities(logits, multi_label), cal.probabilities(logits, multi_label, temperature)
    ece, ece_calibrated = (cal.expected_calibration_error(p, labels, multi_label) for p in (before, after))
    # at a bound of the search the validation split does not pin T down: it separates the classes perfectly
    # and the NLL keeps falling as T -> 0, so "auto" would make the model near-certain of every answer
    # and a split the model gets entirely right does not pin it down either, wherever the search stops
    # (SMS with 1,000 messages: 100 of 100 right, T = 0.12, ECE 0, then over-confident on the test set)
    right = (logits > 0) == labels.astype(bool) if multi_label else logits.argmax(axis=1) == labels
    pinned = cal.T_LOW * 1.01 < temperature < cal.T_HIGH / 1.01 and not bool(np.all(right))
    applied = setting == "on" or (setting == "auto" and not too_few and pinned and ece_calibrated < ece)
    if too_few:
        log.info("temperature scaling %s", too_few)
    elif setting == "auto" and not pinned:
        log.info("temperature scaling not applied: the validation split does not pin T down (fitted %.3g; "
                 "every prediction right, or T at the end of its range)", temperature)
    served = after if applied else before
    saved: dict = {"temperature": round(temperature, 6), "applied": applied}
    metrics = {"ece": round(ece, 6), "ece_calibrated": round(ece_calibrated, 6), "temperature": round(temperature, 6),
               "calibration_examples": len(labels)}
    if too_few:
        del metrics["temperature"]  # none was fitted: the header says why (``calibration_examples``)
        saved["not_fitted"] = too_few
    tables: dict = {"calibration": {"setting": setting, **saved, "ece": metrics["ece"],
                                    "ece_calibrated": metrics["ece_calibrated"],
                                    "bins": cal.reliability_bins(before, labels, multi_label),
                                    "bins_calibrated": [] if too_few else cal.reliability_bins(after, labels,
                                                                                               multi_label)}}
    if multi_label:
        thresholds, tuned_metrics, tables["per_class"] = multi_label_thresholds(served, labels.astype(int))
        saved["thresholds"] = dict(zip(names, thresholds))
        metrics.update(tuned_metrics)
    elif target != "none" and len(names) == 2:
        found = positive_class_threshold(served, labels, names, target)
        metrics.update(found.pop("metrics"))
        tables["precision_recall"] = found
        if found["threshold"] is not None:
            saved["positive_threshold"] = {"label": found["positive"], "threshold": found["threshold"],
                                           "target": target}
    elif target != "none":
        log.info("train.threshold %s is for binary classification; this run has %d classes", target, len(names))
    tables["calibration"]["model"] = saved
    return metrics, tables


def apply_stored(logits: np.ndarray, labels: np.ndarray, names: list[str], multi_label: bool,
                 stored) -> tuple[dict, dict]:
    """The run's stored calibration (``jobs.evaluation.postprocess.Calibration``, fitted on its validation split) applied
    to other examples, a test set: the ECE of the raw and of the served scores, and the metrics at the
    stored decision thresholds beside those at 0.5 / the most probable class. Nothing is fitted here: a
    threshold tuned on the test set itself would flatter it."""
    from jobs.evaluation import calibration as cal

    logits, labels = np.asarray(logits, dtype=np.float64), np.asarray(labels)
    before = cal.probabilities(logits, multi_label)
    served = cal.probabilities(logits, multi_label, stored.temperature) if stored.calibrated else before
    ece, ece_served = (cal.expected_calibration_error(p, labels, multi_label) for p in (before, served))
    metrics: dict = {"ece": round(ece, 6), "ece_calibrated": round(ece_served, 6),
                     "temperature": round(stored.temperature, 6)}
    tables: dict = {"calibration": {"setting": "stored", "applied": stored.calibrated,
                                    "temperature": metrics["temperature"], "ece": metrics["ece"],
                                    "ece_calibrated": metrics["ece_calibrated"],
                                    "bins": cal.reliability_bins(before, labels, multi_label),
                                    "bins_calibrated": cal.reliability_bins(served, labels, multi_label)}}
    if multi_label and stored.thresholds:
        from sklearn.metrics import f1_score

        thresholds = [float(stored.thresholds.get(name, cal.DEFAULT_THRESHOLD)) for name in names]
        gold, tuned = labels.astype(int), cal.decide_multi_label(served, thresholds)
        metrics.update({"f1_macro_tuned": float(f1_score(gold, tuned, average="macro", zero_division=0)),
                        "f1_micro_tuned": float(f1_score(gold, tuned, average="micro", zero_division=0)),
                        "accuracy_tuned": float((tuned == gold).all(axis=1).mean())})
        per_class = f1_score(gold, tuned, average=None, zero_division=0)
        tables["per_class"] = [{"threshold": t, "f1_tuned": float(f)} for t, f in zip(thresholds, per_class)]
    elif not multi_label and stored.positive in names and stored.positive_threshold is not None:
        positive = names.index(stored.positive)
        gold, decided = labels.astype(int) == positive, served[:, positive] >= stored.positive_threshold
        tp, fp, fn = int((decided & gold).sum()), int((decided & ~gold).sum()), int((~decided & gold).sum())
        metrics.update({"positive_threshold": stored.positive_threshold,
                        "precision_tuned": tp / (tp + fp) if tp + fp else 0.0,
                        "recall_tuned": tp / (tp + fn) if tp + fn else 0.0,
                        "f1_tuned": 2 * tp / (2 * tp + fp + fn) if tp else 0.0,
                        "accuracy_tuned": float((decided == gold).mean())})
    return metrics, tables


def multi_label_thresholds(probs: np.ndarray, gold: np.ndarray) -> tuple[list[float], dict, list[dict]]:
    """Per-class thresholds of best F1 (``jobs.evaluation.calibration.tune_thresholds``), the metrics at them, and per
    class its threshold and F1 there (merged into the ``per_class`` table)."""
    from sklearn.metrics import f1_score

    from jobs.evaluation import calibration as cal

    thresholds = cal.tune_thresholds(probs, gold)
    tuned = cal.decide_multi_label(probs, thresholds)
    metrics = {"f1_macro_tuned": float(f1_score(gold, tuned, average="macro", zero_division=0)),
               "f1_micro_tuned": float(f1_score(gold, tuned, average="micro", zero_division=0)),
               "accuracy_tuned": float((tuned == gold).all(axis=1).mean())}
    per_class = f1_score(gold, tuned, average=None, zero_division=0)
    return thresholds, metrics, [{"threshold": t, "f1_tuned": float(f)} for t, f in zip(thresholds, per_class)]


def positive_class_threshold(probs: np.ndarray, labels: np.ndarray, names: list[str], target: str) -> dict:
    """The binary run's positive class (the rarer one in validation; the second on a tie), its threshold for
    ``target`` and the precision-recall curve; with the positive class's metrics at that threshold."""
    from jobs.evaluation import calibration as cal

    counts = np.bincount(labels.astype(int), minlength=2)
    positive = 0 if counts[0] < counts[1] else 1
    gold, scores = (labels.astype(int) == positive).astype(int), probs[:, positive]
    threshold = cal.positive_threshold(scores, gold, target)
    found: dict = {"positive": names[positive], "target": target,
                   "threshold": None if threshold is None else round(threshold, 6),
                   "points": cal.precision_recall_curve(scores, gold), "metrics": {}}
    if threshold is None:
        log.warning("no threshold reaches %s on the validation split: the most probable class decides", target)
        return found
    decided = scores >= found["threshold"]  # as the stored (rounded) threshold decides
    tp, fp = int((decided & (gold == 1)).sum()), int((decided & (gold == 0)).sum())
    fn = int(gold.sum()) - tp
    found["metrics"] = {"positive_threshold": found["threshold"],
                        "precision_tuned": tp / (tp + fp) if tp + fp else 0.0,
                        "recall_tuned": tp / (tp + fn) if tp + fn else 0.0,
                        "f1_tuned": 2 * tp / (2 * tp + fp + fn) if tp else 0.0,
                        "accuracy_tuned": float((decided == (gold == 1)).mean())}
    return found


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
    if prepared.extra.get("chunking") is not None:  # an audit of long documents reads them as training did
        dataset, _ = document_dataset(records, tokenizer, prepared.extra["chunking"], {}, False, use_tt,
                                      labelled=False)
        output = trainer.predict(dataset)
        logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
        return {"probs": softmax(logits), "labels": list(prepared.labels), "record": list(range(len(records))),
                "word": [-1] * len(records)}
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
