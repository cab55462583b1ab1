"""Issue 23 in the UI, as plain functions on real SQLite: the run page's Predict tab, prediction and evaluation
jobs in the Runs table and their details, and the Compare tab's test sets."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from jobs.process import fake_runner
from jobs.process.fake_runner import InProcessRunner
from jobs.queue.worker import Worker
from storage.datasets.lookup import dataset_files
from storage.models import Run
from tests.queue_support import fake_spec, wait_until
from tests.tiny_models import classification_records, write_jsonl
from workbench.services import datasets
from workbench.services import predictions as predict_service
from workbench.services import runs as runs_service
from workbench.ui import compare_tab, predict_panel, runs_tab
from workbench.ui import format as fmt

TICKETS = "text,channel\nmy order never arrived,mail\n\"thanks, all good now\",chat\nrefund please,mail\n"


@pytest.fixture
def uploads(tmp_path, monkeypatch) -> Path:
    """Gradio's upload folder for this test: only files in it count as uploaded (workbench.ui.uploads)."""
    folder = tmp_path / "uploads"
    (folder / "a1b2").mkdir(parents=True)
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    return folder


def uploaded(folder: Path, name: str, text: str) -> str:
    path = folder / "a1b2" / name
    path.write_text(text)
    return str(path)


def run_queue(wb, done) -> None:
    worker = Worker(wb, InProcessRunner(wb), max_jobs=1, gpus=[])
    assert wait_until(done, 30, worker.loop_once)


def trained_run(wb, name: str = "model") -> int:
    """A succeeded training run (the fake runner: a model folder and accuracy 1.0)."""
    run_id = runs_service.submit_run(wb, fake_spec(wb, name=name))
    run_queue(wb, lambda: runs_service.get_run(wb, run_id)["status"] == "succeeded")
    return run_id


def stored_test_set(wb, tmp_path) -> str:
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(20, seed=3))]
    return datasets.import_dataset(wb, write_jsonl(tmp_path / "test.jsonl", records), "text-classification",
                                   name="held-out").id


