"""jobs.labelling's pure core on small synthetic embeddings: coverage, the fast model, what to ask next, the curve."""
from __future__ import annotations

import numpy as np
import pytest

from jobs.labelling import coverage, curve, strategies
from jobs.labelling.curve import Estimate
from jobs.labelling.fast_model import FastModel


def blobs(sizes, dim=16, spread=0.15, seed=0):
    """Unit rows around one random centre per blob; returns (embeddings, blob id of each row)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(sizes), dim))
    ids = np.repeat(np.arange(len(sizes)), sizes)
    rows = centres[ids] / np.linalg.norm(centres[ids], axis=1, keepdims=True) + rng.normal(size=(len(ids), dim)) * spread
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32), ids


# --- coverage ---------------------------------------------------------------------------------------------------

def test_default_k_follows_the_pool_size():
    assert [coverage.default_k(n) for n in (1, 8, 200, 10_000, 1_000_000)] == [1, 2, 10, 71, 200]


def test_clusters_find_the_blobs_and_small_pools_do_not_crash():
    emb, ids = blobs([40, 30, 20])
    clusters = coverage.cluster_pool(emb, k=3)
    for blob in range(3):  # each blob lands in one cluster of its own
        assert len(set(clusters[ids == blob])) == 1
    assert len(set(clusters)) == 3
    assert coverage.cluster_pool(emb[:1]).tolist() == [0]
    assert coverage.cluster_pool(emb[:0]).shape == (0,)


def test_coverage_order_takes_each_cluster_nearest_its_centre_first_biggest_first():
    emb, ids = blobs([40, 30, 20])
    order = coverage.coverage_order(emb, ids, seed=1)
    assert sorted(order.tolist()) == list(range(len(ids)))
    assert ids[order[:3]].tolist() == [0, 1, 2]
    for blob, first in zip(range(3), order[:3]):
        members = np.flatnonzero(ids == blob)
        centre = emb[members].mean(axis=0)
        assert first == members[np.argmin(((emb[members] - centre) ** 2).sum(axis=1))]
    # round-robin: while every cluster has items left, each round of 3 holds one of each
    assert all(sorted(ids[order[i:i + 3]].tolist()) == [0, 1, 2] for i in range(0, 60, 3))


def test_zero_shot_prefers_the_nearest_description():
    emb, ids = blobs([5, 5, 5])
    descriptions = np.stack([emb[ids == blob].mean(axis=0) for blob in range(3)])
    proba = coverage.zero_shot(emb, descriptions)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert (proba.argmax(axis=1) == ids).all()


# --- the fast model ---------------------------------------------------------------------------------------------

def test_fast_model_learns_separable_classes_and_rows_sum_to_one():
    emb, ids = blobs([30, 30, 30])
    names = ["a", "b", "c"]
    model = FastModel(names).fit(emb[::2], [names[i] for i in ids[::2]])
    proba = model.predict_proba(emb[1::2])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert model.predict(emb[1::2]) == [names[i] for i in ids[1::2]]
    assert proba.max() < 1.0  # the prior's pseudo-counts keep every class possible


def test_fast_model_with_one_class_predicts_it_from_the_prior():
    emb, _ = blobs([10, 10])
    model = FastModel(["spam", "ham", "other"]).fit(emb[:4], ["spam"] * 4)
    proba = model.predict_proba(emb)
    assert model.predict(emb) == ["spam"] * 20
    np.testing.assert_allclose(proba[0], [5 / 7, 1 / 7, 1 / 7])  # (n·1 + 1) / (n + C) with n = 4, C = 3
    untrained = FastModel(["spam", "ham"]).fit(emb[:0], [])
    np.testing.assert_allclose(untrained.predict_proba(emb[:2]), 0.5)


def test_fast_model_two_of_three_classes_keeps_the_third_possible():
    emb, ids = blobs([10, 10])
    model = FastModel(["a", "b", "c"]).fit(emb, ["a" if i == 0 else "b" for i in ids])
    proba = model.predict_proba(emb)
    assert (proba[:, 2] > 0).all() and (proba[:, 2] < 0.1).all()


def test_fast_model_multi_label_predicts_sorted_lists_and_rejects_unknown_classes():
    emb, ids = blobs([15, 15, 15])
    labels = [["x"], ["x", "y"], []]
    model = FastModel(["x", "y", "z"], multi_label=True).fit(emb, [labels[i] for i in ids])
    assert model.predict(emb[[0, 20, 40]]) == [["x"], ["x", "y"], []]
    proba = model.predict_proba(emb[:1])
    assert proba.shape == (1, 3) and 0 < proba[0, 2] < 0.5  # "z" never given: the prior, below the threshold
    with pytest.raises(ValueError, match="unknown class 'w'"):
        model.fit(emb[:1], [["w"]])
    with pytest.raises(ValueError, match="unknown class"):
        FastModel(["a", "b"]).fit(emb[:1], ["nope"])


# --- what to ask next -------------------------------------------------------------------------------------------

def test_margin_asks_the_tie_first():
    proba = np.array([[0.9, 0.1], [0.55, 0.45], [0.5, 0.5], [0.99, 0.01], [0.7, 0.3]])
    order, random_pick = strategies.rank_pool(proba, np.arange(5), np.ones(5, bool), "margin", random_share=0.0)
    assert order.tolist() == [2, 1, 4, 0, 3]
    assert not random_pick.any()


def test_entropy_and_multi_label_margin():
    proba = np.array([[0.8, 0.1, 0.1], [0.4, 0.4, 0.2], [0.34, 0.33, 0.33]])
    order, _ = strategies.rank_pool(proba, np.arange(3), np.ones(3, bool), "entropy", random_share=0.0)
    assert order.tolist() == [2, 1, 0]
    multi = np.array([[0.9, 0.1], [0.6, 0.02], [0.2, 0.52]])  # the class nearest 0.5 decides
    order, _ = strategies.rank_pool(multi, np.arange(3), np.ones(3, bool), "margin", random_share=0.0,
                                    multi_label=True)
    assert order.tolist() == [2, 1, 0]


def test_diversity_takes_distinct_clusters_in_each_round():
    # cluster 0 holds the 20 most uncertain items; clusters 1-4 hold less uncertain ones
    clusters = np.repeat([0, 1, 2, 3, 4], [20, 5, 5, 5, 5])
    margin_gap = np.r_[np.linspace(0.0, 0.1, 20), np.linspace(0.2, 0.9, 20)]
    proba = np.stack([(1 + margin_gap) / 2, (1 - margin_gap) / 2], axis=1)
    order, _ = strategies.rank_pool(proba, clusters, np.ones(40, bool), "margin", random_share=0.0, batch=5)
    assert sorted(clusters[order[:5]].tolist()) == [0, 1, 2, 3, 4]
    assert order[0] == 0  # the most uncertain item still leads
    assert sorted(order.tolist()) == list(range(40))
    plain, _ = strategies.rank_pool(proba, None, np.ones(40, bool), "margin", random_share=0.0, batch=5)
    assert plain[:5].tolist() == [0, 1, 2, 3, 4]  # without clusters: five near-duplicates from cluster 0


def test_random_share_is_marked_uniform_and_labelled_items_are_left_out():
    n = 2000
    rng = np.random.default_rng(0)
    proba = rng.dirichlet([1, 1, 1], size=n)
    clusters = rng.integers(0, 30, n)
    unlabelled = np.ones(n, bool)
    unlabelled[:100] = False
    order, random_pick = strategies.rank_pool(proba, clusters, unlabelled, "margin", random_share=0.1, seed=3)
    assert sorted(order.tolist()) == list(range(100, n))
    head = random_pick[: strategies.HEAD_ROUNDS * 10].reshape(-1, 10)
    assert (head.sum(axis=1) == 1).all()  # one random pick in every round of 10
    assert not random_pick[strategies.HEAD_ROUNDS * 10:].any()
    # the random picks come from the whole pool, not from the uncertain top
    by_uncertainty = np.argsort(np.argsort(-strategies.uncertainty(proba[order])))
    assert 0.3 < by_uncertainty[random_pick].mean() / len(order) < 0.7
    shuffled, all_random = strategies.rank_pool(proba, clusters, unlabelled, "random")
    assert all_random.all() and sorted(shuffled.tolist()) == list(range(100, n))


def test_clusters_only_order_starts_with_clusters_nobody_labelled():
    clusters = np.repeat([0, 1, 2], 10)
    unlabelled = np.ones(30, bool)
    unlabelled[[0, 1, 10]] = False  # cluster 0 has two labels, cluster 1 one, cluster 2 none
    order, _ = strategies.rank_pool(None, clusters, unlabelled, "margin", random_share=0.0)
    assert clusters[order[:3]].tolist() == [2, 1, 0]
    with pytest.raises(ValueError, match="unknown strategy"):
        strategies.rank_pool(None, clusters, unlabelled, "hardest")


# --- the curve --------------------------------------------------------------------------------------------------

def noisy_two_classes(n, seed):
    """Two overlapping blobs: a model scores well above chance but far from 100 %."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 2, n)
    rows = np.where(ids[:, None] == 1, 0.25, -0.25) * np.r_[1.0, np.zeros(7)] + rng.normal(size=(n, 8)) * 0.35
    return rows, ids


