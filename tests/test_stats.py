"""jobs.evaluation.stats: bootstrap intervals, the paired bootstrap, McNemar's exact test, verdicts — no model."""
from __future__ import annotations

import time

import numpy as np
import pytest

from jobs.evaluation import stats


def accuracy_columns(correct) -> np.ndarray:
    correct = np.asarray(correct, dtype=float)
    return np.stack([correct, np.ones_like(correct)], axis=1)


def naive_scores(columns: np.ndarray, statistic, resamples: int, seed: int) -> np.ndarray:
    """The bootstrap as a textbook loop: draw units with replacement, sum their rows, score the sums."""
    rng = np.random.default_rng(seed)
    scores = []
    for start in range(0, resamples, stats.CHUNK):
        drawn = rng.integers(0, len(columns), size=(min(stats.CHUNK, resamples - start), len(columns)))
        scores += [float(statistic(columns[row].sum(axis=0))) for row in drawn]
    return np.asarray(scores)


def test_scores_from_summed_counts_by_hand():
    assert stats.ratio(np.array([3.0, 4.0])) == pytest.approx(0.75)
    assert stats.ratio(np.array([0.0, 0.0])) == 0.0  # nothing scored: 0, not NaN
    # tp 6, fp 2, fn 4: P 6/8, R 6/10, F1 2*6/(12+2+4) = 2/3
    assert stats.f1(np.array([6, 2, 4])) == pytest.approx(2 / 3)
    assert stats.precision(np.array([6, 2, 4])) == pytest.approx(0.75)
    assert stats.recall(np.array([6, 2, 4])) == pytest.approx(0.6)
    # class 0: F1 2/3; class 1: tp 0 → 0; class 2: never gold, never predicted → 0 (sklearn, zero_division=0)
    assert stats.macro_f1(np.array([6, 2, 4, 0, 1, 1, 0, 0, 0])) == pytest.approx((2 / 3) / 3)


def test_class_counts_give_sklearns_macro_and_micro_f1():
    from sklearn.metrics import f1_score

    gold, predicted = np.array([0, 0, 1, 2, 2, 2, 1]), np.array([0, 1, 1, 2, 0, 2, 2])
    counts = stats.class_counts(gold, predicted, 4)  # class 3 is in no row: F1 0, as sklearn with labels=0..3
    assert counts.shape == (7, 12)
    assert stats.macro_f1(counts.sum(axis=0)) == pytest.approx(
        f1_score(gold, predicted, average="macro", labels=[0, 1, 2, 3], zero_division=0))
    multi_gold = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    multi_pred = np.array([[1, 0, 0], [0, 1, 1], [1, 0, 0], [0, 0, 1]])
    counts = stats.class_counts(multi_gold, multi_pred, 3)
    assert stats.macro_f1(counts.sum(axis=0)) == pytest.approx(f1_score(multi_gold, multi_pred, average="macro"))
    micro = counts.reshape(4, 3, 3).sum(axis=(0, 1))
    assert stats.f1(micro) == pytest.approx(f1_score(multi_gold, multi_pred, average="micro"))


def test_resample_counts_draw_every_resample_with_replacement_and_repeat_with_the_seed():
    chunks = list(stats.resample_counts(7, resamples=250, seed=3))
    counts = np.concatenate(chunks)
    assert counts.shape == (250, 7) and [len(c) for c in chunks] == [100, 100, 50]
    assert (counts.sum(axis=1) == 7).all() and (counts >= 0).all()
    assert (counts > 1).any()  # with replacement
    assert np.array_equal(counts, np.concatenate(list(stats.resample_counts(7, resamples=250, seed=3))))
    assert not np.array_equal(counts, np.concatenate(list(stats.resample_counts(7, resamples=250, seed=4))))


