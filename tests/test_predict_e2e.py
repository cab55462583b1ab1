"""End to end: tiny config-built models, really trained through ``run_training``, predict whole files.

Each prediction is checked against an independent answer for the same model: the run's own validation
predictions (``predictions.jsonl``, written by the engine's evaluation), ``transformers.pipeline``, the
SetFit library, or a masked LM scored by hand.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from jobs.training.engine import run_training
from jobs.predict.job import run_prediction
from jobs.predict.spec import ModelRef, PredictSpec
from jobs.progress import RecordingReporter
from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from storage.datasets import read_tokens
from storage.datasets.problems import ProblemLog
from tests.tiny_models import (classification_records, ner_records, qa_records, tiny_bert, tiny_sentence_model,
                               write_jsonl)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


def _train(task: str, folder: Path, train: list[dict], validation: list[dict], model: Path, **train_kw) -> Path:
    """A finished run's output folder."""
    train_kw.setdefault("learning_rate", 1e-3)
    train_kw.setdefault("calibrate", "off")  # compared with raw scores: the run's rows and transformers.pipeline
    spec = RunSpec(task=task, model=str(model),
                   data=DataSpec(train_path=write_jsonl(folder / "train.jsonl", train).as_posix(),
                                 validation_path=write_jsonl(folder / "validation.jsonl", validation).as_posix()),
                   train=TrainSpec(**train_kw))
    run_training(spec, folder / "run", RecordingReporter())
    return folder / "run"


def _model(run: Path, task: str) -> ModelRef:
    hp = json.loads((run / "metrics.json").read_text())["hyperparameters"]
    return ModelRef(run_id=1, task=task, model_dir=str(run / "model"), hyperparameters=hp)


def _predict(model: ModelRef, path: Path, out: Path, fmt: str = "jsonl", **kw) -> tuple[dict, list[dict]]:
    spec = PredictSpec(kind="predict", run_id=1, input_path=str(path), output_format=fmt, **kw)
    result = run_prediction(spec, model, out, RecordingReporter(), device="cpu")
    text = Path(result["output"]).read_text(encoding="utf-8")
    rows = (list(csv.DictReader(io.StringIO(text))) if fmt == "csv"
            else [json.loads(line) for line in text.splitlines()])
    return result, rows


def _validation_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def classifier(tiny, tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier")
    return _train("text-classification", folder, classification_records(64), classification_records(16, 1), tiny,
                  epochs=4)


def test_text_classification_matches_the_run_and_the_pipeline(classifier, tmp_path):
    from transformers import pipeline

    validation = _validation_rows(classifier)
    path = tmp_path / "tickets.csv"
    with path.open("w", newline="") as handle:  # no label column: a prediction file usually has none
        out = csv.writer(handle)
        out.writerow(["ticket_id", "text"])
        out.writerows([[f"T{i}", row["text"]] for i, row in enumerate(validation)])
        out.writerow(["T-long", "great film " * 200])
    result, rows = _predict(_model(classifier, "text-classification"), path, tmp_path / "out", fmt="csv",
                            chunk_rows=5)
    assert result["rows"] == len(validation) + 1 and result["truncated"] == 1
    assert list(rows[0]) == ["ticket_id", "text", "predicted_label", "score", "prob_neg", "prob_pos", "truncated"]
    assert [r["ticket_id"] for r in rows[:-1]] == [f"T{i}" for i in range(len(validation))]
    assert [r["predicted_label"] for r in rows[:-1]] == [v["predicted"] for v in validation]
    assert [float(r["score"]) for r in rows[:-1]] == pytest.approx([v["score"] for v in validation], abs=1e-4)
    assert rows[-1]["truncated"] == "true" and all(r["truncated"] == "false" for r in rows[:-1])
    assert all(abs(float(r["prob_neg"]) + float(r["prob_pos"]) - 1) < 1e-5 for r in rows)
    classify = pipeline("text-classification", model=str(classifier / "model"))
    theirs = classify([r["text"] for r in rows], batch_size=8, truncation=True, max_length=128)
    assert [t["label"] for t in theirs] == [r["predicted_label"] for r in rows]
    assert [t["score"] for t in theirs] == pytest.approx([float(r["score"]) for r in rows], abs=1e-4)


def test_a_prediction_job_serves_large_buffers_from_their_own_mappings(classifier, tmp_path, monkeypatch):
    """``jobs.predict.heap``: the job fixes glibc's mmap threshold before it predicts (its RSS over 1,000 long
    reviews: 697-704 MB instead of 815-990 MB, bench/long_documents.py); this machine's C library takes it."""
    from jobs.predict import heap
    from jobs.predict import job as job_module

    assert heap.fix_mmap_threshold() is True
    calls = []
    monkeypatch.setattr(job_module, "fix_mmap_threshold", lambda: calls.append("fixed") or True)
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in _validation_rows(classifier)[:3]))
    result, rows = _predict(_model(classifier, "text-classification"), path, tmp_path / "out")
    assert calls == ["fixed"] and len(rows) == 3


