"""Fine-tuning a sentence-transformers model through its own pooled embedding: when it applies, the linear
probe that starts the head, and a run end to end (saved, served, resumed) on a tiny sentence model."""
from __future__ import annotations

import json

import numpy as np
import pytest

from jobs.specs.hyperparameters import SENTENCE_HEAD_MAX_PER_CLASS, SENTENCE_HEAD_WHY, sentence_head
from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from tests.tiny_models import classification_records, tiny_bert, tiny_sentence_model, write_jsonl


@pytest.fixture(scope="module")
def sentence_model(tmp_path_factory):
    return tiny_sentence_model(tmp_path_factory.mktemp("models") / "tiny-st")


@pytest.mark.parametrize("per_class,kwargs,method,expected", [
    (45, {}, "finetune", True),  # TREC-6 from 300 questions
    (SENTENCE_HEAD_MAX_PER_CLASS - 1, {}, "finetune", True),
    (SENTENCE_HEAD_MAX_PER_CLASS, {}, "finetune", False),
    (150, {}, "finetune", True),  # TREC-6 from 1,000 questions: 0.915 against the [CLS] classifier's 0.913
    (727, {}, "finetune", False),  # TREC-6's 4,362 questions: not measured with the head, the [CLS] classifier
    (45, {"pairs": True}, "finetune", False),
    (45, {"multi_label": True}, "finetune", False),
    (45, {"lora": True}, "finetune", False),
    (45, {"sentence_model": False}, "finetune", False),
    (45, {}, "setfit", False),
])
def test_the_sentence_head_is_for_few_single_texts_a_class_on_a_sentence_model(per_class, kwargs, method,
                                                                                expected):
    flags = {"multi_label": False, "pairs": False, "lora": False, "sentence_model": True, **kwargs}
    assert sentence_head("text-classification", method, per_class, **flags) is expected
    assert sentence_head("token-classification", "finetune", per_class, **{**flags, "sentence_model": True}) is False


def test_the_form_says_so_and_counts_the_examples_the_preset_trains_on():
    from workbench.services.estimates import run_plan

    def plan(n_train, classes, **train_kw):
        spec = RunSpec(task="text-classification", data=DataSpec(train_path="x"),
                       train=TrainSpec(method="finetune", **train_kw))
        return run_plan(spec, 22_700_000, n_train, 0, {"classes": classes, "sentence_model": True})["hp"]

    small = plan(270, 6)
    assert small["head"] == "sentence" and SENTENCE_HEAD_WHY in small["why"]
    assert "head" not in plan(4000, 6) and SENTENCE_HEAD_WHY not in plan(4000, 6)["why"]
    assert plan(5000, 100, max_train_examples=540)["head"] == "sentence"  # 5.4 a class of the 540 it uses


def test_the_head_starts_as_a_logistic_regression_on_the_frozen_embeddings(sentence_model):
    """Before any step the classifier's probabilities are the probe's own on the same embeddings."""
    import torch
    from datasets import Dataset
    from sklearn.linear_model import LogisticRegression
    from transformers import AutoTokenizer, DataCollatorWithPadding

    from jobs.training.sentence_head import build_sentence_classifier

    records = classification_records(40, seed=3)
    labels = ["neg", "pos", "meh"]  # a third class the data never shows keeps a zero row
    tokenizer = AutoTokenizer.from_pretrained(str(sentence_model))
    encoded = tokenizer([r["text"] for r in records], truncation=True, max_length=64)
    ids = [labels.index(r["label"]) for r in records]
    dataset = Dataset.from_dict({**encoded, "labels": ids})
    model = build_sentence_classifier(str(sentence_model), labels, 64, dataset, DataCollatorWithPadding(tokenizer),
                                      balanced=False, seed=0)
    assert (model.pooling, model.normalize) == ("mean", True)
    batch = DataCollatorWithPadding(tokenizer)([dataset[i] for i in range(len(dataset))])
    model.eval()
    with torch.inference_mode():
        embeddings, _ = model.embed(batch["input_ids"], batch["attention_mask"])
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.numpy()
    probe = LogisticRegression(max_iter=1000).fit(embeddings.numpy(), ids)
    expected = probe.predict_proba(embeddings.numpy())[:, 1]
    two = logits[:, :2] - logits[:, :2].max(axis=1, keepdims=True)
    ours = np.exp(two)[:, 1] / np.exp(two).sum(axis=1)
    assert np.allclose(ours, expected, atol=1e-4)
    assert np.all(logits[:, 2] == 0.0)
    loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 labels=torch.tensor(ids)).loss
    assert float(loss.detach()) > 0


