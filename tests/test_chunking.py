"""Long documents read in windows (``jobs.training.chunking``): the pooling arithmetic, training on documents,
and every reader of a chunked run (prediction, ONNX parity, the playground's REST API), on tiny models."""
from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest

from jobs.training import chunking as chunks
from storage.datasets.stats import window_count, windows_message, windows_summary
from tests.tiny_models import tiny_bert, write_jsonl

FILLER = "the cat sat on a mat while dogs ran in parks and birds sang songs".split()


def last_sentence_documents(n: int, seed: int) -> list[dict]:
    """About 45 tokens of filler words that say nothing of the label, then the sentence that does."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        positive = i % 2 == 0
        filler = " ".join(rng.choice(FILLER) for _ in range(40))
        out.append({"text": f"{filler} it was {'great' if positive else 'awful'}.",
                    "label": "pos" if positive else "neg"})
    return out


# ------------------------------------------------------------------ pure arithmetic

def test_pooling_mean_max_attention_by_document_in_numpy_and_torch():
    import torch

    logits = np.array([[1.0, 0.0], [3.0, -2.0], [0.5, 0.5], [-1.0, 4.0]])
    document = [0, 0, 1, 1]
    np.testing.assert_allclose(chunks.pool(logits, document, "mean"), [[2.0, -1.0], [-0.25, 2.25]])
    np.testing.assert_allclose(chunks.pool(logits, document, "max"), [[3.0, 0.0], [0.5, 4.0]])
    scores = np.array([0.0, np.log(3.0), 5.0, 5.0])  # weights 1/4, 3/4 and 1/2, 1/2
    np.testing.assert_allclose(chunks.pool(logits, document, "attention", scores), [[2.5, -1.5], [-0.25, 2.25]])
    for pooling in chunks.POOLINGS:
        got = chunks.pool_torch(torch.tensor(logits), torch.tensor(document), pooling, torch.tensor(scores))
        np.testing.assert_allclose(got.numpy(), chunks.pool(logits, document, pooling, scores), rtol=1e-6)


def test_windows_overlap_by_the_stride_and_their_count_matches_the_data_check():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_folder()))
    texts = [" ".join(f"w{i}" for i in range(n)) for n in (5, 60, 200)]
    lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    windows = chunks.split_windows(tokenizer, texts, None, 32, 8, max_windows=1000)
    assert windows.kept == [window_count(n, 32, 8) for n in lengths]
    first, second = windows.of(1)["input_ids"][:2]
    assert first[-9:-1] == second[1:9]  # the 8 tokens two windows share
    capped = chunks.split_windows(tokenizer, texts, None, 32, 8, max_windows=3)
    assert capped.kept == [1, min(3, windows.kept[1]), 3] and sum(capped.dropped) == sum(windows.kept) - sum(
        capped.kept)
    assert "need more than 3 windows" in chunks.dropped_message(capped.dropped, 3)
    summary = windows_summary(np.array(lengths + [10] * 3), 32, 8)
    assert windows_message(summary) == (f"2 of 6 texts are longer than the window: they will be read in "
                                        f"{min(windows.kept[1:])}–{max(windows.kept)} windows each")


def test_auto_turns_chunking_on_at_a_fifth_of_long_training_texts():
    from jobs.specs.hyperparameters import CHUNK_SHARE, chunking_choice

    assert chunking_choice("text-classification", "auto", CHUNK_SHARE, 128)[0] == "mean"
    assert chunking_choice("text-classification", "auto", CHUNK_SHARE - 0.01, 128) == ("off", "")
    assert chunking_choice("text-classification", "auto", 0.9, 128, method="setfit") == ("off", "")
    assert "windows of 128 tokens" in chunking_choice("text-classification", "auto", 0.5, 128)[1]
    assert chunking_choice("text-classification", "max", 0.0, 128)[0] == "max"


# ------------------------------------------------------------------ a tiny model

_TINY = {}


def tiny_bert_folder():
    return _TINY["bert"]


@pytest.fixture(scope="module", autouse=True)
def tiny(tmp_path_factory):
    import torch

    # a seeded body: the learning test's figures hold for this one (other bodies: attention 0.83-0.96 on the
    # validation documents, truncation 0.25-0.42)
    with torch.random.fork_rng():
        torch.manual_seed(2)
        _TINY["bert"] = tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert", hidden_dropout_prob=0.0)
    return _TINY["bert"]


def _train(tmp_path, chunking: str, epochs: int = 6):
    from jobs.progress import RecordingReporter
    from jobs.training.engine import run_training

    out = tmp_path / chunking
    return run_training(_spec(tmp_path, chunking, epochs), out, RecordingReporter()), out


def _spec(tmp_path, chunking: str, epochs: int):
    """The spec of ``_train``'s run (its data files written to ``tmp_path``)."""
    from jobs.specs.run import DataSpec, RunSpec, TrainSpec

    return RunSpec(task="text-classification", model=str(tiny_bert_folder()),
                   data=DataSpec(train_path=write_jsonl(tmp_path / "train.jsonl",
                                                        last_sentence_documents(48, 0)).as_posix(),
                                 validation_path=write_jsonl(tmp_path / "validation.jsonl",
                                                             last_sentence_documents(24, 1)).as_posix()),
                   train=TrainSpec(max_length=24, chunking=chunking, learning_rate=3e-3, epochs=epochs, batch_size=8,
                                   method="finetune", calibrate="off", select_by="last"))