def test_text_pairs_are_read_as_pairs(tiny, tmp_path):
    run = _train("text-classification", tmp_path, classification_records(32, pair=True),
                 classification_records(8, 1, pair=True), tiny, epochs=1)
    validation = _validation_rows(run)
    path = write_jsonl(tmp_path / "pairs.jsonl", [{"text": v["text"], "text_pair": v["text_pair"], "n": i}
                                                  for i, v in enumerate(validation)])
    result, rows = _predict(_model(run, "text-classification"), path, tmp_path / "out")
    assert result["rows"] == len(validation) and [r["n"] for r in rows] == list(range(len(validation)))
    assert [r["predicted_label"] for r in rows] == [v["predicted"] for v in validation]
    assert [r["score"] for r in rows] == pytest.approx([v["score"] for v in validation], abs=1e-4)


def test_multi_label_predictions_join_the_label_set(tiny, tmp_path):
    run = _train("text-classification", tmp_path, classification_records(32, multi_label=True),
                 classification_records(8, 1, multi_label=True), tiny, epochs=1)
    validation = _validation_rows(run)
    path = tmp_path / "in.txt"
    path.write_text("".join(v["text"] + "\n" for v in validation))
    _, rows = _predict(_model(run, "text-classification"), path, tmp_path / "out")
    assert [r["predicted_label"] for r in rows] == ["|".join(v["predicted"]) for v in validation]
    for row, v in zip(rows, validation):
        assert {name: row[f"prob_{name}"] for name in v["score"]} == pytest.approx(v["score"], abs=1e-4)


def test_token_classification_conll_in_conll_back(tiny, tmp_path):
    run = _train("token-classification", tmp_path, ner_records(96), ner_records(16, 1), tiny, epochs=3)
    validation = _validation_rows(run)
    path = tmp_path / "sentences.conll"
    path.write_text("".join("".join(f"{t}\n" for t in v["tokens"]) + "\n" for v in validation))  # tokens only
    result, rows = _predict(_model(run, "token-classification"), path, tmp_path / "out", chunk_rows=6)
    assert result["rows"] == len(validation) and result["truncated"] == 0
    assert [r["predicted_tags"] for r in rows] == [v["predicted"] for v in validation]
    assert [r["tokens"] for r in rows] == [v["tokens"] for v in validation]
    for row in rows:
        text = " ".join(row["tokens"])
        assert all(text[e["start"]:e["end"]] == e["text"] and e["label"] in ("PER", "LOC") for e in row["entities"])
    assert any(row["entities"] for row in rows)
    problems = ProblemLog()
    back = list(read_tokens.read_conll(io.StringIO(Path(result["outputs"]["conll"]).read_text()), "p.conll", problems))
    assert not problems.has_errors and [r.data["tags"] for r in back] == [v["predicted"] for v in validation]

    texts = tmp_path / "texts.txt"  # free text: words split as the playground splits them
    texts.write_text("alice flew to paris\nbob flew to new york\n")
    _, free = _predict(_model(run, "token-classification"), texts, tmp_path / "free", fmt="csv")
    for row in free:
        assert all(row["text"][e["start"]:e["end"]] == e["text"] for e in json.loads(row["entities"]))


