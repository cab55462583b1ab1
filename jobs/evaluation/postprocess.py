"""Pure post-processing of model outputs, shared by the playgrounds and the prediction jobs.

Everything here works on numpy arrays, offsets and strings: no model, no tokenizer, no torch. So it is
unit-tested on hand-made inputs, and a playground answer and a prediction file's row, given the same
logits, say the same thing. A classification model's calibration (``calibration.json`` in its folder:
temperature and decision thresholds) is read and applied here too, so both apply it the same way.
``workbench.playground.predictors`` re-exports these names.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

log = logging.getLogger(__name__)
MASK_PLACEHOLDER = "[MASK]"
TOP_K = 5
QA_STRIDE, QA_MAX_ANSWER_TOKENS = 128, 30
MULTI_LABEL_THRESHOLD = 0.5  # as jobs.tasks.classification scores a multi-label run
# Activations one forward pass may hold, in float32 values: a pass takes as many rows as fit, counting per
# token four intermediate-width activations plus the output (the vocabulary for a masked LM).
PASS_FLOATS = 32 * 2**20


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def class_probabilities(logits: np.ndarray, multi_label: bool) -> np.ndarray:
    """One sigmoid per class for a multi-label model, a softmax over the classes otherwise."""
    return sigmoid(logits) if multi_label else softmax(logits)


# ---------------------------------------------------------------- calibration and decision thresholds

CALIBRATION_FILE = "calibration.json"  # in a classification run's model folder (jobs.tasks.classification)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What a classification run fitted on its validation split and every prediction of its model applies.

    ``temperature`` divides the logits (1.0 when the run did not apply one); ``thresholds`` are a
    multi-label model's per-class decision thresholds (a class not named keeps 0.5); ``positive`` and
    ``positive_threshold`` a binary model's positive class and the probability it is predicted from.
    """

    temperature: float = 1.0
    calibrated: bool = False  # the scores are temperature-scaled
    thresholds: Optional[dict[str, float]] = None
    positive: Optional[str] = None
    positive_threshold: Optional[float] = None