@pytest.mark.parametrize("random_share", [True, False])
def test_estimate_interval_holds_the_true_score(random_share):
    names = ["neg", "pos"]
    X, ids = noisy_two_classes(3200, seed=5)
    labelled, held_out = slice(0, 200), slice(200, None)
    y = [names[i] for i in ids[labelled]]
    random_pick = np.zeros(200, bool)
    if random_share:
        random_pick[::4] = True  # 50 random-share labels
    point = curve.estimate(X[labelled], y, random_pick, names, multi_label=False)
    train = ~random_pick if random_share else np.ones(200, bool)
    model = FastModel(names).fit(X[labelled][train], [y[i] for i in np.flatnonzero(train)])
    truth = np.mean(np.array(model.predict(X[held_out])) == np.array(names)[ids[held_out]])
    assert point.low <= truth <= point.high, (point, truth)
    assert 0.6 < point.estimate < 0.95 and point.high - point.low < 0.35
    assert point.source == ("random share (n=50)" if random_share else "cross-validation (5 folds)")
    assert 0.4 < point.majority < 0.65  # two balanced classes
    assert point.metric == "accuracy" and point.labels == 200


def test_estimate_multi_label_uses_macro_f1_and_few_labels_give_none():
    emb, ids = blobs([20, 20, 20])
    labels = [["x"], ["x", "y"], ["z"]]
    y = [labels[i] for i in ids]
    point = curve.estimate(emb, y, np.zeros(60, bool), ["x", "y", "z"], multi_label=True)
    assert point.metric == "macro_f1" and point.estimate > 0.9 and point.low <= point.estimate <= point.high
    assert point.majority < point.estimate
    few = curve.estimate(emb[:3], ["a", "b", "a"], np.zeros(3, bool), ["a", "b"], multi_label=False)
    assert few.estimate is None and few.source.startswith("too few labels")


