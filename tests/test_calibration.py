"""jobs.evaluation.calibration: ECE, reliability bins and temperature scaling on synthetic logits — no model."""
from __future__ import annotations

import numpy as np
import pytest

from jobs.evaluation import calibration


def sample_labels(rng, probs: np.ndarray) -> np.ndarray:
    """One class per row drawn from its probabilities."""
    cumulative = probs.cumsum(axis=1)
    return (rng.random((len(probs), 1)) > cumulative).sum(axis=1)


def synthetic(temperature: float, n: int = 20_000, classes: int = 4, seed: int = 0):
    """Logits and labels drawn from softmax(logits / temperature): a model over-confident by ``temperature``."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 3.0, size=(n, classes))
    return logits, sample_labels(rng, calibration.softmax(logits / temperature))


def test_temperature_scaling_recovers_a_known_temperature():
    logits, labels = synthetic(2.5)
    assert calibration.fit_temperature(logits, labels, multi_label=False) == pytest.approx(2.5, abs=0.15)


def test_multi_label_temperature_is_recovered_on_the_sigmoid():
    rng = np.random.default_rng(1)
    logits = rng.normal(0.0, 3.0, size=(10_000, 3))
    labels = (rng.random(logits.shape) < calibration.sigmoid(logits / 0.5)).astype(int)  # under-confident
    assert calibration.fit_temperature(logits, labels, multi_label=True) == pytest.approx(0.5, abs=0.05)


def test_ece_is_near_zero_when_calibrated_and_large_when_over_confident():
    logits, labels = synthetic(1.0)
    assert calibration.expected_calibration_error(calibration.softmax(logits), labels, False) < 0.02
    logits, labels = synthetic(2.5)
    assert calibration.expected_calibration_error(calibration.softmax(logits), labels, False) > 0.1


def test_fitting_lowers_the_ece_and_keeps_every_single_label_decision():
    logits, labels = synthetic(2.5)
    before = calibration.softmax(logits)
    temperature = calibration.fit_temperature(logits, labels, False)
    after = calibration.probabilities(logits, False, temperature)
    assert calibration.expected_calibration_error(after, labels, False) < 0.02
    assert (calibration.expected_calibration_error(after, labels, False)
            < calibration.expected_calibration_error(before, labels, False) - 0.1)
    assert (after.argmax(axis=1) == before.argmax(axis=1)).all()  # accuracy cannot change


def test_reliability_bins_by_hand():
    probs = np.array([[0.95, 0.05], [0.92, 0.08], [0.55, 0.45], [0.3, 0.7]])
    labels = np.array([0, 1, 0, 1])
    bins = calibration.reliability_bins(probs, labels, multi_label=False, bins=5)
    assert [b["count"] for b in bins] == [0, 0, 1, 1, 2]
    assert bins[0]["confidence"] is None and bins[0]["accuracy"] is None
    assert bins[4]["confidence"] == pytest.approx(0.935) and bins[4]["accuracy"] == 0.5
    assert bins[3]["accuracy"] == 1.0  # 0.7 for class 1, which is right
    # ECE: (2 * |0.5 - 0.935| + |1 - 0.7| + |1 - 0.55|) / 4
    assert calibration.expected_calibration_error(probs, labels, False, bins=5) == pytest.approx(
        (2 * 0.435 + 0.3 + 0.45) / 4)


def test_multi_label_bins_judge_every_class_probability():
    probs = np.array([[0.9, 0.1], [0.9, 0.1]])
    gold = np.array([[1, 0], [0, 0]])
    bins = calibration.reliability_bins(probs, gold, multi_label=True, bins=10)
    assert bins[9]["count"] == 2 and bins[9]["accuracy"] == 0.5  # the class was present once in two
    assert bins[1]["count"] == 2 and bins[1]["accuracy"] == 0.0
    assert calibration.expected_calibration_error(probs, gold, True, bins=10) == pytest.approx((0.4 * 2 + 0.1 * 2) / 4)


def test_a_confidence_of_one_falls_in_the_last_bin():
    bins = calibration.reliability_bins(np.array([[1.0, 0.0]]), np.array([0]), False)
    assert bins[-1]["count"] == 1 and len(bins) == calibration.BINS


# ---------------------------------------------------------------- the run's final evaluation

def test_a_run_applies_the_temperature_only_where_it_lowers_the_ece():
    from jobs.tasks.classification import calibrate

    logits, labels = synthetic(2.5, n=4000)
    metrics, tables = calibrate(logits, labels, ["a", "b", "c", "d"], False, "auto")
    assert metrics["temperature"] == pytest.approx(2.5, abs=0.3)
    assert metrics["ece_calibrated"] < metrics["ece"] - 0.1
    assert tables["calibration"]["model"] == {"temperature": metrics["temperature"], "applied": True}
    assert len(tables["calibration"]["bins"]) == len(tables["calibration"]["bins_calibrated"]) == calibration.BINS
    assert calibrate(logits, labels, ["a", "b", "c", "d"], False, "off")[1]["calibration"]["model"]["applied"] is False
    # already calibrated: the fitted T is about 1 and, in "auto", kept only if it helps
    logits, labels = synthetic(1.0, n=4000)
    metrics, tables = calibrate(logits, labels, ["a", "b", "c", "d"], False, "auto")
    assert metrics["temperature"] == pytest.approx(1.0, abs=0.1)
    assert tables["calibration"]["model"]["applied"] == (metrics["ece_calibrated"] < metrics["ece"])
    assert calibrate(logits, labels, ["a", "b", "c", "d"], False, "on")[1]["calibration"]["model"]["applied"]


def test_the_evaluation_scores_are_unchanged_by_calibration():
    from types import SimpleNamespace

    from jobs.tasks.classification import evaluate

    logits, labels = synthetic(2.5, n=500)
    records = [{"text": f"t{i}", "label": "abcd"[int(y)]} for i, y in enumerate(labels)]

    def run(extra):
        prepared = SimpleNamespace(extra={"multi_label": False, **extra}, labels=list("abcd"),
                                   validation_records=records)
        return evaluate(prepared, SimpleNamespace(predictions=logits, label_ids=labels))

    plain, fitted = run({}), run({"calibrate": "on"})
    assert "ece" not in plain.metrics and "calibration" not in plain.tables  # an evaluation job fits nothing
    assert fitted.metrics["accuracy"] == plain.metrics["accuracy"]
    assert fitted.metrics["f1_macro"] == plain.metrics["f1_macro"]
    assert fitted.predictions == plain.predictions


@pytest.mark.e2e
def test_a_classification_run_reports_its_calibration_and_stores_it_with_the_model(tmp_path):
    import json

    from jobs.progress import RecordingReporter
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec
    from jobs.training.engine import run_training
    from tests.tiny_models import classification_records, tiny_bert, write_jsonl

    model = tiny_bert(tmp_path / "tiny-bert")
    data = DataSpec(train_path=write_jsonl(tmp_path / "train.jsonl", classification_records(48)).as_posix(),
                    validation_path=write_jsonl(tmp_path / "val.jsonl", classification_records(16, 1)).as_posix())
    spec = RunSpec(task="text-classification", model=str(model), data=data,
                   train=TrainSpec(epochs=2, learning_rate=1e-3, calibrate="on"))
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    saved = json.loads((tmp_path / "run" / "model" / "calibration.json").read_text())
    assert saved == {"temperature": metrics["temperature"], "applied": True}
    assert 0.0 <= metrics["ece_calibrated"] <= 1.0 and 0.0 <= metrics["ece"] <= 1.0
    on_file = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert on_file["ece"] == metrics["ece"] and on_file["temperature"] == metrics["temperature"]
    tables = json.loads((tmp_path / "run" / "tables.json").read_text())
    assert sum(b["count"] for b in tables["calibration"]["bins"]) == 16


# ---------------------------------------------------------------- applied where the model predicts

@pytest.mark.e2e
def test_prediction_jobs_the_playground_and_the_api_serve_the_scaled_scores(wb, tmp_path):
    from tests import calibration_support as cs
    from workbench.playground.predictors import TEXT, Predictor

    names = ["neg", "pos", "spam"]
    folder = cs.tiny_classifier(tmp_path / "model", names, calibration={"temperature": 2.0, "applied": True})
    expected = calibration.softmax(cs.raw_logits(folder, cs.TEXTS) / 2.0)
    assert np.abs(expected - calibration.softmax(cs.raw_logits(folder, cs.TEXTS))).max() > 0.05  # T=2 shows

    result, rows = cs.job_rows(folder, cs.TEXTS, tmp_path)
    assert result["calibrated"] is True
    assert np.asarray([[r[f"prob_{n}"] for n in names] for r in rows]) == pytest.approx(expected, abs=1e-4)
    assert [r["predicted_label"] for r in rows] == [names[i] for i in expected.argmax(1)]

    played = Predictor(folder, TEXT).predict([{"text": t} for t in cs.TEXTS])
    assert np.asarray([[p["scores"][n] for n in names] for p in played]) == pytest.approx(expected, abs=1e-4)

    body = cs.api_predict(wb, folder, cs.TEXTS)
    assert body["calibrated"] is True and "latency_ms" in body
    served = np.asarray([[p["scores"][n] for n in names] for p in body["predictions"]])
    assert served == pytest.approx(expected, abs=1e-4)


@pytest.mark.e2e
def test_a_temperature_the_run_did_not_apply_is_not_served(wb, tmp_path):
    from tests import calibration_support as cs

    folder = cs.tiny_classifier(tmp_path / "model", ["neg", "pos"], calibration={"temperature": 2.0, "applied": False})
    expected = calibration.softmax(cs.raw_logits(folder, cs.TEXTS))
    result, rows = cs.job_rows(folder, cs.TEXTS, tmp_path)
    assert result["calibrated"] is False
    assert np.asarray([[r["prob_neg"], r["prob_pos"]] for r in rows]) == pytest.approx(expected, abs=1e-4)
    assert cs.api_predict(wb, folder, cs.TEXTS[0])["calibrated"] is False


def test_a_model_folder_without_or_with_a_broken_calibration_serves_raw_scores(tmp_path, caplog):
    from jobs.evaluation.postprocess import Calibration, apply_calibration, load_calibration

    assert load_calibration(tmp_path) == Calibration()
    (tmp_path / "calibration.json").write_text('{"temperature": -1, "applied": true}')
    assert load_calibration(tmp_path) == Calibration() and "unreadable" in caplog.text
    logits = np.array([[2.0, 0.0], [0.0, 4.0]])
    probs, decided = apply_calibration(logits, ["a", "b"], False, Calibration(2.0, True))
    assert probs == pytest.approx(calibration.softmax(logits / 2)) and decided == ["a", "b"]


def test_auto_keeps_the_raw_scores_when_the_validation_split_cannot_pin_the_temperature():
    from jobs.tasks.classification import calibrate

    # every example right with a small margin: the NLL falls as T -> 0, the fit ends at the bound
    logits = np.array([[0.1, 0.0], [0.0, 0.1], [0.2, 0.0], [0.0, 0.05]] * 25)  # 100: enough to fit on
    labels = np.array([0, 1, 0, 1] * 25)
    metrics, tables = calibrate(logits, labels, ["a", "b"], False, "auto")
    assert metrics["temperature"] == pytest.approx(calibration.T_LOW, rel=0.01)
    assert metrics["ece_calibrated"] < metrics["ece"]  # it would lower the ECE here ...
    assert tables["calibration"]["model"]["applied"] is False  # ... by making every answer near-certain
    assert calibrate(logits, labels, ["a", "b"], False, "on")[1]["calibration"]["model"]["applied"] is True


def test_auto_keeps_the_raw_scores_when_every_validation_example_is_right(monkeypatch):
    """Measured on SMS (1,000 messages): 100 of 100 validation messages right, the search stopped at T = 0.12
    inside its range with ECE 0; applied, it would make the model over-confident on new messages."""
    from jobs.tasks.classification import calibrate

    monkeypatch.setattr(calibration, "fit_temperature", lambda *a, **k: 0.12)
    logits = np.array([[4.0, 0.0], [0.0, 3.0], [2.0, 0.0], [0.0, 5.0]] * 25)
    labels = np.array([0, 1, 0, 1] * 25)
    metrics, tables = calibrate(logits, labels, ["a", "b"], False, "auto")
    assert metrics["ece_calibrated"] < metrics["ece"] and tables["calibration"]["model"]["applied"] is False
    multi = calibrate(np.array([[3.0, -2.0], [-1.0, 4.0]] * 50), np.array([[1, 0], [0, 1]] * 50), ["a", "b"], True,
                      "auto")
    assert multi[1]["calibration"]["model"]["applied"] is False


def test_auto_fits_no_temperature_on_a_split_too_small_to_support_it(tmp_path):
    """Issue 39: a T fitted on 40 validation examples squeezed every served score into 0.50-0.72. Below
    MIN_CALIBRATION_EXAMPLES "auto" fits none, says so, and the model serves its raw scores."""
    import json

    from jobs.evaluation.postprocess import CALIBRATION_FILE, load_calibration
    from jobs.tasks.classification import calibrate
    from workbench.ui import format as fmt

    names = ["a", "b", "c", "d"]
    logits, labels = synthetic(2.5, n=40)  # over-confident: a fit would lower the ECE, and be applied
    metrics, tables = calibrate(logits, labels, names, False, "auto")
    assert "temperature" not in metrics and metrics["calibration_examples"] == 40
    assert metrics["ece_calibrated"] == metrics["ece"]
    saved = tables["calibration"]["model"]
    assert saved["applied"] is False and saved["temperature"] == 1.0
    assert saved["not_fitted"].startswith("not fitted: 40 validation examples, fewer than the 100")
    assert tables["calibration"]["bins_calibrated"] == []
    header = fmt.calibration_note_html(metrics)
    assert "Calibration not fitted: 40 validation examples" in header and "raw scores are served" in header
    (tmp_path / CALIBRATION_FILE).write_text(json.dumps(saved))  # what the model folder keeps: served raw
    assert (load_calibration(tmp_path).temperature, load_calibration(tmp_path).calibrated) == (1.0, False)
    # "on" is the user's explicit choice: still fitted; and 100 examples are enough for "auto"
    assert calibrate(logits, labels, names, False, "on")[1]["calibration"]["model"]["applied"] is True
    logits, labels = synthetic(2.5, n=calibration.MIN_CALIBRATION_EXAMPLES)
    metrics, tables = calibrate(logits, labels, names, False, "auto")
    assert "temperature" in metrics and "not_fitted" not in tables["calibration"]["model"]
    assert fmt.calibration_note_html(metrics) == ""
