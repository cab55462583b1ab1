"""Evaluation jobs (``jobs.predict.evaluate``): a trained tiny model scored on a test file.

The anchor: a run evaluated on its own validation file gets exactly its validation metrics and tables.
Then what a test set may do that a validation split does not: hold its labels in another order, only
some of the classes, a label the model never saw; and a cancel that leaves nothing finished.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from jobs.training.engine import run_training
from jobs.predict.evaluate import run_evaluation
from jobs.predict.spec import ModelRef, PredictSpec
from jobs.progress import Cancelled, RecordingReporter
from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from storage.errors import DataValidationError
from tests.tiny_models import (classification_records, documents, ner_records, qa_records, tiny_bert,
                               tiny_sentence_model, write_jsonl)

pytestmark = pytest.mark.e2e

# each class has a word of its own: a tiny model learns three classes from 72 examples in a few epochs
_TEXTS = {"pos": ["great film loved it", "great acting and story", "a great joy to watch", "great and moving"],
          "neg": ["awful film hated it", "awful acting and story", "an awful pain to watch", "awful and dull"],
          "neutral": ["released in may", "released at two hours long", "released in black and white",
                      "released with five actors"]}


def three_class_records(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    labels = ["pos", "neg", "neutral"]
    return [{"text": rng.choice(_TEXTS[labels[i % 3]]), "label": labels[i % 3]} for i in range(n)]


class Trained:
    """A finished run: its folder, and the ``ModelRef`` a job gets for it."""

    def __init__(self, folder: Path, task: str, validation: Path):
        self.folder, self.validation = folder, validation
        saved = json.loads((folder / "metrics.json").read_text())
        self.metrics = saved
        self.ref = ModelRef(run_id=7, task=task, model_dir=str(folder / "model"),
                            hyperparameters=saved["hyperparameters"])

    def tables(self) -> dict:
        return json.loads((self.folder / "tables.json").read_text())

    def rows(self) -> list[dict]:
        return [json.loads(line) for line in (self.folder / "predictions.jsonl").read_text().splitlines()]


def _train(folder: Path, task: str, model: Path, train: list[dict], validation: list[dict], **train_kw) -> Trained:
    folder.mkdir(parents=True, exist_ok=True)
    train_kw.setdefault("learning_rate", 1e-3)
    spec = RunSpec(task=task, model=str(model),
                   data=DataSpec(train_path=write_jsonl(folder / "train.jsonl", train).as_posix(),
                                 validation_path=write_jsonl(folder / "validation.jsonl", validation).as_posix()),
                   train=TrainSpec(**train_kw))
    run_training(spec, folder / "run", RecordingReporter())
    return Trained(folder / "run", task, folder / "validation.jsonl")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture(scope="module")
def classifier(tiny, tmp_path_factory):
    return _train(tmp_path_factory.mktemp("cls"), "text-classification", tiny, three_class_records(72),
                  three_class_records(18, 1), epochs=12, learning_rate=3e-3, method="finetune")


@pytest.fixture(scope="module")
def tagger(tiny, tmp_path_factory):
    return _train(tmp_path_factory.mktemp("ner"), "token-classification", tiny, ner_records(96), ner_records(16, 1),
                  epochs=3)


def _evaluate(trained: Trained, paths: list[Path], out: Path, reporter=None, **spec_kw) -> dict:
    spec = PredictSpec(kind="evaluate", run_id=trained.ref.run_id, dataset_id="ds-test", **spec_kw)
    return run_evaluation(spec, trained.ref, paths, out, reporter or RecordingReporter())


def _assert_same_tables(ours: dict, theirs: dict) -> None:
    """Tables equal, floats to 1e-6."""
    assert json.loads(json.dumps(ours), parse_float=lambda x: round(float(x), 6)) == \
        json.loads(json.dumps(theirs), parse_float=lambda x: round(float(x), 6))


def _written(out: Path) -> tuple[dict, dict, list[dict]]:
    metrics = json.loads((out / "metrics.json").read_text())
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return metrics, json.loads((out / "tables.json").read_text()), rows


# --- a run on its own validation file: its validation metrics -----------------------------------------

def test_classification_on_its_validation_file_gives_the_runs_metrics(classifier, tmp_path):
    reporter = RecordingReporter()
    metrics = _evaluate(classifier, [classifier.validation], tmp_path / "eval", reporter)
    for key in ("accuracy", "f1_macro"):
        assert metrics[key] == pytest.approx(classifier.metrics[key], abs=1e-6)
    assert classifier.metrics["accuracy"] >= 0.8  # the run learned: the label checks below mean something
    saved, tables, rows = _written(tmp_path / "eval")
    assert saved["rows"] == 18 and saved["test_set"] == "ds-test" and saved["model_run"] == 7
    assert saved["hyperparameters"] == classifier.metrics["hyperparameters"] and saved["seconds"] >= 0
    # the calibration is the run's own, fitted on its validation split when it trained: an evaluation fits none
    # and applies the stored one; on the same examples its ECE is the run's
    _assert_same_tables({k: v for k, v in tables.items() if k != "calibration"},
                        {k: v for k, v in classifier.tables().items() if k != "calibration"})
    assert tables["calibration"]["setting"] == "stored"
    assert metrics["ece"] == pytest.approx(classifier.metrics["ece"], abs=1e-4)
    assert [(r["text"], r["gold"], r["predicted"], r["correct"]) for r in rows] == \
        [(r["text"], r["gold"], r["predicted"], r["correct"]) for r in classifier.rows()]
    assert [r["gold_score"] for r in rows] == pytest.approx([r["gold_score"] for r in classifier.rows()], abs=2e-4)
    # progress: rows done of the 18, ending at all of them; then the outputs are written
    assert reporter.steps[-1] == (18, 18, 0.0) and all(done <= 18 for done, _, _ in reporter.steps)
    assert [name for name, _, _ in reporter.phases][-1] == "writing predictions"
    assert not list((tmp_path / "eval").glob(".*.tmp"))


def test_an_evaluation_shows_the_baselines_fitted_on_the_runs_training_split_and_scored_on_the_test_set(
        classifier, tiny, tmp_path):
    """Issue 39: majority class, TF-IDF and the frozen embeddings of the run's own model, on the test set too."""
    import dataclasses

    from workbench.ui import format as fmt

    folder = classifier.folder.parent
    run_spec = RunSpec(task="text-classification", model=str(tiny),
                       data=DataSpec(train_path=str(folder / "train.jsonl"), validation_path=str(classifier.validation)),
                       train=TrainSpec(epochs=12, learning_rate=3e-3, method="finetune"))
    trained = Trained(classifier.folder, "text-classification", classifier.validation)
    trained.ref = dataclasses.replace(classifier.ref, run_spec=run_spec.to_dict())
    test = write_jsonl(tmp_path / "test.jsonl", three_class_records(30, 2))
    metrics = _evaluate(trained, [test], tmp_path / "eval")
    found = metrics["baselines"]
    assert set(found) == {"majority", "tfidf_logreg", "frozen_embeddings"}
    # fitted on the run's 72 training records (24 a class: the first, "pos", is the majority), scored on the 30
    assert found["majority"]["accuracy"] == pytest.approx(10 / 30, abs=1e-4)
    assert found["tfidf_logreg"]["accuracy"] == 1.0 and found["tfidf_logreg"]["paired"]["examples"] == 30
    assert (found["frozen_embeddings"]["train_examples"], found["frozen_embeddings"]["examples"]) == (72, 30)
    assert found["frozen_embeddings"]["read"] == f"the first {classifier.metrics['hyperparameters']['max_length']} tokens"
    assert metrics["verdict"]["status"] in ("learned", "level_with_baseline", "below_baseline", "did_not_learn")
    saved, _tables, _rows = _written(tmp_path / "eval")
    assert saved["baselines"] == found and saved["verdict"] == metrics["verdict"]
    assert "Baselines on the same test set (fitted on the run's training split): majority class 0.333" in \
        fmt.baseline_html(saved)
    # no training data to fit them on (a job queued before, or the run's data deleted): no baselines
    assert "baselines" not in _evaluate(classifier, [test], tmp_path / "bare")


