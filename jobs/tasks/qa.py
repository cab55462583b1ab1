"""Extractive question answering (SQuAD v1/v2 style).

Features follow the canonical recipe (``max_length`` + ``doc_stride`` windows with
overflowing tokens and offset mappings); answers outside a window point at CLS.
Post-processing is a pure numpy n-best search over valid spans; EM/F1 use the
official SQuAD normalisation, implemented here because ``evaluate.load`` needs the hub.
"""
from __future__ import annotations

import collections
import re
import string
from typing import Optional, Sequence

import numpy as np

from jobs.tasks.common import Evaluation, Prepared, keep_columns, model_uses_token_type_ids, read_jsonl
from storage.errors import TrainingError

MAIN_METRIC = "loss"  # during training; the final evaluation reports exact_match / f1
REQUIRED = ("id", "context", "question", "answers")


def read(path):
    return read_jsonl(path, REQUIRED)


# --- official SQuAD v1.1/v2.0 evaluation -----------------------------------------------------------

def normalize_answer(text: str) -> str:
    """Lower-case, strip punctuation, articles and extra whitespace (the official SQuAD script)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match_score(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1_score(prediction: str, truth: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not pred_tokens or not gold_tokens:  # SQuAD v2: both empty counts as a match
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(prediction: str, gold_answers: Sequence[str]) -> tuple[float, float]:
    """Best EM and F1 over the gold answers; no gold answers means the right answer is empty."""
    golds = list(gold_answers) or [""]
    return max(exact_match_score(prediction, g) for g in golds), max(f1_score(prediction, g) for g in golds)


# --- features ---------------------------------------------------------------------------------------

def answer_token_positions(offsets: Sequence[Optional[tuple[int, int]]], sequence_ids: Sequence[Optional[int]],
                           answer_start: Optional[int], answer_end: Optional[int], cls_index: int = 0) -> tuple[int, int]:
    """Start/end token of a character span in one window; (CLS, CLS) when the answer is not fully inside it."""
    if answer_start is None:
        return cls_index, cls_index
    context = [i for i, s in enumerate(sequence_ids) if s == 1]
    if not context:
        return cls_index, cls_index
    first, last = context[0], context[-1]
    if offsets[first][0] > answer_start or offsets[last][1] < answer_end:
        return cls_index, cls_index
    start = first
    while start <= last and offsets[start][0] <= answer_start:
        start += 1
    end = last
    while end >= first and offsets[end][1] >= answer_end:
        end -= 1
    return start - 1, end + 1


def build_features(batch: dict, tokenizer, max_length: int, doc_stride: int, with_labels: bool) -> dict:
    """Windows over long contexts; every window knows its example and (for eval) its context offsets."""
    pad_right = tokenizer.padding_side == "right"
    questions = [q.lstrip() for q in batch["question"]]
    encoded = tokenizer(questions if pad_right else batch["context"], batch["context"] if pad_right else questions,
                        truncation="only_second" if pad_right else "only_first", max_length=max_length,
                        stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True)
    sample_map = encoded.pop("overflow_to_sample_mapping")
    context_index = 1 if pad_right else 0
    starts, ends, example_ids, offset_maps = [], [], [], []
    for i, offsets in enumerate(encoded["offset_mapping"]):
        seq_ids = encoded.sequence_ids(i)
        example = sample_map[i]
        example_ids.append(batch["id"][example])
        offset_maps.append([o if seq_ids[k] == context_index else None for k, o in enumerate(offsets)])
        if with_labels:
            answers = batch["answers"][example]
            cls_index = encoded["input_ids"][i].index(tokenizer.cls_token_id) if tokenizer.cls_token_id in encoded["input_ids"][i] else 0
            if answers["answer_start"]:
                a_start = answers["answer_start"][0]
                a_end = a_start + len(answers["text"][0])
            else:
                a_start = a_end = None
            normalised_seq = [1 if s == context_index else (None if s is None else 0) for s in seq_ids]
            s, e = answer_token_positions(offsets, normalised_seq, a_start, a_end, cls_index)
            starts.append(s)
            ends.append(e)
    encoded["offset_mapping"] = offset_maps
    encoded["example_id"] = example_ids
    if with_labels:
        encoded["start_positions"] = starts
        encoded["end_positions"] = ends
    return encoded


# --- post-processing --------------------------------------------------------------------------------

def best_spans(start_logits: np.ndarray, end_logits: np.ndarray, offsets: Sequence[Optional[tuple[int, int]]],
               n_best: int = 20, max_answer_length: int = 30) -> list[tuple[float, int, int]]:
    """Top valid (score, start_token, end_token) spans of one window, best first.

    Valid: both ends inside the context (offset not None), end ≥ start, length ≤ max_answer_length.
    Two independent argmaxes are wrong exactly when the best end lies before the best start.
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    n = min(len(offsets), len(start_logits))
    valid = np.array([offsets[i] is not None for i in range(n)], dtype=bool)
    if not valid.any():
        return []
    s_idx = [i for i in np.argsort(start_logits[:n])[::-1][:n_best * 2] if valid[i]]
    e_idx = [i for i in np.argsort(end_logits[:n])[::-1][:n_best * 2] if valid[i]]
    spans = [(float(start_logits[s] + end_logits[e]), int(s), int(e))
             for s in s_idx for e in e_idx if s <= e < s + max_answer_length]
    spans.sort(key=lambda t: -t[0])
    return spans[:n_best]


