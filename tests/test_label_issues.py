"""Confident learning on hand-made probabilities, and the fold split (jobs.audits.confident_learning)."""
from __future__ import annotations

import numpy as np
import pytest

from jobs.audits import confident_learning as li


def test_thresholds_are_the_mean_self_confidence_of_each_class():
    probs = np.array([[0.9, 0.1], [0.7, 0.3], [0.2, 0.8], [0.4, 0.6]])
    labels = np.array([0, 0, 1, 1])
    assert li.class_thresholds(probs, labels).tolist() == pytest.approx([0.8, 0.7])
    # a class nobody is labelled with is never a confident label
    three = np.array([[0.5, 0.3, 0.2], [0.1, 0.8, 0.1]])
    assert li.class_thresholds(three, np.array([0, 1]))[2] == np.inf


def test_confident_label_is_the_most_probable_class_at_or_above_its_threshold():
    thresholds = np.array([0.8, 0.3, 0.5])
    probs = np.array([[0.6, 0.35, 0.05],   # class 0 under its bar, class 1 above its own: 1
                      [0.85, 0.1, 0.05],   # 0
                      [0.4, 0.2, 0.4]])    # none reaches its bar
    assert li.confident_labels(probs, thresholds).tolist() == [1, 0, -1]


def test_issues_are_the_confidently_predicted_other_labels_ranked_by_self_confidence():
    # 0-3 labelled "a" (0), 4-7 labelled "b" (1). 2 and 6 look like the other class; 3 is unsure.
    probs = np.array([[0.95, 0.05], [0.9, 0.1], [0.1, 0.9], [0.55, 0.45],
                      [0.05, 0.95], [0.1, 0.9], [0.97, 0.03], [0.2, 0.8]])
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    # thresholds: a = (0.95+0.9+0.1+0.55)/4 = 0.625, b = (0.95+0.9+0.03+0.8)/4 = 0.67
    issues = li.find_label_issues(probs, labels)
    assert [(i.index, i.given, i.suggested) for i in issues] == [(6, 1, 0), (2, 0, 1)]
    assert issues[0].quality == pytest.approx(0.03) and issues[0].confidence == pytest.approx(0.97)
    assert issues[1].quality == pytest.approx(0.1)
    # 3 (p(a) 0.55 under a's bar 0.625, p(b) 0.45 under b's bar 0.67) has no confident label: not an issue
    assert 3 not in {i.index for i in issues}


def test_a_class_over_a_threshold_below_one_half_does_not_flag_the_models_first_choice():
    """Hand-computed: class 2's threshold is 0.3. Example 0 is labelled 0 with p = (0.45, 0.2, 0.35): class 2
    passes its bar (0.35 >= 0.3) and class 0 does not (0.45 < 0.6), so its confident label is 2; but the
    most probable class is the given one, so it is not an issue (cleanlab drops it too). Example 1 has the
    same confident label and its given class is not the first choice: an issue."""
    probs = np.array([[0.45, 0.20, 0.35],   # given 0, first choice 0, confident 2 → kept
                      [0.30, 0.30, 0.40],   # given 0, first choice 2, confident 2 → issue
                      [0.90, 0.05, 0.05],   # given 0 → fine
                      [0.05, 0.90, 0.05],   # given 1 → fine
                      [0.10, 0.60, 0.30],   # given 2, p(2) 0.30
                      [0.40, 0.30, 0.30]])  # given 2, p(2) 0.30
    labels = np.array([0, 0, 0, 1, 2, 2])
    thresholds = li.class_thresholds(probs, labels)
    assert thresholds.tolist() == pytest.approx([(0.45 + 0.30 + 0.90) / 3, 0.90, 0.30])  # 0.55, 0.9, 0.3
    assert li.confident_labels(probs, thresholds).tolist() == [2, 2, 0, 1, 2, 2]
    issues = li.find_label_issues(probs, labels)
    assert [(i.index, i.given, i.suggested) for i in issues] == [(1, 0, 2)]
    # where classes 0 and 2 both pass (row 5: 0.40 < 0.55, so only 2), the most probable passing class is taken
    two = np.array([[0.58, 0.02, 0.40]])
    assert li.confident_labels(two, thresholds).tolist() == [0]


