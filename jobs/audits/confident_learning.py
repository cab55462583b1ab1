"""Confident learning (Northcutt, Jiang & Chuang, JAIR 2021): which given labels are probably wrong.

Pure numpy, no model: the inputs are out-of-sample predicted probabilities (each example predicted
by a model that never saw it, from k-fold cross-validation) and the given labels.

1. Each class ``j`` gets a threshold ``t_j``: the mean probability of ``j`` over the examples
   labelled ``j`` (the model's average self-confidence on that class).
2. An example's *confident label* is the most probable class among those whose probability
   reaches their own threshold; it has none when no class does.
   Where two or more classes pass their thresholds, the most probable of them is taken — the
   reference method's choice (Northcutt et al., section 3.1; cleanlab's confident joint does the
   same): a class with a low threshold cannot outvote a more probable one just by passing it.
3. An example is a *label issue* when it has a confident label and that label is not the given one
   (an off-diagonal entry of the confident joint), unless the most probable class is the given
   label: with a threshold below 0.5 a class can pass it while the given label is still the model's
   first choice, and such an example is not an issue (as in cleanlab, whose ``_reduce_issues``
   removes them; keeping them doubled the flagged set of a measured audit).
4. Issues are ranked by label quality, lowest first: the self-confidence ``p[given]``, or the
   normalised margin ``(p[given] - max_{k != given} p[k] + 1) / 2``; both lie in [0, 1].

Written here rather than taken from cleanlab, whose licence (AGPL) this project does not take on.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

SELF_CONFIDENCE, NORMALIZED_MARGIN = "self_confidence", "normalized_margin"
QUALITY_METHODS = (SELF_CONFIDENCE, NORMALIZED_MARGIN)


@dataclasses.dataclass(frozen=True)
class LabelIssue:
    """Example ``index`` is labelled ``given`` but confidently predicted ``suggested`` (class ids)."""

    index: int
    given: int
    suggested: int
    confidence: float  # the predicted probability of the suggested label
    quality: float  # the label-quality score of the given label; lower is more suspicious


def assign_folds(n: int, k: int, seed: int, strata: Optional[Sequence[int]] = None) -> np.ndarray:
    """The fold (0..k-1) of each of ``n`` examples: a seeded shuffle dealt round-robin.

    With ``strata`` (the class of each example) every class is dealt on its own, so each fold holds
    its share of every class, down to classes rarer than ``k``; the deal of each class starts where
    the previous one stopped, so fold sizes differ by at most one.
    """
    if k < 2:
        raise ValueError("cross-validation needs at least 2 folds")
    if n < k:
        raise ValueError(f"{n} examples cannot fill {k} folds")
    rng = np.random.default_rng(seed)
    folds = np.empty(n, dtype=np.int64)
    groups = [np.arange(n)] if strata is None else [np.flatnonzero(np.asarray(strata) == value)
                                                      for value in np.unique(np.asarray(strata))]
    start = 0
    for members in groups:
        members = rng.permutation(members)
        folds[members] = (start + np.arange(len(members))) % k
        start = (start + len(members)) % k
    return folds


def class_thresholds(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per class, the mean predicted probability of that class over the examples labelled with it.

    A class no example is labelled with gets +inf: nothing is ever confidently predicted as it.
    """
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    n_classes = probs.shape[1]
    counts = np.bincount(labels, minlength=n_classes).astype(np.float64)
    sums = np.bincount(labels, weights=probs[np.arange(len(labels)), labels], minlength=n_classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        thresholds = sums / counts
    thresholds[counts == 0] = np.inf
    return thresholds


def confident_labels(probs: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Per example, the most probable class among those at or above their threshold; -1 when none is."""
    probs = np.asarray(probs, dtype=np.float64)
    above = probs >= thresholds[None, :]
    masked = np.where(above, probs, -1.0)
    best = masked.argmax(axis=1)
    best[~above.any(axis=1)] = -1
    return best


def label_quality(probs: np.ndarray, labels: np.ndarray, method: str = SELF_CONFIDENCE) -> np.ndarray:
    """Per example, how well the prediction supports the given label, in [0, 1]; low is suspicious."""
    if method not in QUALITY_METHODS:
        raise ValueError(f"unknown label-quality method {method!r}; choose one of {', '.join(QUALITY_METHODS)}")
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    rows = np.arange(len(labels))
    given = probs[rows, labels]
    if method == SELF_CONFIDENCE:
        return given
    others = probs.copy()
    others[rows, labels] = -np.inf
    return (given - others.max(axis=1) + 1.0) / 2.0


def find_label_issues(probs: np.ndarray, labels: np.ndarray, method: str = SELF_CONFIDENCE,
                      thresholds: Optional[np.ndarray] = None) -> list[LabelIssue]:
    """The label issues among the examples, most suspicious (lowest label quality) first.

    ``probs`` is (examples x classes), each row summing to about 1; ``labels`` the given class ids.
    ``thresholds`` defaults to ``class_thresholds(probs, labels)``; token tagging passes thresholds
    computed over every token while ranking one sentence at a time.
    """
    probs, labels = np.asarray(probs, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    if probs.ndim != 2 or len(probs) != len(labels):
        raise ValueError(f"probabilities {probs.shape} and {labels.shape} labels do not match")
    if len(labels) == 0:
        return []
    if labels.min() < 0 or labels.max() >= probs.shape[1]:
        raise ValueError("a given label id is outside the columns of the probabilities")
    if thresholds is None:
        thresholds = class_thresholds(probs, labels)
    confident = confident_labels(probs, thresholds)
    quality = label_quality(probs, labels, method)
    predicted = probs.argmax(axis=1)
    flagged = np.flatnonzero((confident >= 0) & (confident != labels) & (predicted != labels))
    order = flagged[np.lexsort((flagged, quality[flagged]))]  # ties: file order
    return [LabelIssue(index=int(i), given=int(labels[i]), suggested=int(confident[i]),
                       confidence=float(probs[i, confident[i]]), quality=float(quality[i])) for i in order]


def rank_all(probs: np.ndarray, labels: np.ndarray, method: str = SELF_CONFIDENCE) -> np.ndarray:
    """Every example's index, lowest label quality first (ties in file order): the ranking a
    reviewer reads when the flagged issues run out."""
    quality = label_quality(probs, labels, method)
    return np.lexsort((np.arange(len(quality)), quality))


@dataclasses.dataclass(frozen=True)
class SentenceIssue:
    """A tagged sentence with at least one suspicious tag; ``tokens`` holds the token issues
    (their ``index`` is the word's position in the sentence), most suspicious first."""

    sentence: int
    tokens: tuple[LabelIssue, ...]

    @property
    def quality(self) -> float:
        return self.tokens[0].quality

    @property
    def confidence(self) -> float:
        return max(t.confidence for t in self.tokens)


def sentence_issues(probs: np.ndarray, labels: np.ndarray, sentence_of: np.ndarray, word_of: np.ndarray,
                    method: str = SELF_CONFIDENCE) -> list[SentenceIssue]:
    """Token tagging: confident learning over every word, rolled up per sentence.

    ``probs``/``labels`` have one row per word of the whole corpus; ``sentence_of`` and ``word_of``
    say which sentence and which word of it each row is. A sentence is ranked by its most
    suspicious word (lowest label quality first).
    """
    issues = find_label_issues(probs, labels, method)
    sentence_of, word_of = np.asarray(sentence_of), np.asarray(word_of)
    grouped: dict[int, list[LabelIssue]] = {}
    for issue in issues:  # already ordered by quality, so each sentence's list is too
        grouped.setdefault(int(sentence_of[issue.index]), []).append(
            dataclasses.replace(issue, index=int(word_of[issue.index])))
    out = [SentenceIssue(sentence=s, tokens=tuple(items)) for s, items in grouped.items()]
    out.sort(key=lambda s: (s.quality, s.sentence))
    return out


def precision_recall_at(ranked: Sequence[int], truth: set[int], n: Optional[int] = None) -> tuple[float, float]:
    """Precision and recall of the first ``n`` (default: all) of ``ranked`` against the true set."""
    top = list(ranked)[: len(ranked) if n is None else n]
    hits = sum(1 for i in top if i in truth)
    precision = hits / len(top) if top else 0.0
    recall = hits / len(truth) if truth else 0.0
    return precision, recall