def test_a_test_set_is_scored_with_the_runs_stored_temperature_not_a_refitted_one(classifier, tmp_path):
    from jobs.evaluation import calibration as cal
    from jobs.evaluation.postprocess import CALIBRATION_FILE

    stored = Path(classifier.ref.model_dir) / CALIBRATION_FILE
    kept = stored.read_text() if stored.is_file() else None
    try:
        stored.write_text(json.dumps({"temperature": 2.0, "applied": True}))
        metrics = _evaluate(classifier, [classifier.validation], tmp_path / "eval")
    finally:
        stored.write_text(kept) if kept is not None else stored.unlink()
    tables = json.loads((tmp_path / "eval" / "tables.json").read_text())
    assert metrics["temperature"] == 2.0 and tables["calibration"]["applied"] is True
    assert metrics["ece"] == pytest.approx(classifier.metrics["ece"], abs=1e-4)  # the raw scores' ECE
    # the served scores are the logits halved: their ECE, recomputed from the written rows' raw logits, differs
    assert metrics["ece_calibrated"] != pytest.approx(metrics["ece"], abs=1e-6)
    assert tables["calibration"]["bins_calibrated"] != tables["calibration"]["bins"]
    assert metrics["accuracy"] == pytest.approx(classifier.metrics["accuracy"], abs=1e-6)  # argmax unchanged
    assert cal.DEFAULT_THRESHOLD == 0.5