def test_wilson_interval():
    low, high = curve.wilson(45, 50)
    assert low == pytest.approx(0.7864, abs=1e-3) and high == pytest.approx(0.9565, abs=1e-3)
    assert curve.wilson(0, 30)[0] == 0.0 and curve.wilson(30, 30)[1] == 1.0


def test_agreement_counts_unchanged_predictions():
    assert curve.agreement(None, ["a", "b"]) is None
    assert curve.agreement(["a", "b", "a", "b"], ["a", "b", "b", "b"]) == 0.75
    assert curve.agreement([["x"], ["x", "y"]], [["x"], ["y"]]) == 0.5
    assert curve.agreement(np.array([0, 1, 2, 2]), np.array([0, 1, 2, 1])) == 0.75
    assert curve.agreement(np.array([[1, 0], [0, 1]]), np.array([[1, 0], [1, 1]])) == 0.5
    assert curve.agreement(["a", "b"], ["a", "b", "c"]) == 1.0  # new pool items have no previous prediction


def point(labels, agreement):
    return Estimate(labels, "accuracy", 0.9, 0.8, 0.95, 0.5, "random share (n=30)", agreement)


def test_stop_hint_fires_only_after_three_stable_refits_with_enough_labels():
    assert curve.stop_hint([]) is None
    stable = [point(40, None), point(50, 0.995), point(60, 0.992)]
    assert curve.stop_hint(stable) is None  # only two refits with an agreement
    hint = curve.stop_hint(stable + [point(70, 0.999)])
    assert hint.startswith("You could stop here") and "99.5 %, 99.2 %, 99.9 % at 50, 60, 70 labels" in hint
    assert curve.stop_hint(stable + [point(70, 0.98)]) is None  # the last refit moved 2 % of the pool
    assert curve.stop_hint([point(20, 1.0), point(30, 1.0), point(40, 1.0)]) is None  # under 50 labels
    no_better = Estimate(70, "accuracy", 0.87, 0.8, 0.93, 0.87, "cross-validation (5 folds)", 1.0)
    assert curve.stop_hint(stable + [no_better]) is None  # stable only because it always says the majority class