def load_calibration(model_dir: str | Path) -> Calibration:
    """The ``calibration.json`` of a model folder; no calibration when there is none (an older run, SetFit,
    another task) or it cannot be read (logged: the model still predicts, with its raw scores)."""
    path = Path(model_dir) / CALIBRATION_FILE
    if not path.is_file():
        return Calibration()
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        temperature = float(saved.get("temperature", 1.0)) if saved.get("applied") else 1.0
        if not (math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature {temperature} is not a positive number")
        thresholds = {str(k): float(v) for k, v in (saved.get("thresholds") or {}).items()} or None
        positive = saved.get("positive_threshold") or {}
        return Calibration(temperature, bool(saved.get("applied")), thresholds,
                           str(positive["label"]) if positive else None,
                           float(positive["threshold"]) if positive else None)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("unreadable %s (%s): the model predicts with its raw scores", path, exc)
        return Calibration()


def apply_calibration(logits: np.ndarray, labels: Sequence[str], multi_label: bool,
                      calibration: Calibration) -> tuple[np.ndarray, list[Any]]:
    """The probabilities of ``logits`` with the run's temperature, and each row's decision: its class name
    (the positive class from its threshold, else the most probable), or for a multi-label model the
    names of the classes at or above their thresholds."""
    probs = class_probabilities(np.asarray(logits, dtype=np.float64) / calibration.temperature, multi_label)
    if multi_label:
        cut = np.asarray([(calibration.thresholds or {}).get(name, MULTI_LABEL_THRESHOLD) for name in labels])
        return probs, [[name for name, on in zip(labels, row) if on] for row in probs >= cut]
    decided = probs.argmax(-1)
    if calibration.positive_threshold is not None and calibration.positive in labels and len(labels) == 2:
        positive = list(labels).index(calibration.positive)
        decided = np.where(probs[:, positive] >= calibration.positive_threshold, positive, 1 - positive)
    return probs, [labels[int(i)] for i in decided]


def rows_per_pass(length: int, floats_per_token: int, budget: Optional[int] = None) -> int:
    """How many rows of ``length`` tokens one forward pass takes to hold about ``budget`` (``PASS_FLOATS``) floats."""
    return max(1, (budget or PASS_FLOATS) // max(1, length * floats_per_token))


def floats_per_token(config: Any, outputs: int) -> int:
    """Activation floats one token costs in a forward pass (see ``PASS_FLOATS``): four intermediate-width
    activations plus ``outputs`` (the classes, or the vocabulary of a masked LM)."""
    hidden = getattr(config, "hidden_size", None) or getattr(config, "dim", 768)
    intermediate = getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", None) or 4 * hidden
    return 4 * int(intermediate) + int(outputs)


# ---------------------------------------------------------------- words and entities

_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def split_words(text: str) -> list[tuple[int, int]]:
    """Character spans of words, with punctuation as words of its own (as CoNLL-style data is tokenized)."""
    return [m.span() for m in _WORD.finditer(text)]


def join_tokens(tokens: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """Pre-split tokens (a CoNLL sentence) as one text joined by spaces, and each token's character span in it."""
    spans, position = [], 0
    for token in tokens:
        spans.append((position, position + len(token)))
        position += len(token) + 1
    return " ".join(tokens), spans


def word_ids_from_offsets(offsets: Sequence[tuple[int, int]], words: Sequence[tuple[int, int]]) -> list[Optional[int]]:
    """For each sub-token, the index of the word its characters fall in; None for special tokens."""
    out: list[Optional[int]] = []
    w = 0
    for start, end in offsets:
        if start == end:
            out.append(None)
            continue
        while w < len(words) and words[w][1] <= start:
            w += 1
        out.append(w if w < len(words) and words[w][0] < end else None)
    return out


def word_labels(word_ids: Sequence[Optional[int]], token_label_ids: Sequence[int], token_scores: Sequence[float],
                n_words: int) -> list[Optional[tuple[int, float]]]:
    """(label id, score) per word, taken from its FIRST sub-token — the sub-token training labelled."""
    out: list[Optional[tuple[int, float]]] = [None] * n_words
    for position, word in enumerate(word_ids):
        if word is not None and word < n_words and out[word] is None:
            out[word] = (int(token_label_ids[position]), float(token_scores[position]))
    return out


def _split_tag(tag: str) -> tuple[str, str]:
    """('B', 'PER') for 'B-PER'; ('', 'NOUN') for a plain tag such as a POS tag."""
    if len(tag) > 2 and tag[1] in "-_" and tag[0] in "BIESLU":
        return tag[0], tag[2:]
    return "", tag


def group_entities(text: str, words: Sequence[tuple[int, int]], labels: Sequence[Optional[tuple[str, float]]]
                   ) -> list[dict[str, Any]]:
    """Merge labelled words into spans: B-X I-X I-X is one X entity; a plain tag (POS) is one span per word.

    ``O`` words and words without a prediction (truncated) are left out; a span's
    score is the mean of its words' scores.
    """
    spans: list[dict[str, Any]] = []
    current: Optional[dict[str, Any]] = None
    for (start, end), label in zip(words, labels):
        if label is None or label[0] in ("O", ""):
            current = None
            continue
        prefix, kind = _split_tag(label[0])
        continues = (current is not None and prefix in ("I", "E", "L") and current["entity"] == kind)
        if continues:
            current["end"] = end
            current["scores"].append(label[1])
        else:
            current = {"entity": kind, "start": start, "end": end, "scores": [label[1]]}
            spans.append(current)
        if prefix in ("E", "L", "S", "U", ""):
            current = None
    return [{"entity": s["entity"], "word": text[s["start"]:s["end"]], "start": s["start"], "end": s["end"],
             "score": round(float(np.mean(s.pop("scores"))), 4)} for s in spans]


# ---------------------------------------------------------------- question answering

def best_span(start_logits: np.ndarray, end_logits: np.ndarray, context_mask: np.ndarray,
              max_answer_tokens: int = QA_MAX_ANSWER_TOKENS) -> tuple[int, int, float, float]:
    """Best (start token, end token, score, null score) of one QA feature.

    Probabilities are a softmax over the context tokens plus the first ([CLS])
    token; the score of a span is p(start) * p(end), the null score is that of
    ([CLS], [CLS]). Spans run forward and are at most ``max_answer_tokens`` long.
    """
    allowed = context_mask.astype(bool).copy()
    allowed[0] = True
    masked_start = np.where(allowed, start_logits, -1e9)
    masked_end = np.where(allowed, end_logits, -1e9)
    p_start, p_end = softmax(masked_start), softmax(masked_end)
    null = float(p_start[0] * p_end[0])
    ctx = context_mask.astype(bool)
    scores = np.outer(np.where(ctx, p_start, 0.0), np.where(ctx, p_end, 0.0))
    scores = np.triu(scores) - np.triu(scores, k=max_answer_tokens)
    if scores.max() <= 0:
        return 0, 0, 0.0, null
    s, e = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return int(s), int(e), float(scores[s, e]), null


# ---------------------------------------------------------------- masked LM

def replace_nth(text: str, needle: str, n: int, replacement: str) -> str:
    """``text`` with the ``n``-th (from 0) occurrence of ``needle`` replaced."""
    parts = text.split(needle)
    return needle.join(parts[:n + 1]) + replacement + needle.join(parts[n + 1:])


def top_fills(logits: np.ndarray, special_ids: Sequence[int], k: int = TOP_K) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most likely token ids at one masked position and their probabilities, special tokens excluded."""
    probs = softmax(logits.astype(np.float64))
    probs[list(special_ids)] = 0.0  # never offer [CLS], [MASK], ... as a fill
    top = np.argsort(-probs)[:k]
    return top, probs[top]


def pseudo_perplexity(log_probs: Sequence[float]) -> float:
    """exp of the mean negative log-probability of each token given all the others (Salazar et al., 2020)."""
    values = np.asarray(log_probs, dtype=np.float64)
    return float(np.exp(-values.mean())) if len(values) else float("nan")