def trim_span(context: str, start: int, end: int) -> tuple[int, int]:
    """The span without surrounding whitespace: byte-level BPE offsets (ModernBERT) include the space before a word."""
    while start < end and context[start].isspace():
        start += 1
    while end > start and context[end - 1].isspace():
        end -= 1
    return start, end


def postprocess(examples: Sequence[dict], feature_example_ids: Sequence[str], feature_offsets: Sequence[list],
                start_logits: np.ndarray, end_logits: np.ndarray, n_best: int = 20, max_answer_length: int = 30,
                allow_null: bool = False, null_threshold: float = 0.0, cls_indices: Optional[Sequence[int]] = None) -> dict[str, dict]:
    """Answer text per example id, searched over all of the example's windows.

    With ``allow_null`` (SQuAD v2) the answer is empty when the best null score
    (CLS start + CLS end, the minimum over windows) beats the best span by more than ``null_threshold``.
    """
    by_example = collections.defaultdict(list)
    for index, example_id in enumerate(feature_example_ids):
        by_example[example_id].append(index)
    answers = {}
    for example in examples:
        best, null_score = None, None
        for f in by_example.get(example["id"], []):
            cls = cls_indices[f] if cls_indices is not None else 0
            null = float(start_logits[f][cls] + end_logits[f][cls])
            null_score = null if null_score is None else min(null_score, null)
            for score, s, e in best_spans(start_logits[f], end_logits[f], feature_offsets[f], n_best, max_answer_length):
                if best is None or score > best[0]:
                    offsets = feature_offsets[f]
                    best = (score, offsets[s][0], offsets[e][1])
        if best is None or (allow_null and null_score is not None and null_score - best[0] > null_threshold):
            answers[example["id"]] = {"text": "", "start": None, "score": null_score or 0.0}
        else:
            start, end = trim_span(example["context"], best[1], best[2])
            answers[example["id"]] = {"text": example["context"][start:end], "start": start, "score": best[0]}
    return answers


