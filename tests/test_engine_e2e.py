"""End-to-end: really train tiny config-built models through ``run_training`` for every task.

Each run takes seconds on a CPU; one test trains the packaged MiniLM for a few steps.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from jobs.training.engine import run_training
from jobs.progress import Cancelled, RecordingReporter
from jobs.specs.run import DataSpec, LoraSpec, RunSpec, TrainSpec
from tests.tiny_models import (classification_records, documents, ner_records, qa_records, tiny_bert,
                               write_jsonl)
from workbench.errors import ModelUnavailable, TrainingError

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


def _spec(task, tmp_path, train, validation, model, lora=False, **train_kw):
    train_kw.setdefault("learning_rate", 1e-3)
    train_kw.setdefault("epochs", 2)
    return RunSpec(task=task, model=str(model),
                   data=DataSpec(train_path=write_jsonl(tmp_path / "train.jsonl", train).as_posix(),
                                 validation_path=write_jsonl(tmp_path / "validation.jsonl", validation).as_posix()),
                   train=TrainSpec(**train_kw), lora=LoraSpec(enabled=lora))


def _outputs_ok(out, n_validation):
    assert (out / "model" / "model.safetensors").is_file()
    assert (out / "model" / "tokenizer.json").is_file() or (out / "model" / "vocab.txt").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["trainable_parameters"] > 0 and metrics["peak_rss_mb"] > 0 and "hyperparameters" in metrics
    assert json.loads((out / "tables.json").read_text()) is not None
    assert (out / "train.log").read_text().strip()
    if n_validation:
        assert len((out / "predictions.jsonl").read_text().splitlines()) == n_validation
    assert any((out / "checkpoints").glob("checkpoint-*"))
    return metrics


def _reporting_ok(reporter):
    total = reporter.facts["total_steps"]
    assert reporter.facts["trainable_parameters"] > 0 and reporter.facts["device"] == "cpu"
    assert [s[0] for s in reporter.steps] == list(range(1, total + 1))
    assert any("train/loss" in p[2] for p in reporter.points)
    assert any(k.startswith("eval/") for p in reporter.points for k in p[2])


def test_text_classification_single_texts(tiny, tmp_path):
    from transformers import pipeline

    reporter = RecordingReporter()
    spec = _spec("text-classification", tmp_path, classification_records(64), classification_records(16, 1), tiny,
                 epochs=4)
    metrics = run_training(spec, tmp_path / "run", reporter)
    _outputs_ok(tmp_path / "run", 16)
    _reporting_ok(reporter)
    assert {"accuracy", "f1_macro", "roc_auc"} <= set(metrics)
    tables = json.loads((tmp_path / "run" / "tables.json").read_text())
    assert tables["confusion_matrix"]["labels"] == ["neg", "pos"]
    row = json.loads((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()[0])
    assert {"text", "gold", "predicted", "correct", "score"} <= set(row)
    classify = pipeline("text-classification", model=str(tmp_path / "run" / "model"))
    assert classify("great film loved it")[0]["label"] in ("pos", "neg")


def test_text_pairs_use_segment_ids(tiny, tmp_path):
    spec = _spec("text-classification", tmp_path, classification_records(32, pair=True),
                 classification_records(8, 1, pair=True), tiny, epochs=1)
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    assert 0.0 <= metrics["accuracy"] <= 1.0
    row = json.loads((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()[0])
    assert "text_pair" in row


def test_multi_label_classification(tiny, tmp_path):
    from transformers import AutoConfig

    spec = _spec("text-classification", tmp_path, classification_records(32, multi_label=True),
                 classification_records(8, 1, multi_label=True), tiny, epochs=1)
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    assert "f1_micro" in metrics
    config = AutoConfig.from_pretrained(tmp_path / "run" / "model")
    assert config.problem_type == "multi_label_classification" and set(config.label2id) == {"long", "neg", "pos"}


def test_class_weights(tiny, tmp_path):
    train = [r for i, r in enumerate(classification_records(48)) if r["label"] == "pos" or i % 6 == 1]  # 24:4
    spec = _spec("text-classification", tmp_path, train, classification_records(8, 1), tiny, epochs=1,
                 class_weights=True)
    reporter = RecordingReporter()
    assert "accuracy" in run_training(spec, tmp_path / "run", reporter)
    assert reporter.facts["hyperparameters"]["class_weights"] is True


def test_token_classification_learns_and_exports(tiny, tmp_path):
    from transformers import pipeline

    spec = _spec("token-classification", tmp_path, ner_records(96), ner_records(16, 1), tiny, epochs=3)
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    _outputs_ok(tmp_path / "run", 16)
    assert metrics["entity_f1"] > 0.3 and metrics["token_accuracy"] > 0.5
    tables = json.loads((tmp_path / "run" / "tables.json").read_text())
    assert {row["entity"] for row in tables["per_entity"]} <= {"PER", "LOC"}
    row = json.loads((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()[0])
    assert len(row["predicted"]) == len(row["tokens"]) and "predicted_entities" in row
    tagger = pipeline("token-classification", model=str(tmp_path / "run" / "model"))
    assert isinstance(tagger("alice flew to paris"), list)


def _pos_records(n: int, seed: int = 0) -> list[dict]:
    """The NER sentences re-tagged with POS-like tags: not BIO, so no entity metrics."""
    pos = {"alice": "NP", "bob": "NP", "carol": "NP", "flew": "VBD", "to": "IN", "new": "JJ"}
    return [{"tokens": r["tokens"], "tags": [pos.get(t, "NN") for t in r["tokens"]]} for r in ner_records(n, seed)]


def test_pos_run_has_per_tag_tables_phases_timings_and_a_sample(tiny, tmp_path):
    reporter = RecordingReporter()
    spec = _spec("token-classification", tmp_path, _pos_records(96), _pos_records(16, 1), tiny, epochs=2,
                 max_train_examples=64)
    metrics = run_training(spec, tmp_path / "run", reporter)
    _outputs_ok(tmp_path / "run", 16)
    # per-tag scores and a confusion matrix for a non-BIO tag set (it used to be {})
    tables = json.loads((tmp_path / "run" / "tables.json").read_text())
    assert {row["tag"] for row in tables["per_tag"]} >= {"NP", "VBD", "IN", "NN"} and "per_entity" not in tables
    assert set(tables["confusion_matrix"]["labels"]) >= {"NP", "VBD"}
    assert sum(map(sum, tables["confusion_matrix"]["matrix"])) == sum(len(r["tokens"]) for r in _pos_records(16, 1))
    # the seeded sample: 64 of 96 training sentences
    assert reporter.facts["train_examples"] == 64 and reporter.facts["train_examples_available"] == 96
    assert metrics["train_examples"] == 64 and metrics["validation_examples"] == 16
    # every phase, in order; evaluation counts up to all 16 validation examples
    names = [name for name, _, _ in reporter.phases]
    order = ["preparing", "training", "evaluating", "saving checkpoint", "saving model", "writing predictions"]
    assert [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n][:2] == order[:2]
    assert all(n in names for n in order)
    last_eval = max(i for i, n in enumerate(names) if n == "evaluating")
    assert names.index("saving model") > last_eval and names[-1] == "writing predictions"
    last_training = max(i for i, n in enumerate(names) if n == "training")
    final_counts = [d for n, d, t in reporter.phases[last_training:] if n == "evaluating"]
    assert final_counts[0] == 0 and final_counts == sorted(final_counts) and final_counts[-1] == 16
    assert reporter.phases[last_eval] == ("evaluating", 16, 16)
    # the parts of the run's time, for estimates of later runs
    assert metrics["evaluations"] == 2 and metrics["checkpoints"] == 2
    assert metrics["final_eval_seconds"] > 0 and metrics["setup_seconds"] > 0
    assert metrics["wall_seconds"] >= metrics["train_seconds"] + metrics["final_eval_seconds"]


def test_question_answering(tiny, tmp_path):
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    spec = _spec("question-answering", tmp_path, qa_records(64), qa_records(16, 1), tiny, epochs=3, max_length=48)
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    _outputs_ok(tmp_path / "run", 16)
    assert 0 <= metrics["exact_match"] <= metrics["f1"] <= 100
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(16)]
    # transformers 5 removed the question-answering pipeline; the folder loads with the Auto classes
    folder = str(tmp_path / "run" / "model")
    model, tokenizer = AutoModelForQuestionAnswering.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    out = model(**tokenizer("where does alice live ?", "alice lives in rome .", return_tensors="pt"))
    assert out.start_logits.shape == out.end_logits.shape


def test_training_batches_are_length_buckets_with_both_classes(tiny, tmp_path, monkeypatch):
    """The engine hands each example's class to the sampler, so long-class/short-class data still mixes."""
    import jobs.training.sampling

    seen = []
    real = jobs.training.sampling.bucketed_indices

    def recording(lengths, batch_size, strata=None, generator=None):
        order = real(lengths, batch_size, strata, generator)
        seen.append((list(lengths), list(strata or []), batch_size, order))
        return order

    monkeypatch.setattr(jobs.training.sampling, "bucketed_indices", recording)
    long_spam = [{"text": "win cash prize now call " * 4, "label": "spam"} for _ in range(8)]
    short_ham = [{"text": "see you soon", "label": "ham"} for _ in range(24)]
    spec = _spec("text-classification", tmp_path, long_spam + short_ham, short_ham[:4] + long_spam[:4], tiny,
                 epochs=1, batch_size=4)
    run_training(spec, tmp_path / "out", RecordingReporter())
    lengths, strata, batch_size, order = seen[0]
    assert batch_size == 4 and sorted(strata) == [0] * 24 + [1] * 8  # ham=0, spam=1
    for start in range(0, len(order), 4):
        assert sorted(strata[i] for i in order[start:start + 4]) == [0, 0, 0, 1]


