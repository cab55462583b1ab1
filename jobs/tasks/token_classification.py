"""Token classification (NER, POS): label alignment through ``word_ids()`` and word-level metrics.

Entity metrics (seqeval, overall and per type) are reported when the tag set is
BIO/IOB2; token accuracy always (it is the POS metric).
"""
from __future__ import annotations

import functools
from typing import Optional, Sequence

import numpy as np

from jobs.tasks.common import Evaluation, Prepared, keep_columns, model_uses_token_type_ids, read_jsonl, softmax
from storage.errors import TrainingError

MAIN_METRIC = "entity_f1"  # token_accuracy when the tags are not BIO
REQUIRED = ("tokens", "tags")
IGNORE = -100
TOP_TAGS = 15  # the confusion matrix shows this many tags, the rest as OTHER
OTHER = "other"


def read(path):
    records = read_jsonl(path, REQUIRED)
    for number, record in enumerate(records, start=1):
        if len(record["tokens"]) != len(record["tags"]):
            raise TrainingError(f"{path}: record {number} has {len(record['tokens'])} tokens but "
                                f"{len(record['tags'])} tags", "every token needs exactly one tag")
    return records


def is_bio(tags: Sequence[str]) -> bool:
    """True when every tag is O or B-/I-/E-/S- prefixed: the tag sets seqeval scores as entities."""
    return all(t == "O" or (len(t) > 2 and t[:2] in ("B-", "I-", "E-", "S-")) for t in tags)


def align_labels(word_ids: Sequence[Optional[int]], word_labels: Sequence[int], label_all_subtokens: bool = False,
                 continuation_ids: Optional[dict[int, int]] = None) -> list[int]:
    """Token labels from word labels: the first sub-token of a word gets the word's label; specials get -100.

    Later sub-tokens get -100, or (``label_all_subtokens``) the word's label, with
    B-X turned into I-X through ``continuation_ids`` so a word is not counted as several entities.
    """
    labels, previous = [], None
    for word in word_ids:
        if word is None:
            labels.append(IGNORE)
        elif word != previous:
            labels.append(word_labels[word])
        elif label_all_subtokens:
            label = word_labels[word]
            labels.append((continuation_ids or {}).get(label, label))
        else:
            labels.append(IGNORE)
        previous = word
    return labels


def continuation_map(names: Sequence[str]) -> dict[int, int]:
    """B-X id → I-X id, for labelling every sub-token."""
    ids = {n: i for i, n in enumerate(names)}
    return {i: ids["I-" + n[2:]] for i, n in enumerate(names) if n.startswith("B-") and "I-" + n[2:] in ids}


def tokenize_batch(batch: dict, tokenizer, max_length: int, label2id: dict[str, int], label_all_subtokens: bool,
                   continuation_ids: dict[int, int]) -> dict:
    """Tokenize pre-split words and align their tags (needs a fast tokenizer for ``word_ids``)."""
    encoded = tokenizer(batch["tokens"], is_split_into_words=True, truncation=True, max_length=max_length)
    all_labels = []
    for index, tags in enumerate(batch["tags"]):
        # a validation tag never seen in training cannot be predicted: it is left out of the loss here,
        # and still counts as an error in the final word-level evaluation (which reads the gold strings)
        word_labels = [label2id.get(t, IGNORE) for t in tags]
        all_labels.append(align_labels(encoded.word_ids(index), word_labels, label_all_subtokens, continuation_ids))
    encoded["labels"] = all_labels
    return encoded


def word_predictions(word_ids: Sequence[Optional[int]], token_pred: Sequence[int], n_words: int) -> list[Optional[int]]:
    """Each word's prediction is its first sub-token's; words cut off by truncation get None."""
    out: list[Optional[int]] = [None] * n_words
    for position, word in enumerate(word_ids):
        if word is not None and word < n_words and out[word] is None:
            out[word] = int(token_pred[position])
    return out


def entity_spans(tags: Sequence[str]) -> list[dict]:
    """Entity spans (type, first word, last word exclusive) from BIO tags, as seqeval reads them."""
    from seqeval.metrics.sequence_labeling import get_entities

    return [{"type": t, "start": s, "end": e + 1} for t, s, e in get_entities(list(tags))]


