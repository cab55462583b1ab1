"""Prediction and evaluation jobs on the queue: the runs.kind column, the submit checks, the worker's dispatch
through ``jobs.process.run_job.execute`` and the views of ``workbench.services.predictions``.

The jobs' work is done by the functions of ``tests.predict_support`` (a prediction through the real chunked
writer with a torch-free predictor); everything around it (claim, lease, rows as progress, cancel, failure,
artifacts) is the real code, on SQLite and on PostgreSQL.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sqlalchemy import insert, inspect, select

from jobs.predict.inputs import iter_rows, open_input
from jobs.predict.spec import PredictSpec
from jobs.queue.worker import Worker
from storage.db import make_engine, upgrade
from storage.models import CANCELLED, FAILED, QUEUED, RUNNING, SUCCEEDED, Artifact, Run
from tests.predict_support import (LABELS, JobRunner, Jobs, drain, job_count, labelled_jsonl, reviews_csv,
                                   trained_run)
from tests.queue_support import backend_url, fake_spec, qwb, wait_until  # noqa: F401
from tests.test_sweep_budget_migration import _downgrade
from workbench.errors import ConfigError, DataValidationError, InvalidState, NotFound
from workbench.services import datasets, predictions, runs


# -- the column ---------------------------------------------------------------------------------------------

@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine_at_0006(request, tmp_path):
    with backend_url(request.param, tmp_path) as url:
        engine = make_engine(url)
        upgrade(engine, "0006_sweep_trial_budget")
        yield engine
        engine.dispose()


def test_migration_adds_kind_and_existing_runs_are_training_runs(engine_at_0006):
    engine = engine_at_0006
    with engine.begin() as c:
        old = c.execute(insert(Run.__table__).values(task="text-classification", model="m", spec={})
                        .returning(Run.id)).scalar_one()
    upgrade(engine)
    assert "ix_runs_parent_kind" in {ix["name"] for ix in inspect(engine).get_indexes("runs")}
    with engine.begin() as c:
        assert c.execute(select(Run.kind).where(Run.id == old)).scalar_one() == "train"
        job = c.execute(insert(Run.__table__).values(task="text-classification", model="m", spec={}, kind="predict",
                                                     parent_run_id=old).returning(Run.id)).scalar_one()
    _downgrade(engine, "0006_sweep_trial_budget")  # older code cannot read a job: it goes, the model's run stays
    assert "kind" not in {col["name"] for col in inspect(engine).get_columns("runs")}
    upgrade(engine)
    with engine.begin() as c:
        assert c.execute(select(Run.id, Run.kind)).all() == [(old, "train")]
        assert job != old


# -- submitting ---------------------------------------------------------------------------------------------

def _kept_files(wb) -> set[Path]:
    return set(predictions.inputs_dir(wb).rglob("*"))


def _refused(wb, error, match, call) -> None:
    """``call`` raises ``error`` matching ``match``, queues no job and keeps no copy of the input."""
    jobs, kept = job_count(wb), _kept_files(wb)
    with pytest.raises(error, match=match):
        call()
    assert (job_count(wb), _kept_files(wb)) == (jobs, kept)


def test_predictions_are_refused_for_runs_without_a_model(wb, tmp_path):
    data = reviews_csv(tmp_path)
    _refused(wb, NotFound, "run 999 does not exist", lambda: predictions.submit_prediction(wb, 999, data))
    failed = trained_run(wb, FAILED, model=False)
    _refused(wb, InvalidState, f"run {failed} failed; only a succeeded run",
             lambda: predictions.submit_prediction(wb, failed, data))
    training = trained_run(wb, RUNNING)
    _refused(wb, InvalidState, f"run {training} is still training; predict once it has succeeded",
             lambda: predictions.submit_prediction(wb, training, data))
    queued = runs.submit_run(wb, fake_spec(wb))
    _refused(wb, InvalidState, f"run {queued} has not started training yet",
             lambda: predictions.submit_evaluation(wb, queued, str(data)))
    no_model = trained_run(wb, model=False)
    _refused(wb, InvalidState, f"run {no_model} has no saved model",
             lambda: predictions.submit_prediction(wb, no_model, data))
    deleted = trained_run(wb)
    runs.delete_run(wb, deleted)
    _refused(wb, NotFound, f"run {deleted} does not exist \\(it may have been deleted\\)",
             lambda: predictions.submit_prediction(wb, deleted, data))
    good = trained_run(wb)
    job = predictions.submit_prediction(wb, good, data)
    _refused(wb, InvalidState, f"run {job} is a predict job, not a training run; use the run whose model it used "
             f"\\(run {good}\\)", lambda: predictions.submit_prediction(wb, job, data))


def test_bad_files_are_refused_with_file_and_line_before_anything_is_queued(wb, tmp_path):
    run_id = trained_run(wb)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    _refused(wb, DataValidationError, "empty.csv: error: the file is empty",
             lambda: predictions.submit_prediction(wb, run_id, empty))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n")
    _refused(wb, DataValidationError, "blank.txt: error: the file has no text in it",
             lambda: predictions.submit_prediction(wb, run_id, blank))
    no_text = tmp_path / "numbers.csv"
    no_text.write_text("id,score,stars\n1,0.5,3\n")
    _refused(wb, DataValidationError, "numbers.csv:1: error: missing column: no text column found "
             "\\(columns: 'id', 'score', 'stars'\\)", lambda: predictions.submit_prediction(wb, run_id, no_text))
    data = reviews_csv(tmp_path)
    _refused(wb, DataValidationError, "reviews.csv:1, column 'body': error: missing column: the text column 'body' "
             "is not in the file", lambda: predictions.submit_prediction(wb, run_id, data, columns={"text": "body"}))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('\n{"text": "fine"\n')
    _refused(wb, DataValidationError, "broken.jsonl:2: error: broken JSON on line 2",
             lambda: predictions.submit_prediction(wb, run_id, broken))
    binary = tmp_path / "sheet.csv"
    binary.write_bytes(b"PK\x03\x04" + bytes(100))
    _refused(wb, DataValidationError, "this is not a text file", lambda: predictions.submit_prediction(wb, run_id,
                                                                                                       binary))
    _refused(wb, ConfigError, "reviews.csv: a CoNLL file .* does not fit a text-classification run",
             lambda: predictions.submit_prediction(wb, run_id, data, input_format="conll"))
    _refused(wb, ConfigError, "unknown column role 'txt'", lambda: predictions.submit_prediction(
        wb, run_id, data, columns={"txt": "text"}))
    _refused(wb, ConfigError, "output_format must be one of", lambda: predictions.submit_prediction(
        wb, run_id, data, output_format="xlsx"))
    _refused(wb, NotFound, "no such file", lambda: predictions.submit_prediction(wb, run_id, tmp_path / "nope.csv"))


def test_an_evaluation_on_a_dataset_of_another_task_is_refused(wb, tmp_path):
    run_id = trained_run(wb)
    conll = tmp_path / "ner.conll"
    conll.write_text("".join(f"Paris{i} B-LOC\nis O\nnice O\n\n" for i in range(12)))
    ner = datasets.import_dataset(wb, conll, "token-classification", tokenizer=False)
    _refused(wb, ConfigError, f"dataset {ner.id} \\(ner\\) is a token-classification dataset; the run is a "
             "text-classification run", lambda: predictions.submit_evaluation(wb, run_id, ner.id))
    _refused(wb, NotFound, "no dataset 'nothing-here'", lambda: predictions.submit_evaluation(wb, run_id,
                                                                                               "nothing-here"))


# -- running ------------------------------------------------------------------------------------------------

def test_a_prediction_job_runs_on_the_worker_and_keeps_its_output(qwb, tmp_path):
    run_id = trained_run(qwb)
    data = reviews_csv(tmp_path / "mine", rows=5)
    job_id = predictions.submit_prediction(qwb, run_id, data, output_format="csv")
    kept = Path(runs.get_run(qwb, job_id)["spec"]["input_path"])
    assert kept.is_relative_to(predictions.inputs_dir(qwb)) and kept.name == "reviews.csv"
    data.write_text("id,text\n")  # the user's file changes: the job reads its own copy
    queued = predictions.list_jobs(qwb, run_id=run_id)
    assert [(j["id"], j["kind"], j["status"], j["input_name"], j["outputs"]) for j in queued] == \
        [(job_id, "predict", QUEUED, "reviews.csv", [])]
    assert predictions.job_outputs(qwb, job_id) == []
    jobs = Jobs()
    drain(qwb, jobs, job_id)
    [call] = jobs.calls
    assert call["model"].labels == LABELS and call["model"].hyperparameters == {"max_length": 64}
    assert call["model"].model_dir == str(Path(runs.get_run(qwb, run_id)["output_dir"]) / "model")
    assert call["spec"].columns == {} and call["spec"].input_format == "csv"
    [job] = predictions.list_jobs(qwb, kind="predict")
    assert (job["status"], job["rows_done"], job["rows_total"], job["metrics"]["rows"], job["parent_run_id"]) == \
        (SUCCEEDED, 5, 5, 5, run_id)
    assert job["rows_per_second"] > 0 and job["eta_seconds"] == 0.0
    [output] = predictions.job_outputs(qwb, job_id)
    assert job["outputs"] == [str(output)] and output.name == "predictions.csv"
    rows = list(csv.DictReader(output.open()))
    assert [(r["id"], r["predicted_label"]) for r in rows] == \
        [("0", "short"), ("1", "long"), ("2", "short"), ("3", "long"), ("4", "short")]
    with qwb.db.session() as session:
        kinds = session.scalars(select(Artifact.kind).where(Artifact.run_id == job_id)).all()
    assert kinds == ["predictions"]
    assert [r["id"] for r in runs.list_runs(qwb, kind="predict")] == [job_id]
    assert [r["kind"] for r in runs.list_runs(qwb, order_by="id")] == ["train", "predict"]
    assert runs.get_run(qwb, job_id)["kind"] == "predict"


def test_evaluations_store_metrics_per_test_set(qwb, tmp_path):
    first, second = trained_run(qwb), trained_run(qwb)
    data = labelled_jsonl(tmp_path)
    job_id = predictions.submit_evaluation(qwb, first, str(data))
    jobs = Jobs()
    drain(qwb, jobs, job_id)
    dataset_id = predictions.get_job(qwb, job_id)["dataset_id"]
    assert jobs.calls[0]["records"] == [str(datasets.dataset_files(qwb, dataset_id)[0])]
    # the model run's spec, its data resolved: the test set's baselines are fitted on its training split
    assert Path(jobs.calls[0]["model"].run_spec["data"]["train_path"]).is_file()
    assert datasets.get_dataset(qwb, dataset_id).validation == 0  # the whole file is the test set
    job = predictions.get_job(qwb, job_id)
    assert job["status"] == SUCCEEDED and job["metrics"] == {"accuracy": 1.0, "examples": 20}
    assert [p.name for p in predictions.job_outputs(qwb, job_id)] == ["predictions.jsonl", "metrics.json",
                                                                       "tables.json"]
    # the same file again is the same test set; several runs at once; the first run's evaluation is reused
    more = predictions.evaluate_runs(qwb, [first, second], str(data))
    assert more[0] == job_id and predictions.get_job(qwb, more[1])["dataset_id"] == dataset_id
    assert predictions.test_sets(qwb) == [{"dataset_id": dataset_id, "name": "test", "task": "text-classification",
                                           "evaluations": 2}]
    assert predictions.test_sets(qwb, task="token-classification") == []
    rows = predictions.evaluations_on(qwb, dataset_id)
    assert [(r["id"], r["run_id"], r["run_name"], r["status"]) for r in rows] == \
        [(job_id, first, "sentiment", SUCCEEDED), (more[1], second, "sentiment", QUEUED)]
    assert rows[0]["metrics"]["accuracy"] == 1.0
    with pytest.raises(InvalidState, match="is a training run"):
        predictions.job_outputs(qwb, first)


def test_a_test_file_is_scored_as_given_with_its_duplicates_while_training_data_drops_them(wb, tmp_path):
    """300 rows of which 3 repeat an earlier one: an evaluation scores all 300 and says so; the same file
    stored as training data drops the 3, as it always did (and is another dataset: other import options)."""
    from jobs.predict.test_facts import import_duplicates

    run_id = trained_run(wb)
    data = labelled_jsonl(tmp_path, rows=297)
    with data.open("a") as handle:  # rows 1, 2 and 3 again, at the end
        handle.writelines(data.read_text().splitlines(keepends=True)[1:4])
    job_id = predictions.submit_evaluation(wb, run_id, str(data))
    jobs = Jobs()
    drain(wb, jobs, job_id)
    [records] = jobs.calls[0]["records"]
    assert len(Path(records).read_text().splitlines()) == 300  # the job reads every row of the file
    assert import_duplicates([records]) == {"duplicates": 3, "duplicates_dropped": 0}
    test_set = datasets.get_dataset(wb, predictions.get_job(wb, job_id)["dataset_id"])
    assert (test_set.train, test_set.validation, test_set.stats["details"]["duplicates_kept"]) == (300, 0, 3)
    assert "test.jsonl:298: warning: duplicate of line 2; kept and scored: a test set is scored as given" \
        in test_set.warnings[0]
    training = datasets.import_dataset(wb, data, "text-classification", validation_fraction=0.0, tokenizer=False)
    assert training.id != test_set.id and (training.train, training.validation) == (297, 0)
    assert training.stats["details"]["duplicates_dropped"] == 3 and "duplicates_kept" not in training.stats["details"]
    assert "keep_duplicates" not in training.stats["options"]  # a training upload's address is what it was


def test_evaluate_runs_checks_every_run_before_queueing_any(wb, tmp_path):
    good, running = trained_run(wb), trained_run(wb, RUNNING)
    with pytest.raises(InvalidState, match=f"run {running} is still training"):
        predictions.evaluate_runs(wb, [good, running], str(labelled_jsonl(tmp_path)))
    assert job_count(wb) == 0


def test_a_cancelled_prediction_stops_and_a_retry_queues_it_again(qwb, tmp_path):
    run_id = trained_run(qwb)
    job_id = predictions.submit_prediction(qwb, run_id, reviews_csv(tmp_path, rows=400))
    worker = Worker(qwb, JobRunner(qwb, Jobs(delay=0.02)), gpus=[])
    assert wait_until(lambda: runs.get_run(qwb, job_id)["step"] > 0, timeout=30, step=worker.loop_once)
    assert runs.cancel_run(qwb, job_id) == "cancelling"
    assert wait_until(lambda: runs.get_run(qwb, job_id)["status"] == CANCELLED, timeout=30, step=worker.loop_once)
    worker.shutdown()
    assert predictions.job_outputs(qwb, job_id) == []
    assert not (Path(runs.get_run(qwb, job_id)["output_dir"]) / "predictions.csv").exists()
    with pytest.raises(InvalidState, match=f"cannot clone run {job_id}: it is a predict job"):
        runs.clone_run(qwb, job_id)
    assert runs.retry_run(qwb, job_id) == job_id
    drain(qwb, Jobs(), job_id)
    assert predictions.get_job(qwb, job_id)["metrics"]["rows"] == 400


def test_a_failing_job_records_its_sentence(qwb, tmp_path):
    run_id = trained_run(qwb)
    job_id = predictions.submit_prediction(qwb, run_id, reviews_csv(tmp_path))
    drain(qwb, Jobs(fail="the tokenizer cannot read row 3"), job_id)
    job = predictions.get_job(qwb, job_id)
    assert job["status"] == FAILED and "the tokenizer cannot read row 3" in job["error"]
    assert job["outputs"] == [] and predictions.job_outputs(qwb, job_id) == []


def test_a_job_whose_model_is_gone_fails_with_a_sentence(wb, tmp_path):
    run_id = trained_run(wb)
    job_id = predictions.submit_prediction(wb, run_id, reviews_csv(tmp_path))
    with pytest.raises(InvalidState, match=f"run {run_id}'s model is used by queued or running job\\(s\\) {job_id}"):
        runs.delete_run(wb, run_id)
    model_dir = Path(runs.get_run(wb, run_id)["output_dir"]) / "model"
    (model_dir / "config.json").unlink()
    model_dir.rmdir()
    jobs = Jobs()
    drain(wb, jobs, job_id)
    job = predictions.get_job(wb, job_id)
    assert job["status"] == FAILED and job["error"].startswith(f"run {run_id} has no saved model")
    assert jobs.calls == []
    runs.delete_run(wb, run_id)
    with pytest.raises(InvalidState, match=f"run {run_id}, whose model it uses, was deleted"):
        runs.retry_run(wb, job_id)


# -- pairs of texts, and the kept inputs ----------------------------------------------------------------------

def _validated_on(wb, run_id: int, *records: dict) -> None:
    """The run's validation predictions, as the engine writes them beside the model folder."""
    out = Path(runs.get_run(wb, run_id)["output_dir"])
    (out / "predictions.jsonl").write_text("".join(json.dumps({**r, "label": "pos", "pred": "pos"}) + "\n"
                                                   for r in records))


