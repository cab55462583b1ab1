"""How far a classifier's scores can be trusted, and the decisions tuned on the validation split. numpy only.

    expected_calibration_error(probs, labels, multi_label) -> ECE (0 = scores match how often they are right)
    reliability_bins(probs, labels, multi_label) -> per bin: mean confidence, accuracy, count
    fit_temperature(logits, labels, multi_label) -> T > 0 that minimises the validation NLL of logits / T
    too_few_to_calibrate(count) -> why ``count`` validation examples are too few to fit T on, or None
    tune_thresholds(probs, gold) -> per class, the threshold of best F1 (0.5 for classes with few positives)
    positive_threshold(scores, gold, target) -> the positive class's threshold for best F1 or a P/R target

A single-label model is judged on its top class: the confidence is the highest probability, right when
that class is the gold one. A multi-label model is judged on every per-class probability: each is the
confidence that the class is present, right when it is. Temperature scaling (Guo et al., 2017) divides the
logits by one T: it leaves a single-label model's argmax, hence its accuracy, unchanged.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

BINS = 15
T_LOW, T_HIGH = 0.05, 20.0  # the temperatures searched: far beyond any a trained model needs
MIN_POSITIVES = 5  # a class with fewer positives in validation keeps the 0.5 threshold: too few to tune on
DEFAULT_THRESHOLD = 0.5
# Fewer validation examples than this do not support a temperature: 15 bins of a few examples each make the
# ECE that "auto" compares noise, and a T fitted on 40 examples squeezed every served score into 0.50-0.72
# while the raw scores reached 0.997. Below it "auto" fits nothing and the model serves its raw scores.
MIN_CALIBRATION_EXAMPLES = 100
# metrics a run reports that are fitted values, not scores: not drawn among the evaluation curves
FITTED_METRICS = ("temperature", "positive_threshold", "calibration_examples")


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -logits))  # 1 / (1 + e^-x) without overflow at a small temperature


def probabilities(logits: np.ndarray, multi_label: bool, temperature: float = 1.0) -> np.ndarray:
    """The class probabilities of ``logits / temperature``: a sigmoid per class or a softmax over them."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    return sigmoid(scaled) if multi_label else softmax(scaled)


def _confidences(probs: np.ndarray, labels: np.ndarray, multi_label: bool) -> tuple[np.ndarray, np.ndarray]:
    """(confidence, right) per judged prediction: the top class per example, or every (example, class)."""
    probs = np.asarray(probs, dtype=np.float64)
    labels = np.asarray(labels)
    if multi_label:
        return probs.ravel(), labels.astype(np.float64).ravel()
    return probs.max(axis=1), (probs.argmax(axis=1) == labels).astype(np.float64)


def reliability_bins(probs: np.ndarray, labels: np.ndarray, multi_label: bool, bins: int = BINS) -> list[dict]:
    """Per equal-width confidence bin over [0, 1]: its edges, mean confidence, accuracy and count.

    Empty bins are kept (count 0, confidence and accuracy None) so a diagram always has ``bins`` bars."""
    confidence, right = _confidences(probs, labels, multi_label)
    # a confidence of exactly 1.0 falls in the last bin, not past it
    index = np.minimum((confidence * bins).astype(int), bins - 1)
    out = []
    for b in range(bins):
        chosen = index == b
        count = int(chosen.sum())
        out.append({"low": b / bins, "high": (b + 1) / bins, "count": count,
                    "confidence": float(confidence[chosen].mean()) if count else None,
                    "accuracy": float(right[chosen].mean()) if count else None})
    return out


def expected_calibration_error(probs: np.ndarray, labels: np.ndarray, multi_label: bool, bins: int = BINS) -> float:
    """Σ over bins of (bin's share of predictions) x |accuracy - mean confidence| (Naeini et al., 2015)."""
    found = reliability_bins(probs, labels, multi_label, bins)
    total = sum(b["count"] for b in found)
    if not total:
        return 0.0
    return float(sum(b["count"] * abs(b["accuracy"] - b["confidence"]) for b in found if b["count"]) / total)