def finish_by_hand(wb, job_id: int, metrics: dict, tables: dict | None = None, predictions=()) -> None:
    """Mark a queued evaluation succeeded with the files an evaluation writes (what the Metrics views read)."""
    with wb.db.session() as session:
        job = session.get(Run, job_id)
        out = Path(job.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps(metrics))
        (out / "tables.json").write_text(json.dumps(tables or {}))
        (out / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
        job.status, job.progress, job.metrics = "succeeded", 1.0, metrics


def test_a_job_row_counts_rows_not_steps():
    job = {"id": 5, "kind": "predict", "status": "running", "task": "text-classification", "parent_run_id": 2,
           "step": 1200, "total_steps": 10000, "rows_per_second": 340, "eta_seconds": 26, "input_name": "tickets.csv",
           "model": "minilm", "metrics": {}}
    row = fmt.run_row(job)
    assert row[1:3] == ["prediction job #5 of run #2", "predict"]
    assert row[4] == "rows 1,200 / 10,000 · 340 rows/s · ETA 26s" and row[5] == "26s"
    assert row[8] == "tickets.csv"
    # Without a measured rate it is what the rows left and the ETA imply; queued jobs wait.
    assert fmt.job_progress_text({**job, "rows_per_second": None}) == "rows 1,200 / 10,000 · 338 rows/s · ETA 26s"
    assert fmt.run_row({**job, "status": "queued", "step": 0, "total_steps": None})[4:6] == ["rows 0", "waiting"]
    assert fmt.run_row({"id": 1, "status": "succeeded", "task": "text-classification"})[2] == "train"
    assert fmt.score_text({"entity_f1": 0.5}) == "entity_f1 0.5000" and fmt.score_text({}) == fmt.MISSING
    assert [fmt.rate_text(r) for r in (1204.4, 0.25, None)] == ["1,204", "0.25", fmt.MISSING]


def test_the_predict_tab_says_when_a_run_cannot_predict(wb):
    assert predict_panel.panel_values(wb, None).note == predict_panel.NO_RUN_NOTE
    queued = runs_service.submit_run(wb, fake_spec(wb, name="waiting"))
    values = predict_panel.panel_values(wb, queued)
    assert not values.can_predict and f"Run #{queued} is queued" in values.note
    assert "does not exist" in predict_panel.panel_values(wb, 999).note
    message = predict_panel.said(predict_panel.queue_prediction, wb, queued, None, "auto-detect", "", "", "csv")
    assert message.startswith("✘") and "only a succeeded training run" in message
    # The run page's timer shows the forms once the run has finished training, and skips while nothing changes.
    key = predict_panel.on_run(wb, queued)[-1]
    assert predict_panel.on_tick(wb, queued, key)[-1] == key
    run_queue(wb, lambda: runs_service.get_run(wb, queued)["status"] == "succeeded")
    note, forms, *_ = predict_panel.on_tick(wb, queued, key)
    assert note == "" and forms["visible"] is True


def test_predict_a_file_queues_a_job_the_run_page_lists(wb, uploads):
    run_id = trained_run(wb)
    values = predict_panel.panel_values(wb, run_id)
    assert values.can_predict and values.note == "" and values.rows == []
    path = uploaded(uploads, "tickets.csv", TICKETS)
    message = predict_panel.said(predict_panel.queue_prediction, wb, run_id, path, "auto-detect", "text", "",
                                 "jsonl")
    assert message.startswith("✔ Queued prediction job #") and "tickets.csv" in message, message
    job_id = int(message.split("#")[1].split()[0])
    job = runs_service.get_run(wb, job_id)
    assert (job["kind"], job["parent_run_id"], job["status"]) == ("predict", run_id, "queued")
    rows = predict_panel.panel_values(wb, run_id).rows
    assert [r[:3] for r in rows] == [[job_id, "predict", "◷ queued"]] and rows[0][5] == "waiting"
    # The Runs table lists it with its kind; its details are the job's, not a training run's.
    table, _ = runs_tab.list_page(wb)
    assert [r[2] for r in table if r[0] == job_id] == ["predict"]
    view = runs_tab.run_view(wb, job_id)
    assert "data-kind='predict'" in view.header and "tickets.csv" in view.header
    assert view.curves_note == runs_tab.JOB_CURVES_NOTE
    # Selecting the job shows its model run's jobs (and picks the job for download once it has files).
    assert predict_panel.panel_values(wb, job_id).rows == rows
    assert f"of run #{run_id}" in predict_panel.panel_values(wb, job_id).note


def test_refusals_are_shown_with_the_services_sentence(wb, uploads, tmp_path):
    run_id = trained_run(wb)
    said, queue = predict_panel.said, predict_panel.queue_prediction
    assert said(queue, wb, run_id, None, "auto-detect", "", "", "csv").startswith("✘ Upload the file to label")
    secret = tmp_path / "secret.csv"
    secret.write_text(TICKETS)
    forged = said(queue, wb, run_id, str(secret), "auto-detect", "", "", "csv")
    assert "was not uploaded through this page" in forged and str(tmp_path) not in forged.replace(str(secret), "")
    empty = said(queue, wb, run_id, uploaded(uploads, "empty.csv", ""), "auto-detect", "", "", "csv")
    assert empty.startswith("✘") and "empty" in empty.lower(), empty
    missing = said(queue, wb, run_id, uploaded(uploads, "t.csv", TICKETS), "auto-detect", "body", "", "csv")
    assert missing.startswith("✘") and "body" in missing, missing
    assert predict_service.list_jobs(wb, run_id=run_id) == []  # nothing was queued
    nothing = said(predict_panel.queue_evaluation, wb, run_id, None, None, "", "")
    assert nothing == "✘ Pick a stored test set or upload a labelled file."


def test_a_finished_prediction_downloads_its_rows(wb, uploads):
    if not hasattr(fake_runner, "fake_predict"):
        pytest.skip("jobs.process.fake_runner.fake_predict (issue 23's fake prediction) has not landed")
    run_id = trained_run(wb)
    message = predict_panel.queue_prediction(wb, run_id, uploaded(uploads, "tickets.csv", TICKETS), "auto-detect",
                                             "", "", "csv")
    job_id = int(message.split("#")[1].split()[0])
    key = predict_panel.on_run(wb, run_id)[-1]
    run_queue(wb, lambda: runs_service.get_run(wb, job_id)["status"] == "succeeded")
    # The tick offers the job that has just finished for download.
    *_, pick, _ = predict_panel.on_tick(wb, run_id, key, None)
    assert pick["value"] == job_id
    # a pick that is still offered is left alone (a tick answered late must not undo a newer one)
    *_, pick, _ = predict_panel.on_tick(wb, run_id, key, job_id)
    assert "value" not in pick and [v for _, v in pick["choices"]] == [job_id]
    values = predict_panel.panel_values(wb, job_id)
    assert values.picked == job_id and [v for _, v in values.choices] == [job_id]
    assert values.rows[0][3] == "3 / 3"
    files = predict_panel.job_files(wb, job_id)
    output = next(Path(f) for f in files if f.endswith(".csv"))
    with output.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["text"] for r in rows] == ["my order never arrived", "thanks, all good now", "refund please"]
    assert output.name in runs_tab.run_view(wb, job_id).header