def test_a_pair_run_needs_its_second_text_and_a_single_text_run_reads_none(wb, tmp_path):
    pair_run, single_run = trained_run(wb), trained_run(wb)
    _validated_on(wb, pair_run, {"text": "a man sleeps", "text_pair": "a person rests"})
    _validated_on(wb, single_run, {"text": "a good film"})
    texts = reviews_csv(tmp_path)
    _refused(wb, DataValidationError, "reviews.csv:1: error: missing column: no text_pair column found \\(columns: "
             "'id', 'text'\\) — the run was trained on pairs of texts", lambda: predictions.submit_prediction(
                 wb, pair_run, texts))
    lines = tmp_path / "lines.txt"
    lines.write_text("a man sleeps\n")
    _refused(wb, ConfigError, "lines.txt: a TXT file holds one text per line, and the run was trained on pairs",
             lambda: predictions.submit_prediction(wb, pair_run, lines))
    both = tmp_path / "pairs.csv"
    both.write_text("premise,hypothesis\na man sleeps,a person rests\n")
    _refused(wb, DataValidationError, "no text_pair column found", lambda: predictions.submit_prediction(
        wb, pair_run, both, columns={"text": "premise"}))
    job = predictions.submit_prediction(wb, pair_run, both, columns={"text": "premise", "text_pair": "hypothesis"})
    spec = PredictSpec.from_dict(runs.get_run(wb, job)["spec"])
    assert spec.pairs is True
    assert open_input(spec, "text-classification").mapping == {"text": "premise", "text_pair": "hypothesis"}

    # a single-text run given a file with a second-text column reads the first text only
    detected = tmp_path / "detected.csv"
    detected.write_text("text,text_pair\na man sleeps,a person rests\n")
    job = predictions.submit_prediction(wb, single_run, detected)
    spec = PredictSpec.from_dict(runs.get_run(wb, job)["spec"])
    assert spec.pairs is False
    source = open_input(spec, "text-classification")
    assert source.mapping == {"text": "text"} and source.columns == ("text", "text_pair")
    assert [row.features for row in iter_rows(source)] == [{"text": "a man sleeps"}]
    _refused(wb, ConfigError, "the run was trained on single texts; it does not read a second text, so the column "
             "'text_pair'", lambda: predictions.submit_prediction(wb, single_run, detected,
                                                                   columns={"text_pair": "text_pair"}))

    # the job checks again: a spec queued for a pair model, on a file without the second text
    with pytest.raises(DataValidationError, match="trained on pairs of texts"):
        open_input(PredictSpec(kind="predict", run_id=pair_run, input_path=str(texts), pairs=True),
                   "text-classification")