def test_estimate_source_follows_the_random_share():
    names = ["neg", "pos"]
    X, ids = noisy_two_classes(100, seed=2)
    y = [names[i] for i in ids]
    ten = np.zeros(100, bool)
    ten[:10] = True
    assert curve.estimate(X, y, ten, names, False).source == "random share (n=10)"
    assert curve.estimate(X, y, ten, names, False, min_random=30).source == "cross-validation (5 folds)"
    # every label a random pick (the random strategy): cross-validation on all of them is unbiased and uses them all
    assert curve.estimate(X, y, np.ones(100, bool), names, False).source == "cross-validation (5 folds)"


def test_fast_model_penalty_per_label_is_constant_within_its_bounds():
    emb, ids = blobs([10, 10])
    names = ["a", "b"]
    model = FastModel(names)
    assert [model.fit(emb[:n], [names[i] for i in ids[:n]]).regularisation() for n in (4, 20)] == [1000.0, 1000.0]
    assert FastModel(names).fit(emb[:0], []).regularisation() == 1000.0
    big = np.tile(emb, (250, 1))
    assert FastModel(names).fit(big, [names[i] for i in np.tile(ids, 250)]).regularisation() == 10.0
    assert FastModel(names, C=3.0).regularisation() == 3.0


def test_temperature_tempers_an_over_confident_model_without_changing_its_predictions():
    """32 dimensions, one of them signal, 60 labels: C = 40,000 / 60 fits the noise and is far too sure."""
    names = ["neg", "pos"]
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 2, 1060)
    X = np.where(ids[:, None] == 1, 0.25, -0.25) * np.r_[1.0, np.zeros(31)] + rng.normal(size=(1060, 32)) * 0.35
    y = [names[i] for i in ids[:60]]
    calibrated = FastModel(names).fit(X[:60], y)
    raw = FastModel(names, calibrate=False).fit(X[:60], y)
    assert calibrated.temperature > 2 and raw.temperature == 1.0
    assert calibrated.predict(X[60:]) == raw.predict(X[60:])

    def nll(model):
        return -np.mean(np.log(model.predict_proba(X[60:])[np.arange(1000), ids[60:]]))

    assert nll(calibrated) < 0.7 < 1.0 < nll(raw)
    assert FastModel(names).fit(X[:29], y[:29]).temperature == 1.0  # too few labels to fit one
    multi = FastModel(["a", "b"], multi_label=True).fit(X[:60], [["a"] if i else [] for i in ids[:60]])
    assert multi.temperature > 2
