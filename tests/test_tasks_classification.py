"""Classification preprocessing and metrics on hand-written inputs."""
import numpy as np
import pytest

from jobs.tasks.classification import (class_weights, collect_labels, compute_metrics_arrays, encode_label,
                                       is_multi_label, prediction_rows)
from jobs.tasks.common import model_uses_token_type_ids
from workbench.errors import TrainingError


def test_labels_are_sorted_and_encoded():
    records = [{"text": "a", "label": "spam"}, {"text": "b", "label": "ham"}]
    names = collect_labels(records, multi_label=False)
    assert names == ["ham", "spam"]
    assert encode_label("spam", {"ham": 0, "spam": 1}, False) == 1
    with pytest.raises(TrainingError):
        encode_label("eggs", {"ham": 0, "spam": 1}, False)


def test_multi_label_detection_and_multi_hot():
    records = [{"text": "a", "label": ["x", "y"]}, {"text": "b", "label": ["y"]}]
    assert is_multi_label(records)
    assert collect_labels(records, True) == ["x", "y"]
    assert encode_label(["y"], {"x": 0, "y": 1}, True) == [0.0, 1.0]


def test_a_single_class_is_refused():
    with pytest.raises(TrainingError):
        collect_labels([{"text": "a", "label": "x"}], False)


def test_class_weights_favour_the_rare_class():
    weights = class_weights([0, 0, 0, 1], 2)
    assert weights[1] > weights[0] and abs(np.mean(weights) - 1.0) < 1e-9


def test_binary_metrics_confusion_matrix_and_auc():
    logits = np.array([[2.0, 0.0], [0.0, 2.0], [1.0, 0.0], [0.0, 1.0]])
    labels = np.array([0, 1, 1, 1])
    metrics, tables = compute_metrics_arrays(logits, labels, ["ham", "spam"], False)
    assert metrics["accuracy"] == 0.75
    assert tables["confusion_matrix"] == {"labels": ["ham", "spam"], "matrix": [[1, 0], [1, 2]]}
    assert metrics["roc_auc"] == 1.0  # the scores still rank every spam above the ham
    per = {row["label"]: row for row in tables["per_class"]}
    assert per["spam"]["precision"] == 1.0 and abs(per["spam"]["recall"] - 2 / 3) < 1e-9 and per["spam"]["support"] == 3


def test_multi_label_thresholds_at_one_half():
    logits = np.array([[3.0, -3.0], [3.0, 3.0]])
    labels = np.array([[1.0, 0.0], [1.0, 0.0]])
    metrics, _ = compute_metrics_arrays(logits, labels, ["x", "y"], True)
    assert metrics["accuracy"] == 0.5
    rows = prediction_rows([{"text": "a", "label": ["x"]}, {"text": "b", "label": ["x"]}], logits, ["x", "y"], True)
    assert rows[0]["correct"] and rows[1]["predicted"] == ["x", "y"] and not rows[1]["correct"]


class _Tok:
    def __init__(self, names):
        self.model_input_names = names


class _Config:
    def __init__(self, type_vocab_size):
        self.type_vocab_size = type_vocab_size


def test_token_type_ids_only_for_models_that_use_them():
    assert model_uses_token_type_ids(_Tok(["input_ids", "token_type_ids", "attention_mask"]), _Config(2))
    assert not model_uses_token_type_ids(_Tok(["input_ids", "token_type_ids", "attention_mask"]), _Config(1))
    assert not model_uses_token_type_ids(_Tok(["input_ids", "attention_mask"]), _Config(2))


def test_weighted_loss_weighs_the_rare_class_more():
    import torch

    from jobs.tasks.classification import weighted_loss

    logits = torch.tensor([[2.0, 0.0], [2.0, 0.0]])
    labels = torch.tensor([0, 1])
    plain = torch.nn.functional.cross_entropy(logits, labels)
    weighted = weighted_loss(logits, labels, [1.0, 3.0])
    # the misclassified rare example (label 1) dominates once weighted
    assert weighted > plain
    assert torch.isclose(weighted_loss(logits, labels, [1.0, 1.0]), plain)