def test_the_vectorised_bootstrap_is_the_textbook_loop():
    columns = accuracy_columns([1, 1, 0, 1, 0, 1, 1, 1, 0, 1])
    expected = naive_scores(columns, stats.ratio, 1000, seed=0)
    assert np.allclose(stats.bootstrap_scores(columns, stats.ratio, 1000, seed=0), expected)
    result = stats.bootstrap_ci(columns, stats.ratio, seed=0)
    assert result["value"] == pytest.approx(0.7)
    assert (result["low"], result["high"]) == pytest.approx(tuple(np.quantile(expected, [0.025, 0.975])))
    assert (result["resamples"], result["level"]) == (1000, 0.95)
    # the resampled accuracies of 10 examples are tenths; 7 right gives the interval [0.4, 1.0] at seed 0
    assert (result["low"], result["high"]) == pytest.approx((0.4, 1.0))


def test_f1_resamples_whole_units_not_entities():
    # three sentences: (tp, fp, fn); a resample takes a sentence's counts together
    columns = np.array([[2, 0, 1], [0, 1, 0], [3, 1, 1]], dtype=float)
    expected = naive_scores(columns, stats.f1, 1000, seed=5)
    assert np.allclose(stats.bootstrap_scores(columns, stats.f1, 1000, seed=5), expected)
    result = stats.bootstrap_ci(columns, stats.f1, seed=5)
    assert result["value"] == pytest.approx(2 * 5 / (10 + 2 + 2))
    assert result["low"] <= result["value"] <= result["high"]


def test_a_constant_outcome_has_an_interval_of_no_width_and_two_units_span_all():
    assert stats.bootstrap_ci(accuracy_columns([1] * 20), stats.ratio) == {
        "value": 1.0, "low": 1.0, "high": 1.0, "resamples": 1000, "level": 0.95}
    # one right, one wrong: resampled accuracy is 0, ½ or 1 (¼, ½, ¼): the 95 % interval is [0, 1]
    result = stats.bootstrap_ci(accuracy_columns([1, 0]), stats.ratio)
    assert (result["value"], result["low"], result["high"]) == (0.5, 0.0, 1.0)


def test_the_paired_bootstrap_by_hand():
    same = accuracy_columns([1, 0, 1, 1, 0, 1])
    assert stats.paired_bootstrap(same, same, stats.ratio) == {
        "difference": 0.0, "low": 0.0, "high": 0.0, "p_value": 1.0, "resamples": 1000, "level": 0.95}
    # B is right on every example A is right on, and on 30 more of 200: every resampled difference is > 0
    a = np.zeros(200)
    a[:100] = 1
    b = a.copy()
    b[100:130] = 1
    result = stats.paired_bootstrap(accuracy_columns(a), accuracy_columns(b), stats.ratio)
    assert result["difference"] == pytest.approx(0.15)
    assert 0 < result["low"] <= 0.15 <= result["high"]
    assert result["p_value"] == pytest.approx(2 / 1001)  # (0 + 1) / (1000 + 1) on the side below 0, twice
    reverse = stats.paired_bootstrap(accuracy_columns(b), accuracy_columns(a), stats.ratio)
    assert (reverse["difference"], reverse["low"], reverse["high"]) == pytest.approx(
        (-0.15, -result["high"], -result["low"]))


def test_pairing_uses_the_same_resamples_for_both_runs():
    rng = np.random.default_rng(1)
    a = (rng.random(400) < 0.8).astype(float)
    b = a.copy()
    b[np.flatnonzero(a == 0)[:4]] = 1  # four more right answers, nothing else changed
    result = stats.paired_bootstrap(accuracy_columns(a), accuracy_columns(b), stats.ratio)
    # paired, the difference only moves with the 4 changed examples: never below 0, at most a few of 400
    assert 0 <= result["low"] and result["high"] <= 0.03
    one_run = stats.bootstrap_ci(accuracy_columns(a), stats.ratio)
    assert one_run["high"] - one_run["low"] > 3 * (result["high"] - result["low"])
    with pytest.raises(ValueError, match="same units"):
        stats.paired_bootstrap(accuracy_columns(a), accuracy_columns(b[:10]), stats.ratio)


