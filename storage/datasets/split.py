"""Deterministic train/validation split: the same keys, fraction and seed always give the same split."""
from __future__ import annotations

import numpy as np

MODES = ("stratified", "grouped", "random")
# A validation split decides the checkpoint, the interval around the score, the calibration and the int8
# verdict: 10 % of 400 examples left 40 of them (an accuracy interval of about ±0.14). A set whose tenth is
# under MIN_VALIDATION examples holds out MIN_VALIDATION where that is at most MAX_VALIDATION_SHARE of it (400
# to 999 examples: 100). A smaller set keeps its tenth: a quarter of it would still be under the 100 that a
# checkpoint choice and a calibration need (jobs.specs.hyperparameters, jobs.evaluation.calibration), so it
# would decide nothing more and cost training examples. Measured (bench/results/small_data_split_rule.json,
# seed 0): holding out a quarter took TREC-6 at 32 questions from 0.654 to 0.596 and SMS at 300 from 0.986
# to 0.977.
MIN_VALIDATION = 100
MAX_VALIDATION_SHARE = 0.25


def validation_size(count: int, fraction: float, floor: int = MIN_VALIDATION) -> int:
    """How many of ``count`` examples go to validation: ``fraction`` of them, raised to ``floor`` where that
    is at most ``MAX_VALIDATION_SHARE`` of them; at least one, and one always stays in train. 0 when
    ``fraction`` is 0 (no validation asked for) or there are fewer than 2 examples."""
    if count < 2 or fraction <= 0:
        return 0
    size = int(round(count * fraction))
    if size < floor <= count * MAX_VALIDATION_SHARE:
        size = int(floor)
    return min(max(size, 1), count - 1)


def effective_fraction(count: int, fraction: float, floor: int = MIN_VALIDATION) -> float:
    """``validation_size`` as the share ``validation_mask`` takes of ``count`` examples."""
    return validation_size(count, fraction, floor) / count if count >= 2 else fraction


def _take(count: int, fraction: float, *, at_least_one: bool) -> int:
    """How many of ``count`` go to validation; one always stays in train."""
    n = int(round(count * fraction))
    if at_least_one and n == 0 and fraction > 0 and count >= 2:
        n = 1
    return min(n, count - 1) if count else 0


def validation_mask(keys: np.ndarray, fraction: float, seed: int, mode: str) -> np.ndarray:
    """Boolean mask of the examples that go to validation.

    ``stratified``: each label (``keys`` = label index) keeps its share in both parts;
    ``grouped``: examples with the same key (a QA paragraph) stay together;
    ``random``: keys are ignored.
    """
    if mode not in MODES:
        raise ValueError(f"unknown split mode {mode!r}")
    n = len(keys)
    mask = np.zeros(n, dtype=bool)
    if n < 2 or fraction <= 0:
        return mask
    rng = np.random.default_rng(seed)
    if mode == "random":
        mask[rng.permutation(n)[:_take(n, fraction, at_least_one=True)]] = True
        return mask
    order = np.argsort(keys, kind="stable")
    values, starts = np.unique(keys[order], return_index=True)
    members = np.split(order, starts[1:])
    if mode == "stratified":
        for group in members:
            take = _take(len(group), fraction, at_least_one=True)
            if take:
                mask[rng.permutation(group)[:take]] = True
        return mask
    target = int(round(n * fraction))
    chosen = 0
    for g in rng.permutation(len(members))[:-1] if len(members) > 1 else []:
        if chosen >= target:
            break
        mask[members[g]] = True
        chosen += len(members[g])
    return mask