def test_a_test_set_in_another_label_order_with_some_classes_missing_scores_by_the_models_ids(classifier, tmp_path):
    """Only neutral and pos, neutral first and many more of it: collecting labels from this file would
    give ids 0=neutral, 1=pos; the model's are neg, neutral, pos."""
    predicted = {r["text"]: r["predicted"] for r in classifier.rows()}
    texts = [t for t in _TEXTS["neutral"] + _TEXTS["pos"] if t in predicted]
    assert {predicted[t] for t in texts} >= {"neutral", "pos"}
    records = [{"text": t, "label": lab} for t in texts for lab in (["neutral"] * 3 if t in _TEXTS["neutral"]
                                                                      else ["pos"])]
    path = write_jsonl(tmp_path / "test.jsonl", records)
    metrics = _evaluate(classifier, [path], tmp_path / "eval")
    expected = sum(predicted[r["text"]] == r["label"] for r in records) / len(records)
    assert metrics["accuracy"] == pytest.approx(expected, abs=1e-9)
    _, tables, rows = _written(tmp_path / "eval")
    assert [r["predicted"] for r in rows] == [predicted[r["text"]] for r in records]
    matrix = tables["confusion_matrix"]
    assert matrix["labels"] == ["neg", "neutral", "pos"] and sum(matrix["matrix"][0]) == 0  # no neg in the file
    assert sum(matrix["matrix"][1]) == sum(r["label"] == "neutral" for r in records)


def test_two_files_are_read_once_each_in_order(classifier, tmp_path):
    """A stored dataset's train.jsonl then validation.jsonl: every record once."""
    validation = [json.loads(line) for line in classifier.validation.read_text().splitlines()]
    first = write_jsonl(tmp_path / "train.jsonl", validation[:11])
    second = write_jsonl(tmp_path / "validation.jsonl", validation[11:])
    metrics = _evaluate(classifier, [first, second], tmp_path / "eval")
    assert metrics["rows"] == 18 and metrics["accuracy"] == pytest.approx(classifier.metrics["accuracy"], abs=1e-6)
    assert [r["text"] for r in _written(tmp_path / "eval")[2]] == [r["text"] for r in validation]


def test_a_label_the_model_never_saw_is_refused_with_file_and_line(classifier, tmp_path):
    records = three_class_records(6, 2) + [{"text": "what a twist", "label": "sarcastic"},
                                           {"text": "oh great, another one", "label": "sarcastic"}]
    path = write_jsonl(tmp_path / "test.jsonl", records)
    with pytest.raises(DataValidationError) as caught:
        _evaluate(classifier, [path], tmp_path / "eval")
    message = str(caught.value)
    assert f"{path}:7" in message and "'sarcastic' (2 records)" in message and "'neutral'" in message
    assert not (tmp_path / "eval" / "metrics.json").exists()