def test_mcnemar_exact_on_known_tables():
    assert stats.mcnemar_exact(1, 9) == pytest.approx(0.021484375)  # 2 * (1 + 10) / 2**10
    assert stats.mcnemar_exact(9, 1) == stats.mcnemar_exact(1, 9)
    assert stats.mcnemar_exact(0, 0) == 1.0 and stats.mcnemar_exact(5, 5) == 1.0
    assert stats.mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    from scipy.stats import binomtest

    assert stats.mcnemar_exact(40, 62) == pytest.approx(binomtest(40, 102, 0.5).pvalue)
    assert stats.mcnemar_exact(5000, 5200) == pytest.approx(binomtest(5000, 10200, 0.5).pvalue)
    assert stats.discordant([1, 1, 0, 0, 1], [1, 0, 1, 1, 1]) == (1, 2)
    with pytest.raises(ValueError):
        stats.mcnemar_exact(-1, 3)


def test_verdict_sentences():
    better = {"difference": 0.012, "low": 0.003, "high": 0.021, "p_value": 0.004, "level": 0.95}
    assert stats.verdict("accuracy", "run 3", "run 4", better) == \
        "run 4 is better than run 3 by 1.20 points of accuracy (95 % CI 0.30–2.10, p = 0.004)"
    worse = {"difference": -0.012, "low": -0.021, "high": -0.003, "p_value": 0.0002, "level": 0.95}
    assert stats.verdict("accuracy", "run 3", "run 4", worse) == \
        "run 3 is better than run 4 by 1.20 points of accuracy (95 % CI 0.30–2.10, p < 0.001)"
    none = {"difference": 0.5, "low": -0.4, "high": 1.6, "p_value": 0.31, "level": 0.95}
    assert stats.verdict("f1", "run 1", "run 2", none, scale=1.0).startswith(
        "no detectable difference in f1 between run 1 and run 2: run 2 minus run 1 is +0.50 points "
        "(95 % CI -0.40 to +1.60, p = 0.310)")


def test_perplexity_is_lower_better_in_verdicts_and_rankings():
    # blocks' [summed loss, tokens]: run a at loss 2.0 per token, run b at 2.2 (higher perplexity: worse)
    a = np.tile([[20.0, 10.0]], (200, 1))
    b = np.tile([[22.0, 10.0]], (200, 1))
    assert stats.perplexity(a.sum(axis=0)) == pytest.approx(np.exp(2.0))
    result = stats.paired_bootstrap(a, b, stats.perplexity)  # b minus a > 0
    assert stats.verdict("perplexity", "run 1", "run 2", result, scale=1.0).startswith(
        "run 1 is better than run 2: its perplexity is lower by 1.64")
    best, against = stats.against_best([b, a], stats.perplexity, lower_is_better=True)
    assert best == 1 and against[1] is None
    assert stats.best_group([b, a], stats.perplexity, lower_is_better=True) == [False, True]


def test_runs_not_distinguishable_from_the_best():
    a = np.zeros(300)
    a[:270] = 1  # 0.90
    near = a.copy()
    near[0] = 0  # one example fewer: 0.8967
    far = np.zeros(300)
    far[:150] = 1  # 0.50
    marks = stats.best_group([accuracy_columns(x) for x in (near, a, far)], stats.ratio)
    assert marks == [True, True, False]


def test_ten_thousand_examples_resampled_a_thousand_times_is_quick():
    rng = np.random.default_rng(0)
    a, b = (rng.random(10_000) < 0.9).astype(float), (rng.random(10_000) < 0.91).astype(float)
    started = time.process_time()  # CPU time: the wall clock counts the other work on a shared machine
    stats.bootstrap_ci(accuracy_columns(a), stats.ratio)
    stats.paired_bootstrap(accuracy_columns(a), accuracy_columns(b), stats.ratio)
    gold = rng.integers(0, 5, 10_000)
    stats.bootstrap_ci(stats.class_counts(gold, np.where(rng.random(10_000) < 0.8, gold, 0), 5), stats.macro_f1)
    assert time.process_time() - started < 10  # about 0.7 s on one busy core