def test_normalized_margin_ranks_by_the_gap_to_the_best_other_class():
    probs = np.array([[0.5, 0.4, 0.1], [0.2, 0.1, 0.7], [0.3, 0.6, 0.1]])
    labels = np.array([0, 0, 0])
    quality = li.label_quality(probs, labels, li.NORMALIZED_MARGIN)
    assert quality.tolist() == pytest.approx([(0.1 + 1) / 2, (-0.5 + 1) / 2, (-0.3 + 1) / 2])
    assert li.rank_all(probs, labels, li.NORMALIZED_MARGIN).tolist() == [1, 2, 0]
    assert li.label_quality(probs, labels).tolist() == pytest.approx([0.5, 0.2, 0.3])
    with pytest.raises(ValueError, match="unknown label-quality"):
        li.label_quality(probs, labels, "entropy")


def test_ties_keep_file_order_and_bad_inputs_are_refused():
    probs = np.array([[0.1, 0.9], [0.1, 0.9], [0.9, 0.1], [0.9, 0.1], [0.9, 0.1]])
    labels = np.array([0, 0, 0, 1, 1])
    assert [i.index for i in li.find_label_issues(probs, labels)] == [0, 1, 3, 4]
    assert li.find_label_issues(np.zeros((0, 2)), np.zeros(0, dtype=int)) == []
    with pytest.raises(ValueError, match="outside"):
        li.find_label_issues(probs, np.array([0, 0, 0, 1, 2]))
    with pytest.raises(ValueError, match="do not match"):
        li.find_label_issues(probs, labels[:3])


def test_sentence_issues_roll_tokens_up_ranked_by_the_worst_word():
    # words: sentence 0 = w0 w1 w2, sentence 1 = w0 w1; tags O (0) and B-PER (1)
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.95, 0.05], [0.05, 0.95], [0.9, 0.1]])
    labels = np.array([0, 0, 0, 0, 1])
    sentence_of = np.array([0, 0, 0, 1, 1])
    word_of = np.array([0, 1, 2, 0, 1])
    issues = li.sentence_issues(probs, labels, sentence_of, word_of)
    assert [s.sentence for s in issues] == [1, 0]
    # thresholds: O = (0.9 + 0.2 + 0.95 + 0.05) / 4 = 0.525, B-PER = 0.1 (its one word)
    assert [(t.index, t.given, t.suggested) for t in issues[0].tokens] == [(0, 0, 1), (1, 1, 0)]
    assert issues[0].quality == pytest.approx(0.05) and issues[0].confidence == pytest.approx(0.95)
    assert [(t.index, t.suggested) for t in issues[1].tokens] == [(1, 1)]


@pytest.mark.parametrize("n,k", [(10, 2), (23, 5), (101, 7)])
def test_every_example_lands_in_exactly_one_fold_and_folds_are_even(n, k):
    folds = li.assign_folds(n, k, seed=3)
    assert sorted(set(folds.tolist())) == list(range(k))
    sizes = np.bincount(folds, minlength=k)
    assert sizes.sum() == n and sizes.max() - sizes.min() <= 1
    assert li.assign_folds(n, k, seed=3).tolist() == folds.tolist()
    assert li.assign_folds(n, k, seed=4).tolist() != folds.tolist()


def test_stratified_folds_share_every_class_even_rare_ones():
    strata = [0] * 50 + [1] * 10 + [2] * 3
    folds = li.assign_folds(len(strata), 5, seed=0, strata=strata)
    strata = np.asarray(strata)
    for cls, count in ((0, 50), (1, 10)):
        assert np.bincount(folds[strata == cls], minlength=5).tolist() == [count // 5] * 5
    assert len(set(folds[strata == 2].tolist())) == 3  # three examples, three different folds
    assert np.bincount(folds, minlength=5).max() - np.bincount(folds, minlength=5).min() <= 1
    with pytest.raises(ValueError):
        li.assign_folds(3, 5, seed=0)
    with pytest.raises(ValueError):
        li.assign_folds(10, 1, seed=0)


def test_precision_and_recall_at_n():
    assert li.precision_recall_at([4, 1, 7, 2], {1, 2, 9}, n=2) == (0.5, pytest.approx(1 / 3))
    assert li.precision_recall_at([4, 1, 7, 2], {1, 2, 9}) == (0.5, pytest.approx(2 / 3))
    assert li.precision_recall_at([], {1}) == (0.0, 0.0)