def test_predictions_stay_in_dataset_order_despite_length_grouping(tiny, tmp_path):
    """transformers 5.x would length-group evaluate()/predict(); the engine's trainer must not."""
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

    from jobs.specs.hyperparameters import resolve_hyperparameters
    from jobs.training.catalogue import resolve_model
    from jobs.training.trainer import WorkbenchTrainer, training_arguments

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForSequenceClassification.from_pretrained(tiny, num_labels=2).eval()
    texts = [" ".join(["word"] * n) for n in (30, 2, 17, 5, 40, 1, 9, 25, 3, 12, 33, 7)]
    ds = Dataset.from_dict(dict(tokenizer(texts), labels=[0] * len(texts)))
    hp = resolve_hyperparameters(_spec("text-classification", tmp_path, [], [], tiny), resolve_model(str(tiny)), 12)
    hp["batch_size"] = 2
    args = training_arguments(str(tmp_path / "ck"), hp, "cpu", 12, "accuracy", True, ["labels"])
    assert args.train_sampling_strategy == "group_by_length"
    trainer = WorkbenchTrainer(model=model, args=args, data_collator=DataCollatorWithPadding(tokenizer),
                               eval_dataset=ds)
    logits = trainer.predict(ds).predictions
    with torch.no_grad():
        direct = np.stack([model(**tokenizer(t, return_tensors="pt")).logits[0].numpy() for t in texts])
    np.testing.assert_allclose(logits, direct, atol=1e-4)