def test_an_evaluation_shows_metrics_per_class_confusion_and_errors(wb, tmp_path):
    run_id = trained_run(wb)
    dataset_id = stored_test_set(wb, tmp_path)
    values = predict_panel.panel_values(wb, run_id)
    assert dataset_id in [value for _, value in values.test_sets]
    message = predict_panel.queue_evaluation(wb, run_id, dataset_id, None, "", "")
    assert message.startswith("✔ Queued evaluation job #"), message
    job_id = int(message.split("#")[1].split()[0])
    finish_by_hand(wb, job_id, {"accuracy": 0.75, "f1_macro": 0.7},
                   {"per_class": [{"label": "pos", "precision": 0.8, "recall": 0.7, "f1": 0.75, "support": 10}],
                    "confusion_matrix": {"labels": ["neg", "pos"], "matrix": [[7, 3], [2, 8]]}},
                   [{"text": "not good 3", "gold": "neg", "predicted": "pos", "correct": False, "score": 0.6}])
    view = runs_tab.run_view(wb, job_id)
    assert "evaluation job" in view.header and "held-out" in view.header
    assert ["Accuracy", "0.7500"] in view.final_metrics and view.per_class[0][:4] == ["pos", "0.8000", "0.7000",
                                                                                      "0.7500"]
    assert "gold \\ predicted" in view.confusion and view.errors[0][:3] == ["neg", "pos", "0.6000"]
    rows = predict_panel.panel_values(wb, run_id).rows
    assert rows[0][1] == "evaluate" and rows[0][6] == "accuracy 0.7500"


def test_compare_shows_runs_side_by_side_on_a_test_set(wb, tmp_path):
    first, second = trained_run(wb, "first"), trained_run(wb, "second")
    dataset_id = stored_test_set(wb, tmp_path)
    assert dataset_id in [value for _, value in compare_tab.test_set_choices(wb)]
    with pytest.raises(Exception, match="Pick a test set"):
        compare_tab.evaluate_selected(wb, [first], None)
    message = compare_tab.evaluate_selected(wb, [str(first), str(second)], dataset_id)
    assert message.startswith("✔ Queued 2 evaluation job(s)")
    jobs = [j["id"] for j in predict_service.list_jobs(wb, kind="evaluate")]
    for job_id, accuracy in zip(sorted(jobs), (0.6, 0.9)):
        finish_by_hand(wb, job_id, {"accuracy": accuracy, "eval_seconds": 3.0},
                       {"per_class": [{"label": "pos", "precision": 1, "recall": 1, "f1": accuracy, "support": 4}]})
    result = compare_tab.compare_on_test_set(wb, dataset_id)
    assert len(result.metrics) == 2 and "accuracy" in result.metric_names and "eval_seconds" not in result.metrics
    assert sorted(result.metrics["accuracy"]) == ["0.6000", "0.9000"]
    assert list(result.per_class["Class / entity (F1)"]) == ["pos"]
    assert compare_tab.metric_bars(result.scores, "accuracy").count("class='wb-bar'") == 2
    assert "2 evaluations" in dict((v, k) for k, v in compare_tab.test_set_choices(wb))[dataset_id]


def test_a_test_set_pick_is_never_read_as_a_path_on_the_server(wb, tmp_path):
    """The test-set dropdown's value comes from the browser: a forged value naming a server file must not import
    that file as a dataset (and show its rows), in the run page nor in Compare."""
    run_id = trained_run(wb)
    secret = tmp_path / "secret.jsonl"
    write_jsonl(secret, classification_records(20, seed=5))
    said = predict_panel.said(predict_panel.queue_evaluation, wb, run_id, str(secret), None, "", "")
    assert said.startswith("✘") and "Queued" not in said, said
    with pytest.raises(Exception) as refused:
        compare_tab.evaluate_selected(wb, [run_id], str(secret))
    assert "Queued" not in str(refused.value)
    assert datasets.list_datasets(wb) == [] and predict_service.list_jobs(wb, run_id=run_id) == []