def test_rows_cut_to_the_max_length_are_counted_and_the_test_sets_duplicates_recorded(classifier, tmp_path):
    """A row longer than the run's max length is scored on its first tokens: the evaluation counts such rows
    (``truncated``, with the ``max_length``) and carries over what the dataset's import did with repeated rows."""
    max_length = classifier.ref.hyperparameters["max_length"]
    long_text = " ".join(["great film loved it"] * max_length)  # 4 words a repeat: far past the max length
    records = three_class_records(9, 3) + [{"text": long_text, "label": "pos"}, {"text": long_text, "label": "pos"}]
    folder = tmp_path / "dataset"  # a stored test set's folder: its records and the import's meta.json
    folder.mkdir()
    path = write_jsonl(folder / "train.jsonl", records)
    (folder / "meta.json").write_text(json.dumps({"details": {"duplicates_kept": 7, "duplicates_dropped": 0}}))
    metrics = _evaluate(classifier, [path], tmp_path / "eval")
    assert (metrics["rows"], metrics["truncated"], metrics["max_length"]) == (11, 2, max_length)
    assert (metrics["duplicates"], metrics["duplicates_dropped"]) == (7, 0)
    saved = _written(tmp_path / "eval")[0]
    assert (saved["truncated"], saved["duplicates"]) == (2, 7)
    # records that are no stored dataset's: nothing is claimed about their duplicates; none of them is cut
    metrics = _evaluate(classifier, [classifier.validation], tmp_path / "eval2")
    assert metrics["truncated"] == 0 and "duplicates" not in metrics and "duplicates_dropped" not in metrics


def test_cancel_mid_evaluation_raises_and_leaves_no_metrics(classifier, tmp_path):
    reporter = RecordingReporter(cancel_after_step=4)
    out = tmp_path / "eval"
    out.mkdir()
    (out / "metrics.json").write_text("{}")  # an earlier attempt's: it must not pass for this one's
    with pytest.raises(Cancelled):
        _evaluate(classifier, [classifier.validation], out, reporter, batch_size=4)
    assert reporter.steps == [(0, 18, 0.0), (4, 18, 0.0)]  # stopped after the first batch of four
    assert not (out / "metrics.json").exists() and not (out / "predictions.jsonl").exists()


def test_setfit_run_on_its_validation_file(tmp_path_factory, tmp_path):
    model = tiny_sentence_model(tmp_path_factory.mktemp("st") / "tiny")
    trained = _train(tmp_path / "setfit", "text-classification", model, classification_records(24),
                     classification_records(12, 1), max_steps=6, batch_size=8)
    assert trained.metrics["method"] == "setfit"
    reporter = RecordingReporter()
    metrics = _evaluate(trained, [trained.validation], tmp_path / "eval", reporter)
    for key in ("accuracy", "f1_macro", "roc_auc"):
        if key in trained.metrics:
            assert metrics[key] == pytest.approx(trained.metrics[key], abs=1e-6)
    written = _written(tmp_path / "eval")[1]
    _assert_same_tables({k: v for k, v in written.items() if k != "calibration"},
                        {k: v for k, v in trained.tables().items() if k != "calibration"})
    # the SetFit run fitted its calibration on this file; the evaluation applies it: same ECE
    assert written["calibration"]["setting"] == "stored"
    assert metrics["ece"] == pytest.approx(trained.metrics["ece"], abs=1e-4)
    assert reporter.steps[-1] == (12, 12, 0.0)
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "hmm", "label": "meh"}])
    with pytest.raises(DataValidationError, match="'meh'"):
        _evaluate(trained, [bad], tmp_path / "eval2")


# --- token classification ------------------------------------------------------------------------------

def test_token_classification_on_its_validation_file(tagger, tmp_path):
    metrics = _evaluate(tagger, [tagger.validation], tmp_path / "eval")
    for key in ("entity_f1", "entity_precision", "entity_recall", "token_accuracy"):
        assert metrics[key] == pytest.approx(tagger.metrics[key], abs=1e-6)
    _, tables, rows = _written(tmp_path / "eval")
    _assert_same_tables(tables, tagger.tables())
    assert [r["predicted"] for r in rows] == [r["predicted"] for r in tagger.rows()]
    flat = [score for r in rows for score in r["score"]]
    assert flat == pytest.approx([score for r in tagger.rows() for score in r["score"]], abs=2e-4)


