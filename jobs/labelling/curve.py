"""Honest progress: the estimated score at each refit with its interval, the majority baseline, the stop hint.

The estimate comes from the random share when it holds at least ``MIN_RANDOM`` (10) labels (the model fitted on the
other labels, scored on the random picks: unbiased for the pool, a little pessimistic because it sees fewer
labels), else from k-fold cross-validation on all labels (biased: the actively chosen labels are the hard ones).
When the random picks are most of the labels (the random strategy), cross-validation on all of them is unbiased
and uses every label, so it is taken instead.
Accuracy gets a Wilson interval, macro-F1 (multi-label) a bootstrap one (``jobs.evaluation.stats``).
The stop hint is the stabilising-predictions rule of Bloodgood & Vijay-Shanker (2009). Pure numpy / scikit-learn.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np

from jobs.evaluation import stats
from jobs.labelling.fast_model import FastModel

# Random-share labels needed before they, not cross-validation, give the estimate. 10, not 30: cross-validation on
# actively chosen labels scored 12-30 points under the truth from 100 to 300 labels in bench/active_learning.py
# (the chosen items are the hard ones), while the random share's Wilson interval held the truth from 10 picks on.
MIN_RANDOM = 10
MAX_FOLDS = 5
MIN_CV_LABELS = 4
Z95 = 1.959963984540054
STOP_WINDOW = 3
STOP_AGREEMENT = 0.99
STOP_MIN_LABELS = 50


@dataclass
class Estimate:
    """One point of the learning curve."""

    labels: int
    metric: str  # "accuracy" (single-label) | "macro_f1" (multi-label)
    estimate: Optional[float]
    low: Optional[float]
    high: Optional[float]
    majority: Optional[float]
    source: str  # "random share (n=…)" | "cross-validation (k folds)" | why there is none
    agreement: Optional[float] = None  # share of the pool's predictions unchanged since the previous refit

    def to_dict(self) -> dict:
        return asdict(self)


def estimate(X_lab: np.ndarray, y_lab: list, random_pick: np.ndarray, classes: list[str], multi_label: bool,
             seed: int = 0, agreement: Optional[float] = None, folds: int = MAX_FOLDS,
             min_random: Optional[int] = None) -> Estimate:
    """The current score of the fast model fitted on these labels, with a 95 % interval and the majority
    baseline beside it. ``random_pick`` (bool, aligned with ``y_lab``) marks the labels of random-share items."""
    X_lab = np.asarray(X_lab, dtype=np.float64)
    random_pick = np.asarray(random_pick, dtype=bool)
    metric = "macro_f1" if multi_label else "accuracy"
    n = len(y_lab)
    model = FastModel(classes, multi_label, seed, calibrate=False)  # a temperature changes no prediction it scores
    gold = model.encode(list(y_lab))
    n_random = int(random_pick.sum())
    if n_random >= (MIN_RANDOM if min_random is None else min_random) and n - n_random >= n_random:
        train = ~random_pick
        model.fit(X_lab[train], [y_lab[i] for i in np.flatnonzero(train)])
        predicted = _ids(model, X_lab[random_pick])
        majority = _majority(gold[train] if train.any() else gold, int(random_pick.sum()), multi_label)
        value, low, high = _score(gold[random_pick], predicted, len(classes), multi_label, seed)
        baseline = _score(gold[random_pick], majority, len(classes), multi_label, seed, interval=False)[0]
        return Estimate(n, metric, value, low, high, baseline, f"random share (n={int(random_pick.sum())})",
                        agreement)
    if n < MIN_CV_LABELS:
        return Estimate(n, metric, None, None, None, None, f"too few labels (fewer than {MIN_CV_LABELS})", agreement)
    k = int(min(folds, n // 2, MAX_FOLDS))
    fold_of = np.random.default_rng(seed).permutation(n) % k
    predicted = np.zeros_like(gold)
    majority = np.zeros_like(gold)
    for fold in range(k):
        test = fold_of == fold
        model.fit(X_lab[~test], [y_lab[i] for i in np.flatnonzero(~test)])
        predicted[test] = _ids(model, X_lab[test])
        majority[test] = _majority(gold[~test], int(test.sum()), multi_label)
    value, low, high = _score(gold, predicted, len(classes), multi_label, seed)
    baseline = _score(gold, majority, len(classes), multi_label, seed, interval=False)[0]
    return Estimate(n, metric, value, low, high, baseline, f"cross-validation ({k} folds)", agreement)


def _ids(model: FastModel, X: np.ndarray) -> np.ndarray:
    proba = model.predict_proba(X)
    return (proba >= 0.5).astype(np.int64) if model.multi_label else np.argmax(proba, axis=1)


def _majority(gold: np.ndarray, rows: int, multi_label: bool) -> np.ndarray:
    """The most frequent class (or label set) of ``gold``, repeated ``rows`` times."""
    if multi_label:
        sets, counts = np.unique(gold, axis=0, return_counts=True)
        return np.tile(sets[np.argmax(counts)], (rows, 1))
    return np.full(rows, np.bincount(gold).argmax(), dtype=np.int64)


def _score(gold: np.ndarray, predicted: np.ndarray, n_classes: int, multi_label: bool, seed: int,
           interval: bool = True) -> tuple[float, Optional[float], Optional[float]]:
    if multi_label:
        columns = stats.class_counts(gold, predicted, n_classes)
        value = float(stats.macro_f1(columns.sum(axis=0)))
        if not interval:
            return value, None, None
        ci = stats.bootstrap_ci(columns, stats.macro_f1, seed=seed)
        return value, ci["low"], ci["high"]
    hits, total = int((gold == predicted).sum()), len(gold)
    low, high = wilson(hits, total)
    return hits / total, low, high


def wilson(hits: int, total: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (Wilson 1927): sound at 30 items and at 0 or 100 %."""
    if total == 0:
        return 0.0, 1.0
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * np.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    low = 0.0 if hits == 0 else max(0.0, centre - half)
    high = 1.0 if hits == total else min(1.0, centre + half)  # exact at the ends, not 0.9999999999999999
    return float(low), float(high)