@pytest.mark.e2e
def test_a_fine_tuned_sentence_model_saves_serves_and_resumes_as_it_trained(sentence_model, tmp_path):
    """The run trains the pooled embedding, its model folder is the SetFit layout (method finetune) and a
    sentence-transformers folder, the playground's probabilities are the run's own held-out ones, and a
    cancelled run resumes from its checkpoint to the same total."""
    from sentence_transformers import SentenceTransformer

    from jobs.progress import Cancelled, RecordingReporter
    from jobs.training.engine import run_training
    from jobs.training.outputs import HELDOUT_FILE
    from jobs.training.sentence_model import load_classifier
    from workbench.playground.predictors import Predictor

    train = write_jsonl(tmp_path / "train.jsonl", classification_records(64))
    validation = write_jsonl(tmp_path / "validation.jsonl", classification_records(12, 1))
    held = classification_records(10, 2)
    spec = RunSpec(task="text-classification", model=str(sentence_model),
                   data=DataSpec(train_path=str(train), validation_path=str(validation),
                                 predict_path=str(write_jsonl(tmp_path / "held.jsonl", held))),
                   train=TrainSpec(method="finetune", epochs=2, batch_size=8, learning_rate=1e-3))
    # 64 examples in 2 classes: 32 a class, under the line
    out = tmp_path / "run"
    with pytest.raises(Cancelled):
        run_training(spec, out, RecordingReporter(cancel_after_step=5))
    second = RecordingReporter()
    metrics = run_training(spec, out, second)
    assert second.facts["resumed_from"].endswith("checkpoint-5") and metrics["steps"] == 16
    hp = json.loads((out / "metrics.json").read_text())["hyperparameters"]
    assert hp["head"] == "sentence" and "pooled sentence embedding" in hp["why"]
    assert "method" not in metrics or metrics["method"] == "finetune"

    folder = out / "model"
    head = json.loads((folder / "setfit.json").read_text())
    assert head["method"] == "finetune" and head["labels"] == ["neg", "pos"] and head["pooling"] == "mean"
    assert json.loads((folder / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}
    heldout = np.load(out / HELDOUT_FILE)
    predictor = Predictor(folder, "text-classification")
    served = np.array([[r["scores"][name] for name in heldout["labels"]]
                       for r in predictor.predict([{"text": r["text"]} for r in held])])
    stored = json.loads((folder / "calibration.json").read_text())
    if stored["applied"]:  # the run's held-out file is uncalibrated; the playground applies the temperature
        scaled = heldout["probs"] ** (1 / stored["temperature"])
        expected = scaled / scaled.sum(axis=1, keepdims=True)
    else:
        expected = heldout["probs"]
    assert np.allclose(served, expected, atol=1e-4)

    classifier = load_classifier(folder)
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    enc = tokenizer(["great film loved it"], return_tensors="pt")
    with torch.inference_mode():
        ours = classifier.embed(enc["input_ids"], enc["attention_mask"])[0].numpy()
    theirs = SentenceTransformer(str(folder)).encode(["great film loved it"])
    assert np.allclose(ours, theirs, atol=1e-5)


def test_a_model_that_is_no_sentence_transformer_keeps_the_classifier_head(tmp_path):
    from jobs.progress import RecordingReporter
    from jobs.training.engine import run_training

    spec = RunSpec(task="text-classification", model=str(tiny_bert(tmp_path / "bert")),
                   data=DataSpec(train_path=str(write_jsonl(tmp_path / "t.jsonl", classification_records(32))),
                                 validation_path=str(write_jsonl(tmp_path / "v.jsonl", classification_records(8, 1)))),
                   train=TrainSpec(method="finetune", max_steps=2, batch_size=8))
    run_training(spec, tmp_path / "run", RecordingReporter())
    assert not (tmp_path / "run" / "model" / "setfit.json").exists()
    assert "head" not in json.loads((tmp_path / "run" / "metrics.json").read_text())["hyperparameters"]


def test_a_sentence_model_pooled_another_way_keeps_the_classifier_head(sentence_model, tmp_path):
    """Max pooling is none the sentence head computes: fine-tuning reads [CLS] as it does for any model."""
    import shutil

    from jobs.training.engine import _choose_method
    from jobs.training.sentence_model import pools_as_supported

    records = classification_records(40)
    spec = RunSpec(task="text-classification", data=DataSpec(train_path="x"), train=TrainSpec(method="finetune"))
    assert _choose_method(spec, records, str(sentence_model)) == ("finetune", "chosen in the run spec", True)
    folder = tmp_path / "max-pooled"
    shutil.copytree(sentence_model, folder)
    pooling = next(folder.glob("*_Pooling")) / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True}))
    assert not pools_as_supported(folder) and pools_as_supported(sentence_model)
    assert _choose_method(spec, records, str(folder))[2] is False