def test_a_kept_input_goes_with_the_last_prediction_job_that_reads_it(wb, tmp_path):
    run_id = trained_run(wb)
    data = reviews_csv(tmp_path)
    first = predictions.submit_prediction(wb, run_id, data)
    second = predictions.submit_prediction(wb, run_id, data)
    other = predictions.submit_prediction(wb, run_id, reviews_csv(tmp_path, "other.csv", rows=7))
    kept = {i: Path(runs.get_run(wb, i)["spec"]["input_path"]) for i in (first, second, other)}
    assert kept[first] == kept[second] != kept[other] and all(p.is_file() for p in kept.values())
    data.unlink()  # the user's own file may go: the job reads its kept copy
    for job in (first, second, other):
        runs.cancel_run(wb, job)
    runs.delete_run(wb, first)
    assert kept[first].is_file()  # the second job still reads the same bytes
    runs.delete_run(wb, second)
    assert not kept[first].exists() and not kept[first].parent.exists()
    assert kept[other].is_file()
    runs.delete_run(wb, other)
    assert list(predictions.inputs_dir(wb).iterdir()) == []
    # a spec naming a file outside the kept inputs never makes the server delete it
    outside = reviews_csv(tmp_path, "mine.csv")
    assert not predictions.forget_input(wb, outside) and outside.is_file()


