"""Decision thresholds tuned on the validation split: per class for multi-label runs, for the positive
class of a binary run; and the predictions that use them (``jobs.evaluation.postprocess.apply_calibration``)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from jobs.evaluation import calibration
from jobs.evaluation.postprocess import Calibration, apply_calibration

# class 0: every positive scores above every negative, the gap between 0.25 and 0.3; class 1: 3 positives
SCORES = np.array([[0.30, 0.9], [0.35, 0.8], [0.40, 0.7], [0.45, 0.1], [0.50, 0.2], [0.60, 0.3],
                   [0.10, 0.6], [0.15, 0.4], [0.20, 0.2], [0.25, 0.1]])
GOLD = np.array([[1, 1], [1, 1], [1, 1], [1, 0], [1, 0], [1, 0], [0, 0], [0, 0], [0, 0], [0, 0]])


def test_the_threshold_of_best_f1_sits_in_the_gap_between_the_classes():
    assert calibration.best_f1_threshold(SCORES[:, 0], GOLD[:, 0]) == pytest.approx(0.275)
    # only 3 positives in class 1: it keeps 0.5, though 0.65 would separate them
    assert calibration.tune_thresholds(SCORES, GOLD) == pytest.approx([0.275, 0.5])
    assert calibration.tune_thresholds(SCORES, GOLD, min_positives=3) == pytest.approx([0.275, 0.65])
    assert calibration.decide_multi_label(SCORES, [0.275, 0.5])[:, 0].tolist() == GOLD[:, 0].tolist()


def test_the_threshold_of_best_f1_on_overlapping_scores():
    # positives 0.9 0.8 0.6 0.3, negatives 0.7 0.2: F1 at 0.6 is 6/8 (tp 3, fp 1, fn 1), at 0.3 it is 8/9
    scores, gold = np.array([0.9, 0.8, 0.7, 0.6, 0.3, 0.2]), np.array([1, 1, 0, 1, 1, 0])
    assert calibration.best_f1_threshold(scores, gold) == pytest.approx(0.25)


def test_a_multi_label_run_reports_its_metrics_at_half_and_at_the_tuned_thresholds():
    from jobs.tasks.classification import calibrate

    rng = np.random.default_rng(0)
    gold = (rng.random((400, 3)) < [0.5, 0.2, 0.01]).astype(int)
    # class 0 and 1: positives score higher, but mostly below 0.5; class 2 has ~4 positives
    logits = rng.normal(-2.0, 1.0, size=gold.shape) + 1.5 * gold
    metrics, tables = calibrate(logits, gold, ["a", "b", "c"], True, "off")
    saved = tables["calibration"]["model"]
    assert saved["applied"] is False and set(saved["thresholds"]) == {"a", "b", "c"}
    assert saved["thresholds"]["a"] < 0.5 and saved["thresholds"]["b"] < 0.5 and saved["thresholds"]["c"] == 0.5
    assert [entry["threshold"] for entry in tables["per_class"]] == [saved["thresholds"][n] for n in "abc"]
    at_half = calibration.decide_multi_label(calibration.sigmoid(logits))
    from sklearn.metrics import f1_score

    assert metrics["f1_macro_tuned"] > f1_score(gold, at_half, average="macro", zero_division=0) + 0.1


def test_a_test_set_is_decided_at_the_thresholds_stored_from_validation_never_retuned():
    from sklearn.metrics import f1_score

    from jobs.tasks.classification import apply_stored, calibrate

    rng = np.random.default_rng(1)
    gold = (rng.random((800, 3)) < [0.5, 0.2, 0.3]).astype(int)
    logits = rng.normal(-2.0, 1.0, size=gold.shape) + 1.5 * gold
    _, tables = calibrate(logits[:400], gold[:400], ["a", "b", "c"], True, "off")
    saved = tables["calibration"]["model"]
    stored = Calibration(thresholds=saved["thresholds"])
    metrics, test_tables = apply_stored(logits[400:], gold[400:], ["a", "b", "c"], True, stored)
    decided = calibration.decide_multi_label(calibration.sigmoid(logits[400:]),
                                             [saved["thresholds"][n] for n in "abc"])
    assert metrics["f1_macro_tuned"] == pytest.approx(f1_score(gold[400:], decided, average="macro"))
    assert [e["threshold"] for e in test_tables["per_class"]] == [saved["thresholds"][n] for n in "abc"]
    # and a binary model's positive threshold, hand-counted
    binary = np.array([[0.0, 2.0], [0.0, -1.0], [0.0, 0.2], [0.0, -3.0]])  # P(pos) = .88, .27, .55, .05
    metrics, _ = apply_stored(binary, np.array([1, 1, 0, 0]), ["neg", "pos"], False,
                              Calibration(positive="pos", positive_threshold=0.25))
    assert (metrics["precision_tuned"], metrics["recall_tuned"], metrics["accuracy_tuned"]) == \
        pytest.approx((2 / 3, 1.0, 0.75))


def test_multi_label_decisions_use_each_class_threshold():
    logits = np.log(np.array([[0.3, 0.6, 0.4]]) / (1 - np.array([[0.3, 0.6, 0.4]])))  # sigmoid gives these back
    probs, decided = apply_calibration(logits, ["a", "b", "c"], True, Calibration(thresholds={"a": 0.25, "b": 0.7}))
    assert probs == pytest.approx(np.array([[0.3, 0.6, 0.4]])) and decided == [["a"]]  # c keeps 0.5
    assert apply_calibration(logits, ["a", "b", "c"], True, Calibration())[1] == [["b"]]


# ---------------------------------------------------------------- the positive class of a binary run

PR_SCORES = np.array([0.95, 0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
PR_GOLD = np.array([1, 1, 1, 0, 1, 0, 1, 0, 0, 0])


def test_positive_thresholds_for_each_target():
    # precision 1 down to 0.85, 0.75 at 0.8; recall reaches 0.8 at 0.7 and 1.0 at 0.5
    assert calibration.positive_threshold(PR_SCORES, PR_GOLD, "precision>=0.9") == pytest.approx(0.85)
    assert calibration.positive_threshold(PR_SCORES, PR_GOLD, "recall>=0.9") == pytest.approx(0.5)
    # F1: 6/8 at 0.85 (tp 3, fn 2), 8/10 at 0.7, 10/12 at 0.5 (tp 5, fp 2): best at 0.5, set midway to 0.4
    assert calibration.positive_threshold(PR_SCORES, PR_GOLD, "best_f1") == pytest.approx(0.45)
    assert calibration.positive_threshold(np.array([0.9, 0.8]), np.array([0, 1]), "precision>=0.9") is None


def test_the_precision_recall_curve_runs_from_the_highest_threshold_down():
    points = calibration.precision_recall_curve(PR_SCORES, PR_GOLD)
    assert points[0] == {"threshold": 0.95, "precision": 1.0, "recall": 0.2}
    assert points[-1] == {"threshold": 0.2, "precision": 0.5, "recall": 1.0}
    assert len(calibration.precision_recall_curve(np.linspace(0, 1, 1000), np.arange(1000) % 2, points=50)) == 50


def test_a_binary_run_with_a_target_stores_its_positive_threshold():
    from jobs.tasks.classification import calibrate

    # class "rare" (id 1) is the positive class: the rarer one
    labels = np.array([1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0])
    p_rare = np.r_[PR_SCORES, [0.1, 0.05]]
    logits = np.stack([np.zeros_like(p_rare), np.log(p_rare / (1 - p_rare))], axis=1)  # softmax gives p_rare
    metrics, tables = calibrate(logits, labels, ["common", "rare"], False, "off", "recall>=0.9")
    assert tables["calibration"]["model"]["positive_threshold"] == {"label": "rare", "threshold": 0.5,
                                                                    "target": "recall>=0.9"}
    assert metrics["recall_tuned"] == 1.0 and metrics["precision_tuned"] == pytest.approx(5 / 7)
    assert tables["precision_recall"]["positive"] == "rare" and tables["precision_recall"]["points"]
    _, decided = apply_calibration(logits, ["common", "rare"], False, Calibration(positive="rare",
                                                                                  positive_threshold=0.5))
    assert decided == ["rare" if p >= 0.5 else "common" for p in p_rare]
    assert "positive_threshold" not in calibrate(logits, labels, ["common", "rare"], False, "off")[1][
        "calibration"]["model"]


# ---------------------------------------------------------------- where the model predicts

@pytest.mark.e2e
def test_prediction_jobs_the_playground_and_the_api_use_the_tuned_thresholds(wb, tmp_path):
    from tests import calibration_support as cs
    from workbench.playground.predictors import TEXT, Predictor

    names = ["a", "b", "c"]
    folder = cs.tiny_classifier(tmp_path / "model", names, multi_label=True)
    probs = calibration.sigmoid(cs.raw_logits(folder, cs.TEXTS))
    # a: on for every text, b: off for every text, c: at 0.5 (not named)
    thresholds = {"a": float(probs[:, 0].min()) - 1e-3, "b": float(probs[:, 1].max()) + 1e-3}
    assert probs[:, 0].min() < 0.5 or probs[:, 1].max() >= 0.5  # the tuned decisions differ from those at 0.5
    (folder / "calibration.json").write_text(json.dumps({"temperature": 1.0, "applied": False,
                                                         "thresholds": thresholds}))
    expected = [["a", *(["c"] if p >= 0.5 else [])] for p in probs[:, 2]]

    result, rows = cs.job_rows(folder, cs.TEXTS, tmp_path)
    assert [r["predicted_label"] for r in rows] == ["|".join(e) for e in expected]
    assert result["calibrated"] is False
    assert [p["labels"] for p in Predictor(folder, TEXT).predict([{"text": t} for t in cs.TEXTS])] == expected
    body = cs.api_predict(wb, folder, cs.TEXTS)
    assert [p["labels"] for p in body["predictions"]] == expected
    assert np.asarray([[p["scores"][n] for n in names] for p in body["predictions"]]) == pytest.approx(probs, abs=1e-4)


@pytest.mark.e2e
def test_a_multi_label_run_tunes_and_stores_its_thresholds(tmp_path):
    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training
    from tests.tiny_models import classification_records, tiny_bert, write_jsonl

    model = tiny_bert(tmp_path / "tiny-bert")
    data = DataSpec(train_path=write_jsonl(tmp_path / "train.jsonl", classification_records(32, multi_label=True)
                                           ).as_posix(),
                    validation_path=write_jsonl(tmp_path / "val.jsonl",
                                                classification_records(24, 1, multi_label=True)).as_posix())
    spec = RunSpec(task="text-classification", model=str(model), data=data,
                   train=TrainSpec(epochs=1, learning_rate=1e-3))
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    saved = json.loads((tmp_path / "run" / "model" / "calibration.json").read_text())
    assert set(saved["thresholds"]) == {"long", "neg", "pos"}  # 12, 12 and 6 positives: each tuned
    assert {"f1_macro", "f1_macro_tuned", "f1_micro_tuned", "ece", "ece_calibrated"} <= set(metrics)
    tables = json.loads((tmp_path / "run" / "tables.json").read_text())
    assert [e["threshold"] for e in tables["per_class"]] == [saved["thresholds"][e["label"]]
                                                             for e in tables["per_class"]]


def test_the_run_details_can_draw_the_reliability_diagram_and_the_precision_recall_curve():
    from jobs.tasks.classification import calibrate
    from workbench.ui import plots

    labels = np.array([1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0])
    p_rare = np.r_[PR_SCORES, [0.1, 0.05]]
    logits = np.stack([np.zeros_like(p_rare), np.log(p_rare / (1 - p_rare))], axis=1)
    _, tables = calibrate(logits, labels, ["common", "rare"], False, "on", "best_f1")
    diagram = plots.reliability_svg(tables["calibration"])
    assert diagram.startswith("<svg") and diagram.count("class='wb-curve'") == 2 and "wb-diagonal" in diagram
    assert "temperature applied" in diagram
    curve = plots.pr_curve_svg(tables["precision_recall"])
    assert curve.startswith("<svg") and "wb-mark" in curve
    assert f"threshold {plots._num(tables['precision_recall']['threshold'])}" in curve
    assert "wb-chart-empty" in plots.reliability_svg({}) and "wb-chart-empty" in plots.pr_curve_svg(None)


@pytest.mark.e2e
def test_a_binary_models_positive_threshold_decides_where_it_predicts(wb, tmp_path):
    from tests import calibration_support as cs
    from workbench.playground.predictors import TEXT, Predictor

    folder = cs.tiny_classifier(tmp_path / "model", ["ham", "spam"])
    p_spam = calibration.softmax(cs.raw_logits(folder, cs.TEXTS))[:, 1]
    threshold = float(np.median(p_spam))  # half the texts at or above it, whatever the argmax says
    (folder / "calibration.json").write_text(json.dumps({
        "temperature": 1.0, "applied": False,
        "positive_threshold": {"label": "spam", "threshold": threshold, "target": "best_f1"}}))
    expected = ["spam" if p >= threshold else "ham" for p in p_spam]
    assert expected != ["spam" if p >= 0.5 else "ham" for p in p_spam]  # the threshold changes decisions

    _, rows = cs.job_rows(folder, cs.TEXTS, tmp_path)
    assert [r["predicted_label"] for r in rows] == expected
    assert [r["score"] for r in rows] == pytest.approx([p if e == "spam" else 1 - p
                                                        for p, e in zip(p_spam, expected)], abs=1e-4)
    assert [p["label"] for p in Predictor(folder, TEXT).predict([{"text": t} for t in cs.TEXTS])] == expected
    assert [p["label"] for p in cs.api_predict(wb, folder, cs.TEXTS)["predictions"]] == expected