@pytest.fixture(scope="module")
def attention_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("attention"), "attention")


def test_an_evaluation_of_a_chunked_run_fits_its_frozen_baseline_on_the_runs_windows(attention_run, tmp_path):
    from jobs.predict.evaluate import run_evaluation
    from jobs.predict.spec import ModelRef, PredictSpec
    from jobs.progress import RecordingReporter

    _metrics, out = attention_run
    saved = json.loads((out / "metrics.json").read_text())
    ref = ModelRef(run_id=3, task="text-classification", model_dir=str(out / "model"),
                   hyperparameters=saved["hyperparameters"], run_spec=_spec(out.parent, "attention", 6).to_dict())
    test = write_jsonl(tmp_path / "test.jsonl", last_sentence_documents(24, 2))
    found = run_evaluation(PredictSpec(kind="evaluate", run_id=3, dataset_id="ds-test"), ref, [test],
                           tmp_path / "eval", RecordingReporter())["baselines"]["frozen_embeddings"]
    assert found["read"].startswith("windows of 24 tokens") and found["examples"] == 24


def test_a_label_in_the_last_sentence_is_learned_with_chunking_and_not_without(attention_run, tmp_path):
    chunked, out = attention_run
    truncated, _ = _train(tmp_path, "off", epochs=3)  # the label is not in what it reads: fewer epochs do
    assert chunked["accuracy"] >= 0.85 and chunked["chunking"] == "attention"
    assert truncated["accuracy"] <= 0.7 and "chunking" not in truncated
    assert json.loads((out / "model" / "chunking.json").read_text())["window"] == 24
    assert "attention pooling" in json.loads((out / "metrics.json").read_text())["hyperparameters"]["why"]
    # the frozen-embedding baseline reads the documents as each run did: its windows reach the last sentence
    chunked_frozen, truncated_frozen = chunked["baselines"]["frozen_embeddings"], truncated["baselines"]["frozen_embeddings"]
    assert chunked_frozen["read"].startswith("windows of 24 tokens") and truncated_frozen["read"] == "the first 24 tokens"
    assert chunked_frozen["accuracy"] >= truncated_frozen["accuracy"] + 0.2, (chunked_frozen, truncated_frozen)
    from jobs.evaluation.baselines import summary

    assert "frozen embeddings + logistic regression (long texts in windows) " in summary(chunked)
    assert "frozen embeddings + logistic regression 0." in summary(truncated)


def test_a_one_window_document_scores_as_the_unchunked_model(tmp_path):
    """Whatever the pooling, a text that fits one window gets the model's own score of it."""
    from transformers import AutoModelForSequenceClassification

    from jobs.predict.infer import TorchPredictor

    plain = tmp_path / "plain"
    AutoModelForSequenceClassification.from_pretrained(str(tiny_bert_folder()), num_labels=2).save_pretrained(plain)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_bert_folder() / name, plain / name)
    rows = [{"text": "a short review"}, {"text": "the cat sat on a mat while dogs ran"}]
    expected = TorchPredictor(plain, "text-classification", max_length=24).predict(rows)
    scorer = {"weight": list(np.linspace(-1, 1, 32)), "bias": 0.5}
    for pooling in chunks.POOLINGS:
        folder = tmp_path / pooling
        shutil.copytree(plain, folder)
        chunks.save_config(folder, chunks.Chunking(pooling, 24, 6, scorer=scorer if pooling == "attention" else None))
        got = TorchPredictor(folder, "text-classification", max_length=24).predict(rows)
        for one, two in zip(got, expected):
            assert one["windows"] == 1 and one["label"] == two["label"]
            assert one["scores"] == pytest.approx(two["scores"], abs=1e-6)


