"""Uncertainty on scores: bootstrap confidence intervals, paired comparisons, McNemar's exact test.

Every score here is a function of per-unit counts summed over the units (a unit is what is resampled:
an example, a sentence, a question). Accuracy is ``correct / total`` of the columns ``[correct, 1]``;
entity F1 is ``2tp / (2tp + fp + fn)`` of per-sentence ``[tp, fp, fn]``; macro F1 averages that over
per-class ``[tp, fp, fn]`` triples. So one resample is a weighted sum of the unit rows — a
(resamples × units) matrix of how often each unit was drawn, times the (units × columns) matrix — and
1,000 resamples of 10,000 examples take one matrix product, never a Python loop over resamples.

Pure numpy: the outcomes are read from ``outcomes.npz`` (``jobs.evaluation.outcomes``), never by re-running a model.
"""
from __future__ import annotations

from typing import Callable, Iterator, Optional, Sequence

import numpy as np

RESAMPLES = 1000
LEVEL = 0.95
SEED = 0
CHUNK = 100  # resamples drawn at a time: (CHUNK × units) counts stay small for a large validation set

Statistic = Callable[[np.ndarray], np.ndarray]  # summed columns (..., columns) -> the score (...)


# --- scores from summed counts ---------------------------------------------------------------------

def ratio(summed: np.ndarray) -> np.ndarray:
    """Columns ``[hits, total]``: accuracy, token accuracy, the mean of a per-question score."""
    summed = np.asarray(summed, dtype=np.float64)
    return _divide(summed[..., 0], summed[..., 1])


def f1(summed: np.ndarray) -> np.ndarray:
    """Columns ``[tp, fp, fn]``: micro F1, 0 where there is nothing to score (as seqeval and sklearn give)."""
    summed = np.asarray(summed, dtype=np.float64)
    tp, fp, fn = summed[..., 0], summed[..., 1], summed[..., 2]
    return _divide(2 * tp, 2 * tp + fp + fn)


def precision(summed: np.ndarray) -> np.ndarray:
    """Columns ``[tp, fp, fn]``: tp / (tp + fp)."""
    summed = np.asarray(summed, dtype=np.float64)
    return _divide(summed[..., 0], summed[..., 0] + summed[..., 1])


def recall(summed: np.ndarray) -> np.ndarray:
    """Columns ``[tp, fp, fn]``: tp / (tp + fn)."""
    summed = np.asarray(summed, dtype=np.float64)
    return _divide(summed[..., 0], summed[..., 0] + summed[..., 2])