def test_predict_a_stored_dataset_labels_its_records_train_then_validation(wb, tmp_path):
    run_id = trained_run(wb)
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(20, seed=3))]
    dataset_id = datasets.import_dataset(wb, write_jsonl(tmp_path / "reviews.jsonl", records), "text-classification",
                                         name="reviews", validation_fraction=0.25).id
    assert dataset_id in [value for _, value in predict_panel.panel_values(wb, run_id).test_sets]
    # an upload wins over a pick; with no upload the picked dataset is read
    message = predict_panel.said(predict_panel.queue_prediction, wb, run_id, None, "auto-detect", "", "", "csv",
                                 dataset_id)
    assert message.startswith("✔ Queued prediction job #") and f"dataset **reviews** ({dataset_id})" in message, message
    job_id = int(message.split("#")[1].split()[0])
    run_queue(wb, lambda: runs_service.get_run(wb, job_id)["status"] == "succeeded")
    output = next(Path(f) for f in predict_panel.job_files(wb, job_id) if f.endswith(".csv"))
    with output.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    stored = [json.loads(line) for path in dataset_files(wb.db, dataset_id) for line in path.read_text().splitlines()]
    assert len(rows) == len(stored) == 20
    assert [(r["text"], r["label"]) for r in rows] == [(s["text"], s["label"]) for s in stored]
    assert all(r["predicted_label"] for r in rows)
    # the joined file is a kept input like any upload; nothing else is left beside it
    assert [p.name for p in predict_service.inputs_dir(wb).rglob("*") if p.is_file()] == [
        f"reviews-{dataset_id[:8]}.jsonl"]
    # a dataset of another task is refused with a sentence, and nothing is queued
    tags = datasets.import_dataset(wb, write_jsonl(tmp_path / "tags.jsonl", [
        {"tokens": ["Anna", "runs"], "tags": ["B-PER", "O"]}, {"tokens": ["Bob"], "tags": ["B-PER"]}]),
        "token-classification", name="tags").id
    refused = predict_panel.said(predict_panel.queue_prediction, wb, run_id, None, "auto-detect", "", "", "csv", tags)
    assert refused.startswith("✘") and "is a token-classification dataset" in refused, refused


def test_a_finished_evaluations_header_gives_its_test_set_score_with_the_interval():
    from workbench.ui.predict_panel import job_header

    job = {"id": 5, "kind": "evaluate", "status": "succeeded", "task": "text-classification", "parent_run_id": 1,
           "spec": {"dataset_id": "ds-test"}, "name": "evaluate on test",
           "metrics": {"accuracy": 0.9, "rows": 240,
                       "metrics_ci": {"accuracy": {"low": 0.86, "high": 0.94, "level": 0.95, "resamples": 1000}}}}
    header = job_header(job, [])
    assert "Test-set accuracy: <b>0.900 ± 0.040</b>" in header and "95 % CI, n = 240" in header
    assert "run-score" not in job_header({**job, "status": "running"}, [])
    assert "run-score" not in job_header({**job, "kind": "predict"}, [])


def test_an_evaluations_header_says_what_was_scored_duplicates_and_rows_cut_to_the_max_length():
    from workbench.ui.predict_panel import job_header

    job = {"id": 5, "kind": "evaluate", "status": "succeeded", "task": "text-classification", "parent_run_id": 1,
           "spec": {"dataset_id": "ds-test"}, "name": "evaluate on test",
           "metrics": {"accuracy": 0.9, "rows": 300, "duplicates": 3, "duplicates_dropped": 0, "truncated": 5,
                       "max_length": 128}}
    assert ("<p class='wb-muted' id='job-test-set'>300 rows, 3 of them duplicates, all scored · 5 rows longer "
            "than 128 tokens, cut to it</p>") in job_header(job, [])
    # a dataset stored as training data and picked as the test set: what its import dropped is said
    dropped = {**job["metrics"], "rows": 297, "duplicates_dropped": 3, "truncated": 0}
    del dropped["duplicates"]
    assert ("297 rows scored; 3 duplicate rows were dropped when the dataset was stored · no row longer than "
            "128 tokens") in job_header({**job, "metrics": dropped}, [])
    assert "job-test-set" not in job_header({**job, "metrics": {"accuracy": 0.9, "rows": 300}}, [])