def test_masked_lm_reports_perplexity_before_and_after(tiny, tmp_path):
    from transformers import pipeline

    spec = _spec("masked-lm", tmp_path, documents(48), documents(12, 1), tiny, epochs=2)
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    _outputs_ok(tmp_path / "run", 0)
    assert metrics["perplexity"] < metrics["perplexity_before"]
    # its interval: blocks resampled; the blocks' own perplexity (token-weighted) sits inside it
    from jobs.evaluation.outcomes import OUTCOMES_FILE, read_outcomes

    ci = metrics["metrics_ci"]["perplexity"]
    saved = read_outcomes(tmp_path / "run" / OUTCOMES_FILE)
    pooled = float(np.exp(saved["loss_sum"].sum() / saved["tokens"].sum()))
    assert ci["low"] <= pooled <= ci["high"] and ci["low"] < ci["high"]
    assert pooled == pytest.approx(metrics["perplexity"], rel=0.05)  # Trainer's mean of batch means, near it
    fill = pipeline("fill-mask", model=str(tmp_path / "run" / "model"))
    assert len(fill("the cat sat on the [MASK] .")) > 0


def test_bert_pretraining_mlm_and_nsp(tiny, tmp_path):
    spec = _spec("masked-lm", tmp_path, documents(48), documents(12, 1), tiny, epochs=1, objective="mlm+nsp")
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    assert 0.0 <= metrics["nsp_accuracy"] <= 1.0 and metrics["mlm_loss"] > 0


