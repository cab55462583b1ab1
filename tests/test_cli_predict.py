"""The CLI contract of `workbench predict` and `workbench evaluate`, and the jobs in `workbench runs list|show`.

``--wait`` with no live worker runs the job in the command's own process. The fast tests hand that
in-process worker the job functions of ``tests.predict_support`` (a prediction through the real chunked
writer, with a torch-free predictor); the end-to-end test trains a tiny model and predicts with it for real.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from storage.models import FAILED, QUEUED, RUNNING, SUCCEEDED
from tests.predict_support import JobRunner, Jobs, labelled_jsonl, reviews_csv, trained_run
from tests.tiny_models import classification_records, tiny_bert, write_jsonl
from workbench.services import datasets, predictions, runs
from workbench.services import workers as workers_service


@pytest.fixture
def in_process_jobs(monkeypatch):
    """The worker that `--wait` starts when none is alive runs its job with ``Jobs`` functions."""
    work = Jobs()
    real = workers_service.start_embedded_worker  # the seam the CLI's --wait starts a worker through

    def start(wb, runner=None, **kwargs):
        return real(wb, JobRunner(wb, work), **kwargs)

    monkeypatch.setattr(workers_service, "start_embedded_worker", start)
    return work


def test_predict_queues_and_prints_its_id(cli, wb, tmp_path):
    run_id = trained_run(wb)
    data = reviews_csv(tmp_path)
    code, out, err = cli("predict", str(run_id), "--input", str(data), "--json")
    assert code == 0, err
    queued = json.loads(out)
    assert queued == {"id": queued["id"], "status": QUEUED, "rows": 0, "output": None, "error": None}
    job = predictions.get_job(wb, queued["id"])
    assert (job["kind"], job["parent_run_id"], job["input_name"], job["output_format"]) == \
        ("predict", run_id, "reviews.csv", "csv")
    code, out, _ = cli("predict", str(run_id), "--input", str(data), "--format", "jsonl", "--text-column", "text")
    assert code == 0 and predictions.get_job(wb, int(out))["output_format"] == "jsonl"
    assert runs.get_run(wb, int(out))["spec"]["columns"] == {"text": "text"}


def test_predict_wait_without_a_worker_runs_in_process_and_writes_the_output(cli, wb, tmp_path, in_process_jobs):
    run_id = trained_run(wb)
    target = tmp_path / "out" / "labelled.csv"
    code, out, err = cli("predict", str(run_id), "--input", str(reviews_csv(tmp_path, rows=7)), "--output",
                         str(target), "--json")
    assert code == 0, err
    assert "prediction job" in err and "in this process" in err
    final = json.loads(out)
    assert (final["status"], final["rows"], final["output"], final["error"]) == (SUCCEEDED, 7, str(target), None)
    rows = list(csv.DictReader(target.open()))
    assert [r["predicted_label"] for r in rows] == ["short", "long"] * 3 + ["short"]
    assert not list(target.parent.glob(".*"))  # no partial copy left behind
    # --format jsonl, --wait into a folder
    code, out, err = cli("predict", str(run_id), "--input", str(reviews_csv(tmp_path)), "--format", "jsonl",
                         "--output", str(target.parent), "--wait")
    assert code == 0, err
    assert out.splitlines()[-1].endswith(f"5 row(s) -> {target.parent / 'predictions.jsonl'}")
    assert len((target.parent / "predictions.jsonl").read_text().splitlines()) == 5


def test_predict_errors_are_one_line_with_the_exit_code(cli, wb, tmp_path):
    data = reviews_csv(tmp_path)
    code, _, err = cli("predict", "999", "--input", str(data))
    assert code == 3 and err.startswith("error: run 999 does not exist")
    code, _, err = cli("predict", "abc", "--input", str(data))
    assert code == 3 and "run 'abc' does not exist" in err
    training = trained_run(wb, RUNNING)
    code, _, err = cli("predict", str(training), "--input", str(data))
    assert (code, err) == (4, f"error: run {training} is still training; predict once it has succeeded\n")
    run_id = trained_run(wb)
    code, _, err = cli("predict", str(run_id), "--input", str(data), "--text-column", "body")
    assert code == 2 and err.startswith("reviews.csv:1, column 'body': error: missing column: the text column "
                                        "'body' is not in the file") and len(err.splitlines()) == 1
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    code, _, err = cli("predict", str(run_id), "--input", str(empty))
    assert code == 2 and err.startswith("empty.csv: error: the file is empty")
    code, _, err = cli("predict", str(run_id), "--input", str(data), "--format", "xlsx")
    assert code == 2 and "output_format must be one of csv, jsonl, parquet" in err
    assert predictions.list_jobs(wb) == []


def test_a_failed_prediction_exits_1_with_its_error(cli, wb, tmp_path, in_process_jobs):
    in_process_jobs.fail = "the model folder is unreadable"
    run_id = trained_run(wb)
    code, out, _ = cli("predict", str(run_id), "--input", str(reviews_csv(tmp_path)), "--wait", "--json")
    final = json.loads(out)
    assert code == 1 and final["status"] == FAILED and final["output"] is None
    assert "the model folder is unreadable" in final["error"]


def test_evaluate_a_file_then_the_same_test_set_by_id(cli, wb, tmp_path, in_process_jobs):
    run_id = trained_run(wb)
    data = labelled_jsonl(tmp_path)
    code, out, err = cli("evaluate", str(run_id), "--data", str(data), "--wait", "--json")
    assert code == 0, err
    final = json.loads(out)
    assert set(final) == {"id", "status", "metrics", "dataset_id", "error"}
    assert (final["status"], final["metrics"], final["error"]) == \
        (SUCCEEDED, {"accuracy": 1.0, "examples": 20}, None)
    assert datasets.get_dataset(wb, final["dataset_id"]).name == "test"
    code, out, _ = cli("evaluate", str(run_id), "--data", final["dataset_id"], "--json")
    again = json.loads(out)
    assert code == 0 and (again["status"], again["dataset_id"]) == (QUEUED, final["dataset_id"])
    code, out, _ = cli("evaluate", str(run_id), "--data", str(data))
    assert code == 0 and predictions.get_job(wb, int(out))["dataset_id"] == final["dataset_id"]
    conll = tmp_path / "ner.conll"
    conll.write_text("".join(f"Paris{i} B-LOC\nis O\n\n" for i in range(12)))
    ner = datasets.import_dataset(wb, conll, "token-classification", tokenizer=False)
    code, _, err = cli("evaluate", str(run_id), "--data", ner.id)
    assert code == 2 and f"dataset {ner.id} (ner) is a token-classification dataset" in err
    code, _, err = cli("evaluate", str(run_id), "--data", "no-such-thing")
    assert code == 3 and "no dataset 'no-such-thing'" in err


def test_runs_list_and_show_include_jobs(cli, wb, tmp_path, in_process_jobs):
    run_id = trained_run(wb)
    code, out, _ = cli("predict", str(run_id), "--input", str(reviews_csv(tmp_path)), "--wait", "--json")
    job_id = json.loads(out)["id"]
    code, out, _ = cli("runs", "list")
    header, *lines = out.splitlines()
    assert header.split()[:3] == ["id", "kind", "status"]
    assert lines[0].split()[:3] == [str(job_id), "predict", SUCCEEDED] and lines[0].endswith(f"(run {run_id})")
    assert lines[1].split()[:3] == [str(run_id), "train", SUCCEEDED]
    code, out, _ = cli("runs", "list", "--kind", "predict", "--json")
    assert [(r["id"], r["kind"], r["parent_run_id"]) for r in json.loads(out)] == [(job_id, "predict", run_id)]
    code, _, err = cli("runs", "list", "--kind", "sweep")
    assert code == 2 and "kind must be one of train, predict, evaluate" in err
    code, out, _ = cli("runs", "show", str(job_id))
    output = Path(runs.get_run(wb, job_id)["output_dir"]) / "predictions.csv"
    assert out.splitlines()[:2] == [
        f"job {job_id} (predict with the model of run {run_id}): succeeded (100.0%, 5/5 rows)",
        "input: reviews.csv (csv), output format csv"]
    assert f"outputs:\n  {output}\n" in out
    code, out, _ = cli("runs", "show", str(job_id), "--json")
    record = json.loads(out)
    assert (record["kind"], record["parent_run_id"], record["outputs"]) == ("predict", run_id, [str(output)])


def test_runs_show_says_what_an_evaluation_scored(cli, wb, tmp_path, in_process_jobs):
    """The test set's line of `runs show`: its rows, the duplicates kept, the rows cut to the max length
    (the counts ``jobs.predict.test_facts`` adds to an evaluation's metrics)."""
    from storage.models import Run

    run_id = trained_run(wb)
    code, out, err = cli("evaluate", str(run_id), "--data", str(labelled_jsonl(tmp_path)), "--wait", "--json")
    assert code == 0, err
    job = json.loads(out)
    with wb.db.session() as session:  # what the real job adds (the fake job of these tests does not count)
        session.get(Run, job["id"]).metrics = {**job["metrics"], "rows": 20, "duplicates": 3, "truncated": 1,
                                               "max_length": 64}
    code, out, _ = cli("runs", "show", str(job["id"]))
    assert f"test set: dataset {job['dataset_id']} (test): 20 rows, 3 of them duplicates, all scored · 1 row longer " \
           "than 64 tokens, cut to it\n" in out
    assert "  truncated: 1\n" in out


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_predict_and_evaluate_with_a_trained_tiny_model(cli, wb, tmp_path):
    """The whole way: a tiny model trained by `train --wait`, then `predict --wait` and `evaluate --wait` run
    in job processes of their own (``python -m jobs.process.run_job``) with the real ``jobs.predict`` functions."""
    model = tiny_bert(tmp_path / "tiny-bert")
    data = write_jsonl(tmp_path / "train.jsonl", classification_records(32))
    code, out, err = cli("train", "--task", "text-classification", "--data", str(data), "--model", str(model),
                         "--epochs", "1", "--batch-size", "8", "--max-length", "16", "--wait", "--json")
    assert code == 0, err
    run_id = json.loads(out)["id"]
    target = tmp_path / "predicted.jsonl"
    code, out, err = cli("predict", str(run_id), "--input", str(data), "--format", "jsonl", "--output",
                         str(target), "--json")
    assert code == 0, err
    final = json.loads(out)
    assert (final["status"], final["rows"], final["output"]) == (SUCCEEDED, 32, str(target))
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    # the input's own columns in input order, then the prediction over the run's classes
    assert [(r["text"], r["label"]) for r in rows] == [(r["text"], r["label"]) for r in classification_records(32)]
    assert {r["predicted_label"] for r in rows} <= {"neg", "pos"}
    assert all(abs(r["prob_neg"] + r["prob_pos"] - 1.0) < 1e-4 for r in rows)
    code, out, err = cli("evaluate", str(run_id), "--data", str(data), "--wait", "--json")
    assert code == 0, err
    evaluation = json.loads(out)
    assert evaluation["status"] == SUCCEEDED and "accuracy" in evaluation["metrics"]


def test_predict_over_a_stored_dataset_by_id_or_name(cli, wb, tmp_path, in_process_jobs):
    run_id = trained_run(wb)
    dataset = datasets.import_dataset(wb, labelled_jsonl(tmp_path, rows=12), "text-classification", name="held-out",
                                      validation_fraction=0.25)
    target = tmp_path / "labelled.csv"
    code, out, err = cli("predict", str(run_id), "--input", "held-out", "--output", str(target), "--json")
    assert code == 0, err
    final = json.loads(out)
    assert (final["status"], final["rows"]) == (SUCCEEDED, 12)
    rows = list(csv.DictReader(target.open()))
    assert sorted(r["text"] for r in rows) == sorted(f"{'good' if i % 2 else 'bad'} film number {i}" for i in range(12))
    assert all(r["label"] in ("pos", "neg") and r["predicted_label"] in ("short", "long") for r in rows)
    assert predictions.get_job(wb, final["id"])["input_name"] == f"held-out-{dataset.id[:8]}.jsonl"
    code, _, err = cli("predict", str(run_id), "--input", "no-such-thing.csv")
    assert code == 3 and err.startswith("error: no such file or stored dataset: no-such-thing.csv")
    code, _, err = cli("predict", str(run_id), "--input", dataset.id, "--text-column", "body")
    assert code == 2 and "describe a file; a stored dataset's records are read as they were imported" in err
    code, _, err = cli("predict", "999", "--input", dataset.id)
    assert code == 3 and err.startswith("error: run 999 does not exist")