def prepare(train: list[dict], validation: list[dict], tokenizer, config, hp: dict) -> Prepared:
    from datasets import Dataset
    from transformers import DataCollatorWithPadding

    if not getattr(tokenizer, "is_fast", False):
        raise TrainingError("question answering needs a fast tokenizer (for offset mappings)",
                            "choose a model that ships a tokenizer.json")
    for record in train:
        for text, start in zip(record["answers"]["text"], record["answers"]["answer_start"]):
            if record["context"][start:start + len(text)] != text:
                raise TrainingError(f"record {record['id']}: answer {text!r} is not at character {start} of its context",
                                    "fix answer_start in the dataset")
    use_tt = model_uses_token_type_ids(tokenizer, config)
    base_columns = ["input_ids", "attention_mask"] + (["token_type_ids"] if use_tt else [])
    labelled = base_columns + ["start_positions", "end_positions"]
    kwargs = dict(tokenizer=tokenizer, max_length=hp["max_length"], doc_stride=hp["doc_stride"])
    def to_ds(records):
        return Dataset.from_list([{k: r[k] for k in ("id", "context", "question", "answers")} for r in records])
    train_ds = to_ds(train).map(build_features, batched=True, fn_kwargs={**kwargs, "with_labels": True},
                                remove_columns=["id", "context", "question", "answers"])
    eval_full = to_ds(validation).map(build_features, batched=True, fn_kwargs={**kwargs, "with_labels": True},
                                      remove_columns=["id", "context", "question", "answers"])
    allow_null = any(not r["answers"]["text"] for r in train + validation)
    if hp.get("allow_null") is not None:  # an evaluation (jobs.predict.evaluate) knows whether the model abstains
        allow_null = bool(hp["allow_null"])
    return Prepared(
        train_dataset=keep_columns(train_ds, labelled), eval_dataset=keep_columns(eval_full, labelled),
        collator=DataCollatorWithPadding(tokenizer), validation_records=validation,
        main_metric="loss", greater_is_better=False, label_names=["start_positions", "end_positions"],
        extra={"example_ids": eval_full["example_id"], "offsets": eval_full["offset_mapping"],
               "cls_indices": [ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in ids else 0
                               for ids in eval_full["input_ids"]],
               "allow_null": allow_null, "max_answer_length": hp["max_answer_length"]},
    )


def build_model(path: str, prepared: Prepared, config):
    from transformers import AutoModelForQuestionAnswering

    return AutoModelForQuestionAnswering.from_pretrained(path)


def evaluate(prepared: Prepared, predictions) -> Evaluation:
    """EM/F1 over examples; the features must come back in dataset order (the engine predicts unshuffled)."""
    start_logits, end_logits = predictions.predictions[:2]
    extra = prepared.extra
    answers = postprocess(prepared.validation_records, extra["example_ids"], extra["offsets"], start_logits,
                          end_logits, max_answer_length=extra["max_answer_length"], allow_null=extra["allow_null"],
                          cls_indices=extra["cls_indices"])
    rows, ems, f1s = [], [], []
    for record in prepared.validation_records:
        answer = answers[record["id"]]
        em, f1 = squad_scores(answer["text"], record["answers"]["text"])
        ems.append(em)
        f1s.append(f1)
        rows.append({"id": record["id"], "question": record["question"], "context": record["context"],
                     "gold": record["answers"]["text"], "predicted": answer["text"], "correct": bool(em),
                     "f1": round(f1, 4), "score": round(float(answer["score"]), 4)})
    metrics = {"exact_match": 100.0 * float(np.mean(ems)), "f1": 100.0 * float(np.mean(f1s))}
    by_kind = {}
    if extra["allow_null"]:
        for kind, keep in (("has_answer", lambda r: bool(r["answers"]["text"])),
                           ("no_answer", lambda r: not r["answers"]["text"])):
            idx = [i for i, r in enumerate(prepared.validation_records) if keep(r)]
            if idx:
                by_kind[kind] = {"count": len(idx), "exact_match": 100.0 * float(np.mean([ems[i] for i in idx])),
                                 "f1": 100.0 * float(np.mean([f1s[i] for i in idx]))}
    return Evaluation(metrics, {"by_kind": by_kind} if by_kind else {}, rows)