def agreement(prev_pred: Optional[Sequence], pred: Sequence) -> Optional[float]:
    """The share of pool items whose predicted label did not change since the previous refit (over the items both
    predictions cover); None before there is a previous one. Labels are names, lists of names, ids or multi-hot
    rows."""
    if prev_pred is None or len(prev_pred) == 0 or len(pred) == 0:
        return None
    m = min(len(prev_pred), len(pred))
    if isinstance(prev_pred, np.ndarray) and isinstance(pred, np.ndarray) and prev_pred.dtype != object:
        same = prev_pred[:m] == pred[:m]
        return float(same.reshape(m, -1).all(axis=1).mean())
    return sum(_same(a, b) for a, b in zip(prev_pred[:m], pred[:m])) / m


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple, np.ndarray)) or isinstance(b, (list, tuple, np.ndarray)):
        return list(a) == list(b)
    return a == b


def stop_hint(estimates: Sequence[Estimate], window: int = STOP_WINDOW, threshold: float = STOP_AGREEMENT,
              min_labels: int = STOP_MIN_LABELS) -> Optional[str]:
    """"You could stop here" once the last ``window`` refits each kept at least ``threshold`` of the pool's
    predictions unchanged, with at least ``min_labels`` labels, and the latest estimate beats the majority-class
    baseline; else None. ``estimates`` in refit order."""
    last = list(estimates)[-window:]
    if len(last) < window or last[-1].labels < min_labels:
        return None
    if any(point.agreement is None or point.agreement < threshold for point in last):
        return None
    latest = last[-1]
    if latest.estimate is not None and latest.majority is not None and latest.estimate <= latest.majority:
        return None  # stable because it predicts the majority class everywhere: SMS spam's random run at 50 labels
    shares = ", ".join(f"{point.agreement * 100:.1f} %" for point in last)
    labels = ", ".join(str(point.labels) for point in last)
    return (f"You could stop here: the last {window} refits changed fewer than {(1 - threshold) * 100:.0f} % of the "
            f"pool's predictions (agreement {shares} at {labels} labels). More labels are unlikely to change the "
            f"model much; train the real model from these labels.")