def test_a_test_set_label_the_model_does_not_know_is_refused_before_queueing_and_leaves_no_dataset(wb, tmp_path):
    run_id = trained_run(wb)  # knows neg and pos
    hedges = tmp_path / "hedges.csv"
    rows = [("a good film", "pos"), ("a bad film", "neg"), ("a film, perhaps", "maybe"), ("so good", "pos"),
            ("hard to say", "maybe"), ("awful", "neg")]
    hedges.write_text("text,label\n" + "".join(f'"{t}",{l}\n' for t, l in rows))
    for call in (lambda: predictions.submit_evaluation(wb, run_id, str(hedges)),
                 lambda: predictions.evaluate_runs(wb, [run_id], str(hedges))):
        with pytest.raises(DataValidationError) as refused:
            call()
        # the user's file and line (the header is line 1), not the stored copy's train.jsonl
        assert "hedges.csv:4, column 'label': error: label 'maybe' (2 records) is not one the model was trained " \
               "on; it knows 'neg', 'pos'" in str(refused.value)
        assert "train.jsonl" not in str(refused.value)
        assert job_count(wb) == 0 and datasets.list_datasets(wb) == []
        assert not any(wb.settings.datasets_dir.iterdir())
    # a stored dataset picked as the test set is refused the same way, and stays
    stored = datasets.import_dataset(wb, hedges, "text-classification", validation_fraction=0.0, tokenizer=False)
    with pytest.raises(DataValidationError, match="hedges.csv:4, column 'label': error: label 'maybe'"):
        predictions.submit_evaluation(wb, run_id, stored.id, files=False)
    assert job_count(wb) == 0 and [d.id for d in datasets.list_datasets(wb)] == [stored.id]