def test_question_answering_from_squad_json(tiny, tmp_path):
    run = _train("question-answering", tmp_path, qa_records(64), qa_records(16, 1), tiny, epochs=3, max_length=48)
    validation = _validation_rows(run)
    paragraphs = [{"context": v["context"], "qas": [{"id": v["id"], "question": v["question"], "answers": []}]}
                  for v in validation]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}, indent=1))
    result, rows = _predict(_model(run, "question-answering"), path, tmp_path / "out")
    assert result["rows"] == len(validation) and [r["id"] for r in rows] == [v["id"] for v in validation]
    answered = [r for r in rows if not r["no_answer"]]
    for row in rows:
        if row["no_answer"]:
            assert row["answer"] == "" and row["start"] is None and row["end"] is None
        else:
            assert row["context"][row["start"]:row["end"]] == row["answer"] and 0 < row["score"] <= 1
    same = sum(r["answer"] == v["predicted"] for r, v in zip(rows, validation) if not r["no_answer"])
    assert answered and same >= len(answered) // 2  # the engine's n-best decoding agrees on most answers


def test_masked_lm_fills_masks_and_scores_plain_text(tiny, tmp_path):
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig.from_pretrained(str(tiny))).eval()
    model.save_pretrained(tmp_path / "mlm")
    tokenizer.save_pretrained(tmp_path / "mlm")
    path = tmp_path / "in.txt"
    path.write_text("the cat sat on the [MASK] .\nthe dog ran in parks\n")
    result, rows = _predict(ModelRef(1, "masked-lm", str(tmp_path / "mlm"), {"max_length": 32}), path,
                            tmp_path / "out")
    fills = rows[0]["fills"]
    assert result["rows"] == 2 and len(fills) == 1 and len(fills[0]["candidates"]) == 5
    assert all(c["sequence"] == f"the cat sat on the {c['token']} ." for c in fills[0]["candidates"])
    assert rows[0]["pseudo_perplexity"] is None and rows[1]["fills"] is None
    ids = tokenizer("the dog ran in parks", return_tensors="pt")["input_ids"]
    log_probs = []
    with torch.no_grad():
        for position in range(1, ids.shape[1] - 1):  # each word piece masked in turn, by hand
            masked = ids.clone()
            masked[0, position] = tokenizer.mask_token_id
            logits = model(input_ids=masked).logits[0, position]
            log_probs.append(torch.log_softmax(logits, -1)[ids[0, position]].item())
    assert rows[1]["pseudo_perplexity"] == pytest.approx(float(np.exp(-np.mean(log_probs))), rel=1e-4)


def test_a_setfit_run_predicts_like_the_setfit_library(tmp_path):
    from setfit import SetFitModel

    model = tiny_sentence_model(tmp_path / "tiny")
    run = _train("text-classification", tmp_path, classification_records(24), classification_records(8, 1), model,
                 max_steps=6, batch_size=8)
    texts = ["great film loved it", "boring and dull", "a joy to watch", "awful acting and story"]
    path = tmp_path / "in.csv"
    path.write_text("text\n" + "".join(f"{t}\n" for t in texts))
    _, rows = _predict(_model(run, "text-classification"), path, tmp_path / "out")
    theirs = np.asarray(SetFitModel.from_pretrained(str(run / "model")).predict_proba(texts))
    ours = np.array([[r["prob_neg"], r["prob_pos"]] for r in rows])
    assert np.allclose(ours, theirs, atol=1e-4)
    assert [r["predicted_label"] for r in rows] == [("neg", "pos")[int(i)] for i in theirs.argmax(1)]