def test_a_prediction_reads_long_documents_a_few_windows_at_a_time_with_the_same_scores(attention_run, monkeypatch):
    """The windows of a batch's documents are split and held a group at a time (memory flat in the longest
    documents met), each group about ``WINDOWS_PER_READ`` windows: the scores are those of reading all at once."""
    from jobs.predict import infer

    model_dir = attention_run[1] / "model"
    rows = [{"text": " ".join([r["text"]] * k)} for k, r in zip((1, 3, 1, 5, 2, 1), last_sentence_documents(6, 3))]
    predictor = infer.TorchPredictor(model_dir, "text-classification")
    texts, window, stride = [r["text"] for r in rows], predictor.max_length, predictor.chunking.stride
    counts = chunks.window_counts(predictor.tokenizer, texts, None, window, stride)
    assert counts == chunks.split_windows(predictor.tokenizer, texts, None, window, stride, max_windows=10**9).kept
    groups = chunks.window_groups(counts, 8)
    assert [c for a, b in groups for c in counts[a:b]] == counts  # neighbours, in order, each once
    for (a, b), (c, _) in zip(groups, groups[1:] + [(len(rows), None)]):
        held = sum(counts[a:b])
        assert held <= 8 or b - a == 1  # within the budget, or one document alone
        assert c == len(rows) or held + counts[c] > 8  # and as full as the budget allows
    assert len(groups) > 2
    whole = predictor.predict(rows)
    monkeypatch.setattr(infer, "WINDOWS_PER_READ", 8)
    read = []
    split = chunks.split_windows
    monkeypatch.setattr(chunks, "split_windows", lambda tok, texts, *a, **k: read.append(len(texts)) or split(
        tok, texts, *a, **k))
    grouped = predictor.predict(rows)
    assert read == [b - a for a, b in groups]
    for one, two in zip(grouped, whole):
        assert one["windows"] == two["windows"] and one["label"] == two["label"]
        assert one["scores"] == pytest.approx(two["scores"], abs=1e-5)


def test_onnx_parity_on_chunked_documents(attention_run, tmp_path):
    from jobs.export.onnx import export_fp32
    from jobs.export.runtime import OnnxModel, model_config
    from jobs.predict.infer import TorchPredictor

    model_dir = attention_run[1] / "model"
    export_fp32(model_dir, "text-classification", tmp_path / "model.onnx")
    onnx = OnnxModel(tmp_path / "model.onnx", model_config(model_dir))
    assert chunks.WINDOW_SCORE in onnx.output_names
    rows = [{"text": r["text"]} for r in last_sentence_documents(6, 2)]
    reference = TorchPredictor(model_dir, "text-classification").predict(rows)
    exported = TorchPredictor(model_dir, "text-classification", model=onnx).predict(rows)
    assert all(r["windows"] >= 3 for r in reference)
    for one, two in zip(exported, reference):
        assert one["label"] == two["label"] and one["windows"] == two["windows"]
        assert one["scores"] == pytest.approx(two["scores"], abs=1e-4)


def test_the_playground_reads_a_5000_word_text_in_windows_or_answers_422(attention_run, wb):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from tests import playground_support as ps
    from workbench.playground import service
    from workbench.playground.api import build_router
    from workbench.playground.runtime import Playgrounds

    slug = service.publish(wb, ps.add_run(wb, "text-classification", attention_run[1] / "model")).slug
    app = FastAPI()
    app.include_router(build_router(Playgrounds(wb)))
    text = " ".join(random.Random(0).choice(FILLER) for _ in range(5000)) + " it was great."
    assert len(text) > 20_000  # more than a truncating run's playground takes
    with TestClient(app) as client:
        answered = client.post(f"{service.API_PREFIX}/{slug}", json={"inputs": text})
        assert answered.status_code == 200, answered.text
        windows = answered.json()["predictions"][0]["windows"]
        assert windows > 200
        refused = client.post(f"{service.API_PREFIX}/{slug}", json={"inputs": [text] * 8})
    assert refused.status_code == 422
    limit = wb.settings.playground_max_tokens
    assert (f"needs {8 * windows:,} windows of 24 tokens" in refused.json()["error"]
            and f"the limit is {limit:,} tokens per request, {limit // 24:,} windows" in refused.json()["error"])


def test_the_data_check_and_the_train_form_say_what_chunking_will_do():
    from workbench.services.estimates import long_share
    from workbench.ui.plots import token_length_caption

    stats = {"max_length": 128, "truncated_share": 0.51, "count": 1200, "mean": 300.0,
             "windows": {"longer": 612, "count": 1200, "min": 2, "max": 6, "stride": 32},
             "histogram": {"counts": [600, 600], "edges": [0, 128, 384]}}
    assert ("612 of 1,200 texts are longer than the window: they will be read in 2–6 windows each"
            in token_length_caption(stats))
    assert long_share(stats, 128) == 0.51  # measured at this length
    assert long_share(stats, 256) == pytest.approx(0.25)  # from the histogram: half of the second bin


def test_the_train_form_sets_how_long_texts_are_read_and_clone_and_edit_keeps_it():
    from workbench.ui import train_tab

    def spec(task: str, chunking: str):
        return train_tab.spec_from_form(task, "d1", "all-MiniLM-L6-v2", "standard", "", {}, chunking=chunking)

    assert spec("text-classification", "attention").train.chunking == "attention"
    assert spec("text-classification", "").train.chunking == "auto"
    assert spec("token-classification", "attention").train.chunking == "auto"  # not offered: the task's default
    cloned = train_tab.form_from_spec(spec("text-classification", "off").to_dict())
    assert cloned["chunking"] == "off" and train_tab.form_from_spec({"train": {}})["chunking"] == "auto"