def macro_f1(summed: np.ndarray) -> np.ndarray:
    """Columns ``[tp_0, fp_0, fn_0, tp_1, ...]``: the mean over classes of each class's F1 (sklearn's macro)."""
    summed = np.asarray(summed, dtype=np.float64)
    per_class = summed.reshape(*summed.shape[:-1], summed.shape[-1] // 3, 3)
    return f1(per_class).mean(axis=-1)


def perplexity(summed: np.ndarray) -> np.ndarray:
    """Columns ``[summed cross-entropy, scored tokens]`` of masked-LM blocks: exp(loss per token). Lower is
    better (``LOWER_IS_BETTER``)."""
    summed = np.asarray(summed, dtype=np.float64)
    return np.exp(np.minimum(_divide(summed[..., 0], summed[..., 1]), 50.0))


STATISTICS: dict[str, Statistic] = {"ratio": ratio, "f1": f1, "precision": precision, "recall": recall,
                                    "macro_f1": macro_f1, "perplexity": perplexity}
LOWER_IS_BETTER = {"perplexity"}  # metric names whose best run is the lowest


def _divide(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    return np.divide(top, bottom, out=np.zeros(np.broadcast(top, bottom).shape), where=bottom > 0)


def class_counts(gold: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    """Per-example ``[tp, fp, fn]`` of every class, flattened to (examples, 3 × classes), for ``macro_f1``.

    ``gold``/``predicted`` are class ids (single-label) or multi-hot rows (multi-label).
    """
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    if gold.ndim == 1:
        eye = np.eye(n_classes, dtype=np.int64)
        gold, predicted = eye[gold], eye[predicted]
    gold, predicted = gold.astype(np.int64), predicted.astype(np.int64)
    counts = np.stack([gold * predicted, (1 - gold) * predicted, gold * (1 - predicted)], axis=-1)
    return counts.reshape(len(gold), -1)


# --- the bootstrap ---------------------------------------------------------------------------------

def resample_counts(units: int, resamples: int = RESAMPLES, seed: int = SEED) -> Iterator[np.ndarray]:
    """(≤ CHUNK × units) matrices: how often each unit is drawn in each resample, ``resamples`` rows in all.

    The same seed gives the same resamples, so two runs scored on the same units share them (paired).
    """
    rng = np.random.default_rng(seed)
    for start in range(0, resamples, CHUNK):
        rows = min(CHUNK, resamples - start)
        drawn = rng.integers(0, units, size=(rows, units))
        offsets = (np.arange(rows) * units)[:, None]
        yield np.bincount((drawn + offsets).ravel(), minlength=rows * units).reshape(rows, units).astype(np.float64)


def bootstrap_scores(columns: np.ndarray, statistic: Statistic, resamples: int = RESAMPLES,
                     seed: int = SEED) -> np.ndarray:
    """The score of each of ``resamples`` resamples of the rows of ``columns`` (units × columns)."""
    columns = _as_columns(columns)
    return np.concatenate([statistic(counts @ columns) for counts in resample_counts(len(columns), resamples, seed)])


def bootstrap_ci(columns: np.ndarray, statistic: Statistic, resamples: int = RESAMPLES, level: float = LEVEL,
                 seed: int = SEED) -> dict:
    """The score and its percentile bootstrap interval: ``{"value", "low", "high", "resamples", "level"}``."""
    columns = _as_columns(columns)
    scores = bootstrap_scores(columns, statistic, resamples, seed)
    low, high = np.quantile(scores, [(1 - level) / 2, (1 + level) / 2])
    return {"value": float(statistic(columns.sum(axis=0))), "low": float(low), "high": float(high),
            "resamples": resamples, "level": level}


def paired_bootstrap(columns_a: np.ndarray, columns_b: np.ndarray, statistic: Statistic,
                     resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED) -> dict:
    """Score of B minus score of A on the same units, resampled together (row i of both is the same unit).

    Returns ``{"difference", "low", "high", "p_value", "resamples", "level"}``. The two-sided p-value is
    twice the smaller share of resampled differences on either side of 0 (each share counted as
    (k + 1) / (resamples + 1), so it is never 0), capped at 1: p < 1 − level exactly when the interval
    leaves 0 out, up to that +1.
    """
    columns_a, columns_b = _as_columns(columns_a), _as_columns(columns_b)
    if len(columns_a) != len(columns_b):
        raise ValueError(f"paired scores need the same units: {len(columns_a)} and {len(columns_b)} rows")
    both = np.concatenate([columns_a, columns_b], axis=1)
    split = columns_a.shape[1]
    differences = []
    for counts in resample_counts(len(both), resamples, seed):
        summed = counts @ both
        differences.append(statistic(summed[:, split:]) - statistic(summed[:, :split]))
    diffs = np.concatenate(differences)
    low, high = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    below, above = (np.sum(diffs <= 0) + 1) / (resamples + 1), (np.sum(diffs >= 0) + 1) / (resamples + 1)
    return {"difference": float(statistic(columns_b.sum(axis=0)) - statistic(columns_a.sum(axis=0))),
            "low": float(low), "high": float(high), "p_value": float(min(1.0, 2 * min(below, above))),
            "resamples": resamples, "level": level}


def _as_columns(columns: np.ndarray) -> np.ndarray:
    columns = np.asarray(columns, dtype=np.float64)
    if columns.ndim == 1:
        columns = columns[:, None]
    if len(columns) == 0:
        raise ValueError("no units to resample")
    return columns


# --- McNemar -------------------------------------------------------------------------------------------

def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (b: only A right, c: only B right).

    Under no difference each discordant unit is a fair coin: p = 2 · P(Binomial(b + c, ½) ≤ min(b, c)),
    capped at 1. Exact integer arithmetic, so large counts lose no precision.
    """
    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise ValueError("discordant counts cannot be negative")
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    term = total = 1  # C(n, 0)
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return min(1.0, 2 * total / 2 ** n)


def discordant(correct_a: np.ndarray, correct_b: np.ndarray) -> tuple[int, int]:
    """(b, c): units only A got right, units only B got right."""
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    return int(np.sum(a & ~b)), int(np.sum(~a & b))


# --- words ---------------------------------------------------------------------------------------------

def verdict(metric: str, name_a: str, name_b: str, result: dict, scale: float = 100.0) -> str:
    """One sentence on ``paired_bootstrap``'s ``result`` (B minus A), differences in points (× ``scale``).

    "run 4 is better than run 3 by 1.2 points of accuracy (95 % CI 0.3–2.1, p = 0.01)", or "no detectable
    difference …" when the interval holds 0. For a metric in ``LOWER_IS_BETTER`` (perplexity) the lower run
    is the better one and the difference reads in the metric's own units.
    """
    level = f"{result['level'] * 100:g} %"
    diff, low, high = (result[k] * scale for k in ("difference", "low", "high"))
    p = _p_text(result["p_value"])
    unit = "" if metric in LOWER_IS_BETTER else " points"
    if low <= 0 <= high:
        return (f"no detectable difference in {metric} between {name_a} and {name_b}: {name_b} minus {name_a} "
                f"is {diff:+.2f}{unit} ({level} CI {low:+.2f} to {high:+.2f}, {p})")
    b_higher = diff > 0
    if b_higher != (metric in LOWER_IS_BETTER):
        better, worse = name_b, name_a
    else:
        better, worse = name_a, name_b
    by, lo, hi = (diff, low, high) if b_higher else (-diff, -high, -low)
    if metric in LOWER_IS_BETTER:
        return (f"{better} is better than {worse}: its {metric} is lower by {by:.2f} ({level} CI {lo:.2f}–{hi:.2f}, "
                f"{p})")
    return f"{better} is better than {worse} by {by:.2f}{unit} of {metric} ({level} CI {lo:.2f}–{hi:.2f}, {p})"


def _p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def best_group(runs_columns: Sequence[np.ndarray], statistic: Statistic, resamples: int = RESAMPLES,
               level: float = LEVEL, seed: int = SEED, lower_is_better: bool = False) -> list[bool]:
    """For k runs scored on the same units: True for the best run and for every run whose difference from
    it has a paired interval that holds 0 (not distinguishable from the best)."""
    _, results = against_best(runs_columns, statistic, resamples, level, seed, lower_is_better)
    return [result is None or result["low"] <= 0 <= result["high"] for result in results]


def against_best(runs_columns: Sequence[np.ndarray], statistic: Statistic, resamples: int = RESAMPLES,
                 level: float = LEVEL, seed: int = SEED, lower_is_better: bool = False
                 ) -> tuple[int, list[Optional[dict]]]:
    """The index of the best of k runs scored on the same units (the lowest with ``lower_is_better``), and
    each run's ``paired_bootstrap`` against it (None for the best run itself)."""
    values = [float(statistic(_as_columns(c).sum(axis=0))) for c in runs_columns]
    best = int(np.argmin(values) if lower_is_better else np.argmax(values))
    return best, [None if index == best else paired_bootstrap(runs_columns[best], columns, statistic, resamples,
                                                              level, seed)
                  for index, columns in enumerate(runs_columns)]