def test_chained_fine_tuning_from_a_masked_lm_run(tiny, tmp_path):
    mlm = _spec("masked-lm", tmp_path, documents(24), documents(6, 1), tiny, epochs=1)
    run_training(mlm, tmp_path / "mlm", RecordingReporter())
    cls = _spec("text-classification", tmp_path, classification_records(32), classification_records(8, 1), tiny,
                epochs=1)
    reporter = RecordingReporter()
    run_training(cls, tmp_path / "cls", reporter, init_model_path=str(tmp_path / "mlm" / "model"))
    assert reporter.facts["model_path"] == str((tmp_path / "mlm" / "model").resolve())


def test_lora_trains_few_parameters_and_exports_a_merged_model(tiny, tmp_path):
    from transformers import pipeline

    spec = _spec("text-classification", tmp_path, classification_records(64), classification_records(16, 1), tiny,
                 lora=True, epochs=2)
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    assert metrics["trainable_parameters"] < metrics["total_parameters"] / 5
    assert (tmp_path / "run" / "adapter" / "adapter_config.json").is_file()
    adapter = json.loads((tmp_path / "run" / "adapter" / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == {"query", "value"} and "classifier" in adapter["modules_to_save"]
    classify = pipeline("text-classification", model=str(tmp_path / "run" / "model"))
    assert classify("a joy to watch")[0]["label"] in ("pos", "neg")


def test_packaged_minilm_trains_a_few_steps(tmp_path):
    spec = RunSpec(task="text-classification", data=DataSpec(
        train_path=str(write_jsonl(tmp_path / "t.jsonl", classification_records(48))),
        validation_path=str(write_jsonl(tmp_path / "v.jsonl", classification_records(8, 1)))),
        train=TrainSpec(max_steps=3, batch_size=8))
    reporter = RecordingReporter()
    metrics = run_training(spec, tmp_path / "run", reporter)
    assert metrics["steps"] == 3 and metrics["total_parameters"] > 22_000_000
    assert reporter.facts["model"] == "all-MiniLM-L6-v2"


def test_cancel_saves_a_checkpoint_and_a_second_call_resumes_to_the_same_total(tiny, tmp_path):
    spec = _spec("text-classification", tmp_path, classification_records(64), classification_records(8, 1), tiny,
                 epochs=2, batch_size=8)
    first = RecordingReporter(cancel_after_step=5)
    with pytest.raises(Cancelled):
        run_training(spec, tmp_path / "run", first)
    assert (tmp_path / "run" / "checkpoints" / "checkpoint-5" / "optimizer.pt").is_file()
    assert not (tmp_path / "run" / "metrics.json").exists()
    second = RecordingReporter()
    metrics = run_training(spec, tmp_path / "run", second)
    assert second.facts["resumed_from"].endswith("checkpoint-5")
    assert second.steps[0][0] == 6 and metrics["steps"] == first.facts["total_steps"] == 16


def test_resume_only_checkpoints_are_paced_but_a_cancel_and_a_selected_one_are_always_written(tiny, tmp_path,
                                                                                              monkeypatch):
    """A checkpoint that only serves a resume is written when the training since the last one took ``CHECKPOINT_PACE``
    times as long as writing that one. Paced here so that only the first is ever due: one checkpoint of 4 epochs,
    the cancel's all the same, and every epoch's where the best is selected at the end."""
    from jobs.training import trainer as trainer_module

    monkeypatch.setattr(trainer_module, "CHECKPOINT_PACE", 1e9)
    records, validation = classification_records(32), classification_records(8, 1)
    (tmp_path / "last").mkdir()
    (tmp_path / "best").mkdir()
    last = _spec("text-classification", tmp_path / "last", records, validation, tiny, epochs=4, batch_size=8,
                 select_by="last")
    metrics = run_training(last, tmp_path / "last" / "run", RecordingReporter())
    assert metrics["steps"] == 16 and metrics["checkpoints"] == 1
    assert [p.name for p in (tmp_path / "last" / "run" / "checkpoints").iterdir()] == ["checkpoint-4"]
    with pytest.raises(Cancelled):
        run_training(last, tmp_path / "last" / "cancelled", RecordingReporter(cancel_after_step=9))
    saved = sorted(p.name for p in (tmp_path / "last" / "cancelled" / "checkpoints").iterdir())
    assert saved == ["checkpoint-4", "checkpoint-9"]  # the first epoch's, then the cancel's
    best = _spec("text-classification", tmp_path / "best", records, validation, tiny, epochs=4, batch_size=8,
                 select_by="metric")
    assert run_training(best, tmp_path / "best" / "run", RecordingReporter())["checkpoints"] == 4


def test_a_resume_only_checkpoint_waits_until_the_training_since_the_last_took_ten_times_its_writing():
    from types import SimpleNamespace

    from transformers import TrainerControl

    from jobs.training.trainer import CheckpointPace, PaceCheckpoints

    now = [0.0]
    pace = CheckpointPace(ratio=10.0, clock=lambda: now[0])
    assert pace.due()  # the first one always is
    pace.saved(2.0)
    now[0] = 19.9
    assert not pace.due()
    resume_only = SimpleNamespace(load_best_model_at_end=False, world_size=1, device="cpu")
    control = PaceCheckpoints(pace).on_epoch_end(resume_only, None, TrainerControl(should_save=True))
    assert control.should_save is False and pace.skipped == 1
    selected = SimpleNamespace(load_best_model_at_end=True, world_size=1, device="cpu")
    assert PaceCheckpoints(pace).on_step_end(selected, None, TrainerControl(should_save=True)).should_save
    now[0] = 20.0
    assert PaceCheckpoints(pace).on_step_end(resume_only, None, TrainerControl(should_save=True)).should_save


def test_nan_loss_is_a_training_error(tiny, tmp_path):
    spec = _spec("text-classification", tmp_path, classification_records(64), classification_records(8, 1), tiny,
                 epochs=2, learning_rate=1e30)
    with pytest.raises(TrainingError, match="NaN at step"):
        run_training(spec, tmp_path / "run", RecordingReporter())


def test_missing_data_and_unavailable_model_fail_clearly(tiny, tmp_path, monkeypatch):
    spec = RunSpec(task="text-classification", model=str(tiny), data=DataSpec(train_path=str(tmp_path / "nope.jsonl")))
    with pytest.raises(TrainingError, match="not found"):
        run_training(spec, tmp_path / "run", RecordingReporter())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec.model = "someone/not-cached-anywhere"
    with pytest.raises(ModelUnavailable):
        run_training(spec, tmp_path / "run2", RecordingReporter())


def test_wrong_file_for_the_task_is_a_training_error(tiny, tmp_path):
    spec = _spec("token-classification", tmp_path, classification_records(8), classification_records(4), tiny)
    with pytest.raises(TrainingError, match="tokens"):
        run_training(spec, tmp_path / "run", RecordingReporter())


def test_a_small_set_stops_once_its_validation_split_is_learned(tiny, tmp_path):
    # 64 examples under the standard preset: the 400-step floor (50 epochs of 8 steps); 32 validation examples,
    # enough to call the split learned, evaluated every 20 steps
    reporter = RecordingReporter()
    spec = _spec("text-classification", tmp_path, classification_records(64), classification_records(32, 1), tiny,
                 epochs=None, method="finetune")
    metrics = run_training(spec, tmp_path / "run", reporter)
    assert reporter.facts["total_steps"] == 400 and reporter.facts["hyperparameters"]["eval_steps"] == 20
    learned = metrics["learned_at_step"]
    assert metrics["steps"] == learned + 20 < 400 and metrics["accuracy"] == 1.0
    rates = [p[2]["train/learning_rate"] for p in reporter.points if "train/learning_rate" in p[2]]
    assert rates[-1] < rates[0] / 5  # annealed on the way out, not cut off at full rate
    # the throughput later estimates use counts the examples really seen, not the 50 planned epochs
    seen = metrics["samples_per_second"] * (metrics["train_seconds"] - metrics["eval_and_checkpoint_seconds"])
    assert seen == pytest.approx(8 * metrics["steps"], rel=0.02)
    assert "learned" in (tmp_path / "run" / "train.log").read_text()


def test_a_split_that_is_never_learned_trains_to_the_floor(tiny, tmp_path):
    import random

    noisy = classification_records(16)
    for record in random.Random(0).sample(noisy, 4):  # a quarter of the labels flipped: the split stays unlearned
        record["label"] = "neg" if record["label"] == "pos" else "pos"
    spec = _spec("text-classification", tmp_path, noisy, classification_records(32, 1), tiny, epochs=None,
                 method="finetune")
    metrics = run_training(spec, tmp_path / "run", RecordingReporter())
    assert metrics["steps"] == 200 and "learned_at_step" not in metrics  # 100 epochs (the most) of 2 steps