def word_metrics(gold: list[list[str]], predicted: list[list[str]], bio: bool, with_tables: bool = True):
    """token_accuracy always; entity precision/recall/F1 overall for BIO tags. ``with_tables`` adds the
    per-entity (BIO) and per-tag scores and the confusion matrix (evaluations during training skip them)."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score

    flat_gold = [t for seq in gold for t in seq]
    flat_pred = [t for seq in predicted for t in seq]
    metrics = {"token_accuracy": float(np.mean([g == p for g, p in zip(flat_gold, flat_pred)])) if flat_gold else 0.0}
    tables: dict = {}
    if bio:
        metrics.update(entity_precision=float(precision_score(gold, predicted, zero_division=0)),
                       entity_recall=float(recall_score(gold, predicted, zero_division=0)),
                       entity_f1=float(f1_score(gold, predicted, zero_division=0)))
    if bio and with_tables:
        report = classification_report(gold, predicted, output_dict=True, zero_division=0)
        tables["per_entity"] = [{"entity": name, "precision": float(v["precision"]), "recall": float(v["recall"]),
                                 "f1": float(v["f1-score"]), "support": int(v["support"])}
                                for name, v in report.items() if name not in ("micro avg", "macro avg", "weighted avg")]
    if flat_gold and with_tables:
        tables["per_tag"] = per_tag_scores(flat_gold, flat_pred)
        tables["confusion_matrix"] = top_tags_confusion(flat_gold, flat_pred)
    return metrics, tables


def per_tag_scores(flat_gold: Sequence[str], flat_pred: Sequence[str]) -> list[dict]:
    """Word-level precision, recall, F1 and support of every tag, most frequent (in the gold tags) first.

    For POS this is the per-class table; for NER it complements the per-entity one (B-/I- apart).
    """
    from collections import Counter

    from sklearn.metrics import precision_recall_fscore_support

    support = Counter(flat_gold)
    labels = sorted(set(flat_gold) | set(flat_pred), key=lambda t: (-support[t], t))
    precision, recall, f1, counts = precision_recall_fscore_support(flat_gold, flat_pred, labels=labels,
                                                                     zero_division=0)
    return [{"tag": tag, "precision": float(p), "recall": float(r), "f1": float(f), "support": int(n)}
            for tag, p, r, f, n in zip(labels, precision, recall, f1, counts)]


def top_tags_confusion(flat_gold: Sequence[str], flat_pred: Sequence[str], top: int = TOP_TAGS) -> dict:
    """A confusion matrix (rows gold, columns predicted) of the ``top`` most frequent gold tags.

    Every other tag is counted as ``other``, so 124 Brown POS tags still give a readable matrix;
    a confusion between two rare tags then falls in the ``other`` diagonal cell.
    """
    from collections import Counter

    from sklearn.metrics import confusion_matrix

    support = Counter(flat_gold)
    ranked = sorted(set(flat_gold) | set(flat_pred), key=lambda t: (-support[t], t))
    kept = ranked[:top]
    if len(ranked) > top:
        keep = set(kept)
        flat_gold = [t if t in keep else OTHER for t in flat_gold]
        flat_pred = [t if t in keep else OTHER for t in flat_pred]
        kept = [*kept, OTHER]
    return {"labels": kept, "matrix": confusion_matrix(flat_gold, flat_pred, labels=kept).tolist(),
            "tags": len(ranked)}


def decode_token_level(logits: np.ndarray, labels: np.ndarray, names: Sequence[str]):
    """Gold/predicted tag sequences from token logits and aligned labels (positions labelled -100 skipped)."""
    pred = np.asarray(logits).argmax(-1)
    gold_seqs, pred_seqs = [], []
    for p_row, l_row in zip(pred, labels):
        keep = l_row != IGNORE
        gold_seqs.append([names[i] for i in l_row[keep]])
        pred_seqs.append([names[i] for i in p_row[keep]])
    return gold_seqs, pred_seqs


def trainer_metrics(eval_pred, names: Sequence[str], bio: bool) -> dict:
    """Metrics during training, on labelled sub-tokens (= words unless every sub-token is labelled)."""
    logits = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
    gold, pred = decode_token_level(logits, eval_pred.label_ids, names)
    return word_metrics(gold, pred, bio, with_tables=False)[0]


def prepare(train: list[dict], validation: list[dict], tokenizer, config, hp: dict) -> Prepared:
    from datasets import Dataset
    from transformers import DataCollatorForTokenClassification

    if not getattr(tokenizer, "is_fast", False):
        raise TrainingError("token classification needs a fast tokenizer (for word_ids)",
                            "choose a model that ships a tokenizer.json")
    names = sorted({t for r in train for t in r["tags"]}, key=lambda t: (t != "O", t[2:], t))
    if hp.get("model_labels"):  # an evaluation (jobs.predict.evaluate): the trained model's tags, in its order
        names = list(hp["model_labels"])
    label2id = {n: i for i, n in enumerate(names)}
    bio = is_bio(names)
    kwargs = dict(tokenizer=tokenizer, max_length=hp["max_length"], label2id=label2id,
                  label_all_subtokens=bool(hp.get("label_all_subtokens")), continuation_ids=continuation_map(names))
    columns = ["input_ids", "attention_mask", "labels"] + (
        ["token_type_ids"] if model_uses_token_type_ids(tokenizer, config) else [])
    built = [keep_columns(Dataset.from_list([{"tokens": r["tokens"], "tags": r["tags"]} for r in recs])
                          .map(tokenize_batch, batched=True, fn_kwargs=kwargs), columns)
             for recs in (train, validation)]
    return Prepared(
        train_dataset=built[0], eval_dataset=built[1], collator=DataCollatorForTokenClassification(tokenizer),
        validation_records=validation,
        compute_metrics=functools.partial(trainer_metrics, names=names, bio=bio),
        main_metric="entity_f1" if bio else "token_accuracy", greater_is_better=True, labels=names,
        extra={"bio": bio, "tokenizer": tokenizer, "max_length": hp["max_length"]},
    )


def build_model(path: str, prepared: Prepared, config):
    from transformers import AutoModelForTokenClassification

    names = prepared.labels
    return AutoModelForTokenClassification.from_pretrained(
        path, num_labels=len(names), id2label=dict(enumerate(names)), label2id={n: i for i, n in enumerate(names)},
        ignore_mismatched_sizes=True)


def evaluate(prepared: Prepared, predictions) -> Evaluation:
    """Word-level metrics: predictions mapped back to words (first sub-token) and then to entities."""
    logits = predictions.predictions[0] if isinstance(predictions.predictions, tuple) else predictions.predictions
    names, tokenizer = prepared.labels, prepared.extra["tokenizer"]
    label2id = {n: i for i, n in enumerate(names)}
    gold_all, pred_all, rows = [], [], []
    for index, record in enumerate(prepared.validation_records):
        encoded = tokenizer(record["tokens"], is_split_into_words=True, truncation=True,
                            max_length=prepared.extra["max_length"])
        word_ids = encoded.word_ids()
        row_logits = logits[index][: len(word_ids)]
        probs = softmax(row_logits)
        per_word = word_predictions(word_ids, probs.argmax(-1), len(record["tokens"]))
        predicted = [names[p] if p is not None else "O" for p in per_word]
        first_pos = first_subtokens(word_ids)
        scores = [round(float(probs[first_pos[w]].max()), 4) if w in first_pos else 0.0
                  for w in range(len(record["tokens"]))]
        # the probability of each given tag (None: cut off, or a tag training never saw), for the Errors view
        gold_scores = [round(float(probs[first_pos[w], label2id[t]]), 4) if w in first_pos and t in label2id
                       else None for w, t in enumerate(record["tags"])]
        gold_all.append(list(record["tags"]))
        pred_all.append(predicted)
        row = {"tokens": record["tokens"], "gold": record["tags"], "predicted": predicted,
               "correct": predicted == list(record["tags"]), "score": scores, "gold_score": gold_scores}
        if prepared.extra["bio"]:
            row["gold_entities"] = entity_spans(record["tags"])
            row["predicted_entities"] = entity_spans(predicted)
        rows.append(row)
    metrics, tables = word_metrics(gold_all, pred_all, prepared.extra["bio"])
    return Evaluation(metrics, tables, rows)


def first_subtokens(word_ids: Sequence[Optional[int]]) -> dict[int, int]:
    """Word index → the position of its first sub-token (words cut off by truncation are absent)."""
    first: dict[int, int] = {}
    for position, word in enumerate(word_ids):
        if word is not None and word not in first:
            first[word] = position
    return first


def predict_heldout(trainer, prepared: Prepared, records: list[dict]) -> dict:
    """Every tag probability for each word (its first sub-token) of records the model never saw.

    One row per word; a word cut off by the max length has no row. The given tags are not read.
    """
    from datasets import Dataset

    tokenizer, max_length = prepared.extra["tokenizer"], prepared.extra["max_length"]
    encoded = tokenizer([r["tokens"] for r in records], is_split_into_words=True, truncation=True,
                        max_length=max_length)
    columns = ["input_ids", "attention_mask"] + (
        ["token_type_ids"] if "token_type_ids" in prepared.train_dataset.column_names else [])
    output = trainer.predict(Dataset.from_dict({c: encoded[c] for c in columns}))
    logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
    probs, record_of, word_of = [], [], []
    for index in range(len(records)):
        first = first_subtokens(encoded.word_ids(index))
        if not first:
            continue
        words = sorted(first)
        probs.append(softmax(logits[index][[first[w] for w in words]]))
        record_of.extend([index] * len(words))
        word_of.extend(words)
    n_tags = len(prepared.labels)
    return {"probs": np.concatenate(probs) if probs else np.zeros((0, n_tags)), "labels": list(prepared.labels),
            "record": record_of, "word": word_of}
