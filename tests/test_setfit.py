"""SetFit as a training method: the head as plain weights, the auto choice, and a run end to end on a tiny model."""
from __future__ import annotations

import json

import numpy as np
import pytest

from jobs.specs.hyperparameters import SETFIT_MAX_PER_CLASS, choose_method
from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from jobs.training.sentence_model import head_weights, is_setfit_model, pool
from tests.tiny_models import classification_records, tiny_sentence_model, write_jsonl
from workbench.errors import ConfigError


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)


def test_a_binary_head_as_two_logits_gives_the_regression_probabilities():
    coef, intercept = np.array([[0.5, -2.0, 1.0]]), np.array([0.25])
    weight, bias = head_weights(coef, intercept, 2)
    x = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]])
    p1 = 1 / (1 + np.exp(-(x @ coef[0] + intercept[0])))
    probs = _softmax(x @ weight.T + bias)
    assert np.allclose(probs[:, 1], p1) and np.allclose(probs.sum(axis=1), 1)


def test_a_multiclass_head_keeps_its_rows_and_a_wrong_shape_is_refused():
    coef, intercept = np.arange(6.0).reshape(3, 2), np.zeros(3)
    weight, bias = head_weights(coef, intercept, 3)
    assert weight.shape == (3, 2) and np.allclose(weight, coef)
    from workbench.errors import TrainingError

    with pytest.raises(TrainingError, match="3 rows for 4 classes"):
        head_weights(coef, intercept, 4)


def test_mean_pooling_ignores_padding():
    import torch

    hidden = torch.tensor([[[1.0, 1.0], [3.0, 3.0], [100.0, 100.0]]])
    mask = torch.tensor([[1, 1, 0]])
    assert pool(hidden, mask, "mean").tolist() == [[2.0, 2.0]]
    assert pool(hidden, mask, "cls").tolist() == [[1.0, 1.0]]


@pytest.mark.parametrize("n,classes,kwargs,expected", [
    (2 * SETFIT_MAX_PER_CLASS - 2, 2, {}, "setfit"),
    (2 * SETFIT_MAX_PER_CLASS, 2, {}, "finetune"),
    (90, 6, {}, "setfit"),  # TREC-6 from 100 questions: 15 a class
    (1500, 15, {}, "finetune"),
    (15 * SETFIT_MAX_PER_CLASS - 15, 15, {}, "setfit"),
    (40, 2, {"pairs": True}, "finetune"),
    (40, 2, {"multi_label": True}, "finetune"),
    (40, 2, {"lora": True}, "finetune"),
])
def test_auto_picks_setfit_below_the_examples_per_class_line(n, classes, kwargs, expected):
    method, why = choose_method("text-classification", "auto", n, classes, **kwargs)
    assert method == expected and why


def test_explicit_methods_win_and_other_tasks_fine_tune():
    assert choose_method("text-classification", "finetune", 20, 2)[0] == "finetune"
    assert choose_method("text-classification", "setfit", 5000, 2)[0] == "setfit"
    assert choose_method("token-classification", "auto", 20, 2)[0] == "finetune"


def test_the_spec_refuses_setfit_where_it_does_not_apply():
    with pytest.raises(ConfigError, match="setfit"):
        RunSpec(task="token-classification", data=DataSpec(train_path="x"), train=TrainSpec(method="setfit"))
    with pytest.raises(ConfigError, match="unknown method"):
        RunSpec(task="text-classification", data=DataSpec(train_path="x"), train=TrainSpec(method="magic"))


@pytest.mark.e2e
def test_setfit_run_end_to_end_on_a_tiny_sentence_model(tmp_path):
    """Auto picks SetFit for 24 examples; the run writes the usual outputs, its model answers like the
    library's own (same probabilities), and the playground predictor serves it with attention maps."""
    from setfit import SetFitModel

    from jobs.progress import RecordingReporter
    from jobs.training.engine import run_training
    from workbench.playground.attention import attention_maps
    from workbench.playground.predictors import Predictor

    model = tiny_sentence_model(tmp_path / "tiny")
    train = write_jsonl(tmp_path / "train.jsonl", classification_records(24))
    validation = write_jsonl(tmp_path / "validation.jsonl", classification_records(12, 1))
    spec = RunSpec(task="text-classification", model=str(model),
                   data=DataSpec(train_path=str(train), validation_path=str(validation)),
                   train=TrainSpec(max_steps=6, batch_size=8, learning_rate=1e-3))
    reporter = RecordingReporter()
    out = tmp_path / "run"
    metrics = run_training(spec, out, reporter)
    assert metrics["method"] == "setfit" and metrics["steps"] == 6
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["samples_per_second"] > 0
    assert set(metrics["baselines"]) == {"majority", "tfidf_logreg", "frozen_embeddings"}
    assert metrics["verdict"]["status"] in ("learned", "below_baseline", "level_with_baseline", "did_not_learn")
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["hyperparameters"]["method"] == "setfit" and "SetFit" in saved["hyperparameters"]["why"]
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 12
    assert json.loads((out / "tables.json").read_text())["confusion_matrix"]["labels"] == ["neg", "pos"]
    assert [s[0] for s in reporter.steps][-1] == 6 and reporter.facts["method"] == "setfit"
    assert is_setfit_model(out / "model")

    texts = ["great film loved it", "boring and dull", "a joy to watch"]
    predictor = Predictor(out / "model", "text-classification")
    ours = np.array([[r["scores"][name] for name in ("neg", "pos")] for r in predictor.predict(
        [{"text": t} for t in texts])])
    theirs = np.asarray(SetFitModel.from_pretrained(str(out / "model")).predict_proba(texts))
    # the run calibrates as a fine-tuned run does: its validation split is under the 100 examples a temperature
    # needs, so none is fitted and the playground serves the library's probabilities as they are (at T = 1)
    assert metrics["ece"] >= 0 and "temperature" not in metrics and metrics["calibration_examples"] < 100
    stored = json.loads((out / "model" / "calibration.json").read_text())
    temperature = stored["temperature"] if stored["applied"] else 1.0
    assert predictor.calibrated is stored["applied"]
    scaled = theirs ** (1 / temperature)
    assert np.allclose(ours, scaled / scaled.sum(axis=1, keepdims=True), atol=1e-4)
    maps = attention_maps(predictor, texts[0])
    assert (maps.layers, maps.heads) == (2, 2) and maps.weights.shape[-1] == len(maps.tokens)


def test_auto_fine_tunes_a_model_that_is_no_sentence_transformer(tmp_path):
    from jobs.specs.hyperparameters import is_sentence_model
    from jobs.training.catalogue import packaged_model_path

    assert is_sentence_model(str(packaged_model_path())) and not is_sentence_model(str(tmp_path))
    method, why = choose_method("text-classification", "auto", 40, 2, sentence_model=False)
    assert method == "finetune" and "sentence-transformers" in why