def test_evaluating_runs_again_on_the_same_test_set_reuses_their_evaluations(wb, tmp_path):
    first, second = trained_run(wb, "first"), trained_run(wb, "second")
    dataset_id = stored_test_set(wb, tmp_path)
    assert compare_tab.evaluate_selected(wb, [first], dataset_id).startswith("✔ Queued 1 evaluation job(s)")
    [done] = [j["id"] for j in predict_service.list_jobs(wb, kind="evaluate")]
    finish_by_hand(wb, done, {"accuracy": 0.8})
    message = compare_tab.evaluate_selected(wb, [first, second], dataset_id)
    assert "Queued 1 evaluation job(s)" in message and f"not scored again: run #{first} (job #{done})" in message
    jobs = predict_service.list_jobs(wb, kind="evaluate")
    assert sorted(j["parent_run_id"] for j in jobs) == [first, second]  # one each: the first run's was reused
    assert predict_service.submit_evaluation(wb, first, dataset_id, files=False) == done


def test_a_run_is_never_ranked_against_its_own_second_evaluation(wb, tmp_path, monkeypatch):
    from jobs.queue import table as queue

    first, second = trained_run(wb, "first"), trained_run(wb, "second")
    dataset_id = stored_test_set(wb, tmp_path)
    # two evaluations of the first run on the same test set, as older versions queued them
    ids = [queue.submit_job(wb.db, "evaluate", {"kind": "evaluate", "run_id": run, "dataset_id": dataset_id},
                            wb.settings.runs_dir, parent_run_id=run, task="text-classification", model="m",
                            dataset_id=dataset_id) for run in (first, first, second)]
    for job_id, accuracy in zip(ids, (0.6, 0.6, 0.9)):
        finish_by_hand(wb, job_id, {"accuracy": accuracy})
    ranked = []
    monkeypatch.setattr(compare_tab, "significance", lambda wb_, job_ids, names, pair=True: ranked.append(job_ids)
                        or "")
    compare_tab.compare_on_test_set(wb, dataset_id)
    assert ranked == [[ids[1], ids[2]]]  # the first run once (its newest evaluation), against the second


def test_the_dataset_a_run_trained_on_is_no_test_set_for_it(wb, tmp_path):
    from jobs.specs.run import DataSpec, RunSpec

    dataset_id = stored_test_set(wb, tmp_path)
    spec = RunSpec(task="text-classification", data=DataSpec(dataset_id=dataset_id), model="fake:succeed",
                   name="on held-out")
    run_id = runs_service.submit_run(wb, spec)
    run_queue(wb, lambda: runs_service.get_run(wb, run_id)["status"] == "succeeded")
    label = dict((v, k) for k, v in compare_tab.test_set_choices(wb))[dataset_id]
    assert label.endswith(f"⚠ trained on by run #{run_id}")
    other = trained_run(wb, "other")
    with pytest.raises(Exception, match=f"is the dataset run {run_id} trained on: its examples were seen in "
                                        "training"):
        compare_tab.evaluate_selected(wb, [other, run_id], dataset_id)
    with pytest.raises(Exception, match="seen in training"):
        predict_service.submit_evaluation(wb, run_id, dataset_id, files=False)
    assert predict_service.list_jobs(wb, kind="evaluate") == []


def test_a_file_uploaded_to_evaluate_is_a_test_set_the_train_tab_does_not_preselect(wb, tmp_path, uploads):
    from workbench.ui import train_tab

    training = datasets.import_dataset(wb, write_jsonl(tmp_path / "train.jsonl", classification_records(20)),
                                       "text-classification", name="train", tokenizer=False)
    run_id = trained_run(wb)
    hedges = uploaded(uploads, "hedges_test.jsonl", "".join(
        json.dumps({**r, "text": f"{r['text']} held out {i}"}) + "\n" for i, r in enumerate(classification_records(20))))
    message = predict_panel.queue_evaluation(wb, run_id, None, str(hedges), "", "")
    assert message.startswith("✔ Queued evaluation job")
    [test_set] = [d for d in datasets.list_datasets(wb) if d.name == "hedges_test"]
    assert test_set.test_set and not datasets.get_dataset(wb, training.id).test_set
    choices = train_tab.dataset_choices(wb, "text-classification")
    # the test set is newest, yet listed last, labelled, and never the one preselected
    assert [value for _, value in choices] == [training.id, test_set.id]
    assert choices[1][0].startswith("⚠ test set · hedges_test · 20 examples")
    assert train_tab.preselected(choices) == training.id
    assert train_tab.preselected(choices[1:]) is None  # only test sets: none preselected
    assert train_tab.preselected(choices, test_set.id) == test_set.id  # picked by hand (clone, Data → Train)
    assert "is a test set: runs were evaluated on it" in datasets.test_set_warning(wb, test_set.id)
    assert datasets.test_set_warning(wb, training.id) == ""