def negative_log_likelihood(logits: np.ndarray, labels: np.ndarray, multi_label: bool, temperature: float) -> float:
    """Mean NLL of ``labels`` under ``logits / temperature`` (cross-entropy, or per-class BCE for multi-label)."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    if multi_label:
        y = np.asarray(labels, dtype=np.float64)
        # log(1 + e^-x) for y=1 and log(1 + e^x) for y=0, without overflow
        return float(np.mean(np.logaddexp(0.0, -scaled) * y + np.logaddexp(0.0, scaled) * (1.0 - y)))
    top = scaled.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(scaled - top).sum(axis=1))
    picked = scaled[np.arange(len(scaled)), np.asarray(labels, dtype=np.int64)]
    return float(np.mean(log_z - picked))


def fit_temperature(logits: np.ndarray, labels: np.ndarray, multi_label: bool) -> float:
    """The T in [T_LOW, T_HIGH] that minimises the NLL of ``logits / T`` (a bounded search over log T).

    The NLL is smooth and has a single minimum in log T, so a bounded scalar search finds it."""
    from scipy.optimize import minimize_scalar

    logits = np.asarray(logits, dtype=np.float64)
    if not len(logits):
        return 1.0
    found = minimize_scalar(lambda log_t: negative_log_likelihood(logits, labels, multi_label, float(np.exp(log_t))),
                            bounds=(np.log(T_LOW), np.log(T_HIGH)), method="bounded", options={"xatol": 1e-5})
    return float(np.exp(found.x))


def too_few_to_calibrate(count: int, minimum: int = MIN_CALIBRATION_EXAMPLES) -> str | None:
    """Why a temperature is not fitted on ``count`` validation examples (a sentence), or None when they suffice."""
    if count >= minimum:
        return None
    return (f"not fitted: {count} validation examples, fewer than the {minimum} temperature scaling needs; "
            "the raw scores are served")


def _f1(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    denominator = 2 * tp + fp + fn
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


def _sweep(scores: np.ndarray, gold: np.ndarray) -> dict[str, np.ndarray]:
    """Precision, recall and F1 of "positive when score >= t" for every distinct score t (highest t first)."""
    order = np.argsort(-scores, kind="stable")
    ranked, hits = scores[order], gold[order].astype(np.float64)
    tp_at, fp_at = np.cumsum(hits), np.cumsum(1.0 - hits)
    # the last of each run of equal scores: a threshold takes all of them or none
    last = np.r_[ranked[1:] != ranked[:-1], True]
    tp, fp = tp_at[last], fp_at[last]
    fn = hits.sum() - tp
    precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 1.0)
    recall = np.where(tp + fn > 0, tp / np.maximum(tp + fn, 1), 0.0)
    return {"threshold": ranked[last], "precision": precision, "recall": recall, "f1": _f1(tp, fp, fn)}


def best_f1_threshold(scores: np.ndarray, gold: np.ndarray) -> float:
    """The threshold of best F1 for one class, midway between the chosen score and the next lower one.

    Midway, not at the score itself: a new example scoring a hair below the last positive kept is
    taken as it would be. Ties in F1 keep the highest threshold (the fewest positives)."""
    scores, gold = np.asarray(scores, dtype=np.float64), np.asarray(gold)
    swept = _sweep(scores, gold)
    best = int(np.argmax(swept["f1"]))
    lower = swept["threshold"][best + 1] if best + 1 < len(swept["threshold"]) else 0.0
    return float((swept["threshold"][best] + lower) / 2)


def tune_thresholds(probs: np.ndarray, gold: np.ndarray, min_positives: int = MIN_POSITIVES) -> list[float]:
    """Per class, the probability threshold of best F1 on these examples; ``DEFAULT_THRESHOLD`` for a class
    with fewer than ``min_positives`` positives (a threshold tuned on two examples is noise)."""
    probs, gold = np.asarray(probs, dtype=np.float64), np.asarray(gold).astype(int)
    out = []
    for k in range(probs.shape[1]):
        if gold[:, k].sum() < min_positives:
            out.append(DEFAULT_THRESHOLD)
        else:
            out.append(round(best_f1_threshold(probs[:, k], gold[:, k]), 6))
    return out


def precision_recall_curve(scores: np.ndarray, gold: np.ndarray, points: int = 101) -> list[dict]:
    """Points of the positive class's precision-recall curve, at most ``points`` of them (evenly picked)."""
    swept = _sweep(np.asarray(scores, dtype=np.float64), np.asarray(gold))
    keep = np.unique(np.linspace(0, len(swept["threshold"]) - 1, min(points, len(swept["threshold"]))).astype(int))
    return [{"threshold": round(float(swept["threshold"][i]), 6), "precision": round(float(swept["precision"][i]), 6),
             "recall": round(float(swept["recall"][i]), 6)} for i in keep]


def positive_threshold(scores: np.ndarray, gold: np.ndarray, target: str) -> Optional[float]:
    """The positive class's threshold on ``scores`` for ``target`` (one of ``jobs.specs.run.THRESHOLD_TARGETS``).

    ``best_f1``: the threshold of best F1. ``precision>=0.9``: the lowest threshold whose precision
    reaches 0.9 (the most recall at that precision); ``recall>=0.9``: the highest whose recall does
    (the most precision at that recall). None when no threshold reaches the target."""
    scores, gold = np.asarray(scores, dtype=np.float64), np.asarray(gold).astype(int)
    if target == "best_f1":
        return best_f1_threshold(scores, gold)
    kind, _, value = target.partition(">=")
    swept = _sweep(scores, gold)
    reached = np.nonzero(swept[kind] >= float(value))[0]
    if not len(reached):
        return None
    chosen = reached[-1] if kind == "precision" else reached[0]
    return float(swept["threshold"][chosen])


def decide_multi_label(probs: np.ndarray, thresholds: Optional[list[float]] = None) -> np.ndarray:
    """The multi-hot decisions: each class's probability at or above its threshold (0.5 when none are given)."""
    probs = np.asarray(probs, dtype=np.float64)
    cut = np.asarray(thresholds if thresholds is not None else [DEFAULT_THRESHOLD] * probs.shape[1])
    return (probs >= cut).astype(int)