def test_a_tag_the_model_never_saw_counts_as_wrong(tagger, tmp_path):
    records = ner_records(6, 3)
    for record in records[:2]:
        record["tags"][0] = "B-ORG"  # the person's name, now an organisation the model has no tag for
    metrics = _evaluate(tagger, [write_jsonl(tmp_path / "test.jsonl", records)], tmp_path / "eval")
    _, tables, rows = _written(tmp_path / "eval")
    org = next(row for row in tables["per_tag"] if row["tag"] == "B-ORG")
    assert org["support"] == 2 and org["recall"] == 0.0
    assert not rows[0]["correct"] and not rows[1]["correct"]
    assert rows[0]["gold_score"][0] is None and metrics["token_accuracy"] < 1.0
    assert {"ORG", "PER", "LOC"} >= {row["entity"] for row in tables["per_entity"]} >= {"ORG"}


# --- question answering and masked LM -------------------------------------------------------------------

def test_question_answering_on_its_validation_file_and_a_no_answer_test_set(tiny, tmp_path):
    trained = _train(tmp_path / "qa", "question-answering", tiny, qa_records(64), qa_records(16, 1), epochs=3,
                     max_length=48)
    reporter = RecordingReporter()
    metrics = _evaluate(trained, [trained.validation], tmp_path / "eval", reporter, batch_size=8)
    for key in ("exact_match", "f1"):
        assert metrics[key] == pytest.approx(trained.metrics[key], abs=1e-6)
    rows = _written(tmp_path / "eval")[2]
    assert [(r["id"], r["predicted"]) for r in rows] == [(r["id"], r["predicted"]) for r in trained.rows()]
    assert reporter.steps[-1] == (16, 16, 0.0)  # windows counted as records
    # a test set with an unanswerable question: "no answer" is allowed, and scored apart
    records = qa_records(4, 5)
    records[0]["answers"] = {"text": [], "answer_start": []}
    _evaluate(trained, [write_jsonl(tmp_path / "v2.jsonl", records)], tmp_path / "eval2")
    by_kind = _written(tmp_path / "eval2")[1]["by_kind"]
    assert by_kind["no_answer"]["count"] == 1 and by_kind["has_answer"]["count"] == 3


def test_masked_lm_perplexity_on_its_validation_file(tiny, tmp_path):
    trained = _train(tmp_path / "mlm", "masked-lm", tiny, documents(32), documents(10, 1), epochs=1)
    metrics = _evaluate(trained, [trained.validation], tmp_path / "eval")
    assert metrics["perplexity"] == pytest.approx(trained.metrics["perplexity"], rel=1e-6)
    assert metrics["mlm_loss"] == pytest.approx(trained.metrics["mlm_loss"], abs=1e-6)
    assert "perplexity_before" not in metrics and _written(tmp_path / "eval")[2] == []


# --- without a model: the label checks and what prepare is told ----------------------------------------

def test_a_list_of_labels_for_a_single_label_model_is_refused():
    from jobs.predict.evaluate import check_classification_labels

    records = [{"text": "a", "label": "pos"}, {"text": "b", "label": ["pos", "neg"]}]
    with pytest.raises(DataValidationError, match=r"test.jsonl:2, column 'label'.*list of labels"):
        check_classification_labels(records, [("test.jsonl", 1), ("test.jsonl", 2)], ["neg", "pos"], False)
    check_classification_labels(records, [("test.jsonl", 1), ("test.jsonl", 2)], ["neg", "pos"], True)


def test_qa_abstains_when_the_run_did_or_the_test_set_asks(tmp_path):
    """A SQuAD v2 run (its tables split has_answer/no_answer) keeps "no answer" on a test set without any."""
    from jobs.predict.evaluate import evaluation_hp

    answered = qa_records(2)
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    hp = {"max_length": 48, "doc_stride": 16, "max_answer_length": 30}
    assert evaluation_hp("question-answering", hp, None, answered, str(run / "model"))["allow_null"] is False
    unanswered = [{**answered[0], "answers": {"text": [], "answer_start": []}}]
    assert evaluation_hp("question-answering", hp, None, unanswered, str(run / "model"))["allow_null"] is True
    (run / "tables.json").write_text(json.dumps({"by_kind": {"has_answer": {"count": 3}}}))
    assert evaluation_hp("question-answering", hp, None, answered, str(run / "model"))["allow_null"] is True
    assert "allow_null" not in hp  # the run's own hyper-parameters are left as they were