def test_a_column_of_numbers_is_never_read_as_the_text_and_the_column_read_is_named(wb, tmp_path):
    run_id = trained_run(wb)
    scores = tmp_path / "scores.csv"
    scores.write_text("score,label\n" + "".join(f"{i * 0.5},pos\n" for i in range(8)) + "n/a,neg\n")
    _refused(wb, DataValidationError, "scores.csv:1, column 'score': error: the column 'score', which would be read "
             "as the text \\(no column is named 'text'\\), holds numbers in 8 of 9 rows, not text",
             lambda: predictions.submit_prediction(wb, run_id, scores))
    spec = PredictSpec(kind="predict", run_id=run_id, input_path=str(scores))
    with pytest.raises(DataValidationError, match="holds numbers in 8 of 9 rows"):  # the job's own reading
        open_input(spec, "text-classification")
    jsonl = tmp_path / "scores.jsonl"
    jsonl.write_text("".join(json.dumps({"amount": i, "label": "pos"}) + "\n" for i in range(3)))
    _refused(wb, DataValidationError, "scores.jsonl:1, column 'amount': error: the key 'amount'",
             lambda: predictions.submit_prediction(wb, run_id, jsonl))
    # named by the user, the column is read as asked
    named = predictions.submit_prediction(wb, run_id, scores, columns={"text": "score"})
    assert predictions.get_job(wb, named)["reads"] == {"text": "score"}
    # a column the reader picked (no column is named text) is named in the job
    reviews = tmp_path / "reviews.csv"
    reviews.write_text("review,label\na fine film,pos\nnot good,neg\n")
    job_id = predictions.submit_prediction(wb, run_id, reviews)
    assert predictions.get_job(wb, job_id)["reads"] == {"text": "review"}
    assert predictions.reads_text({"text": "review"}) == "text from the column 'review'"
    source = open_input(PredictSpec(kind="predict", run_id=run_id, input_path=str(reviews)), "text-classification")
    assert any("the text is read from the column 'review'" in w for w in source.warnings)
