"""The CLI contract scripts depend on: `workbench runs ...`, `workbench train`, `workbench worker` options."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from jobs.queue import table as queue
from storage.models import CANCELLED, QUEUED, SUCCEEDED
from tests.queue_support import fake_spec
from tests.tiny_models import classification_records, tiny_bert, write_jsonl
from workbench.commands.worker import parse_gpus
from workbench.errors import ConfigError
from workbench.services import datasets, runs


def test_runs_list_and_show_json(cli, wb):
    assert cli("runs", "list", "--json")[:2] == (0, "[]\n")
    run_id = runs.submit_run(wb, fake_spec(wb, name="demo"))
    code, out, _ = cli("runs", "list", "--json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [run_id]
    code, out, _ = cli("runs", "list", "--status", "failed", "--json")
    assert json.loads(out) == []
    code, out, _ = cli("runs", "show", str(run_id), "--json")
    record = json.loads(out)
    assert code == 0 and {"id", "status", "progress", "metrics", "error"} <= set(record)
    assert (record["id"], record["status"], record["progress"], record["metrics"], record["error"]) == \
        (run_id, QUEUED, 0.0, {}, None)
    code, out, _ = cli("runs", "show", str(run_id))
    assert out.startswith(f"run {run_id}: queued (0.0%, step 0/0)")
    code, out, _ = cli("runs", "list")
    assert "fake:succeed" in out


def test_runs_cancel_retry_and_errors(cli, wb):
    run_id = runs.submit_run(wb, fake_spec(wb))
    assert cli("runs", "cancel", str(run_id))[:2] == (0, f"run {run_id}: {CANCELLED}\n")
    code, _, err = cli("runs", "cancel", str(run_id))
    assert code == 4 and "it is cancelled" in err
    assert cli("runs", "retry", str(run_id))[:2] == (0, f"run {run_id}: queued\n")
    code, _, err = cli("runs", "show", "999", "--json")
    assert code == 3 and err.startswith("error: run 999 does not exist")


def test_runs_logs_and_follow(cli, wb):
    run_id = runs.submit_run(wb, fake_spec(wb))
    claimed = queue.claim(wb.db, "w")
    log = Path(claimed.output_dir) / "process.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"line {i}\n" for i in range(300)))
    code, out, _ = cli("runs", "logs", str(run_id), "--tail", "3")
    assert out == "line 297\nline 298\nline 299\n"
    queue.finish(wb.db, run_id, claimed.attempt, SUCCEEDED)
    code, out, _ = cli("runs", "logs", str(run_id), "--tail", "1", "--follow")  # returns: the run has ended
    assert code == 0 and out == "line 299\n"


def test_train_enqueues_and_imports_data(cli, wb, tmp_path):
    data = write_jsonl(tmp_path / "reviews.jsonl", classification_records(40))
    code, out, err = cli("train", "--task", "text-classification", "--data", str(data), "--epochs", "2",
                         "--lr", "3e-5", "--lora")
    assert code == 0, err
    run = runs.get_run(wb, int(out.strip()))
    assert run["status"] == QUEUED and run["dataset"] == "reviews"
    assert run["spec"]["train"]["epochs"] == 2 and run["spec"]["train"]["learning_rate"] == 3e-5
    assert run["spec"]["lora"]["enabled"] is True and run["spec"]["data"]["dataset_id"]
    # the same data again, as a dataset id, through --json
    code, out, _ = cli("train", "--task", "text-classification", "--data", run["spec"]["data"]["dataset_id"], "--json")
    assert json.loads(out)["status"] == QUEUED


def test_train_config_file_with_flags_over_it(cli, wb, tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", classification_records(40))
    config = tmp_path / "run.yaml"
    config.write_text(f"task: text-classification\nmodel: bert-base-uncased\n"
                      f"data: {{train_path: {data}}}\ntrain: {{epochs: 5, batch_size: 8}}\n")
    code, out, err = cli("train", "--config", str(config), "--batch-size", "4")
    assert code == 0, err
    spec = runs.get_run(wb, int(out))["spec"]
    assert spec["model"] == "bert-base-uncased" and spec["train"]["epochs"] == 5 and spec["train"]["batch_size"] == 4
    config.write_text("task: text-classification\ndata: {train_path: x}\ntrain: {epoch: 5}\n")
    code, _, err = cli("train", "--config", str(config))
    assert code == 2 and "unknown key(s) epoch in section 'train'" in err
    code, _, err = cli("train", "--data", str(data))
    assert code == 2 and "--task" in err


def test_parse_gpus():
    assert parse_gpus(None) is None
    assert parse_gpus("none") == [] and parse_gpus("") == []
    assert parse_gpus("0,2") == [0, 2]
    with pytest.raises(ConfigError):
        parse_gpus("first")


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_train_wait_without_a_worker_trains_in_process(cli, wb, tmp_path):
    model = tiny_bert(tmp_path / "tiny-bert")
    data = write_jsonl(tmp_path / "train.jsonl", classification_records(32))
    code, out, err = cli("train", "--task", "text-classification", "--data", str(data), "--model", str(model),
                         "--epochs", "1", "--batch-size", "8", "--max-length", "16", "--wait", "--json")
    assert code == 0, err
    assert "training run" in err and "in this process" in err
    final = json.loads(out)
    assert final["status"] == SUCCEEDED and final["error"] is None
    assert "accuracy" in final["metrics"] and final["metrics"]["steps"] >= 1
    assert Path(final["output_dir"], "model", "config.json").is_file()


def test_train_eval_file_or_dataset(cli, wb, tmp_path):
    def unique(n, tag):  # the dataset store drops duplicate texts, and validation texts seen in training
        return [{**r, "text": f"{r['text']} {tag}{i}"} for i, r in enumerate(classification_records(n))]

    train = write_jsonl(tmp_path / "train.jsonl", unique(40, "t"))
    held_out = write_jsonl(tmp_path / "held_out.jsonl", unique(12, "v"))
    code, out, err = cli("train", "--task", "text-classification", "--data", str(train), "--eval", str(held_out))
    assert code == 0, err
    spec = runs.get_run(wb, int(out))["spec"]
    dataset = spec["data"]["dataset_id"]

    assert datasets.get_dataset(wb, dataset).validation == 12 and spec["data"]["validation_path"] is None
    # a stored dataset as --eval: its training file is this run's validation data
    code, out, err = cli("train", "--task", "text-classification", "--data", dataset, "--eval", dataset)
    assert code == 0, err
    assert runs.get_run(wb, int(out))["spec"]["data"]["validation_path"] == \
        str(datasets.dataset_files(wb, dataset)[0])


def test_runs_show_and_list_give_the_phase_and_the_estimate(cli, wb):
    import datetime as dt

    from storage.models import Run

    run_id = runs.submit_run(wb, fake_spec(wb, name="demo"))
    started = dt.datetime(2026, 12, 1, 12, 0, 0)
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.status, run.phase, run.phase_done, run.phase_total = "running", "evaluating", 40, 160
        run.estimate, run.started_at = {"seconds": 100.0, "low": 90.0, "high": 120.0}, started
    code, out, _ = cli("runs", "show", str(run_id))
    assert code == 0 and "now: evaluating 40/160" in out and "time: estimated 1m 30s – 2m 00s · running for" in out
    assert "[evaluating 40/160]" in cli("runs", "list")[1]
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.status, run.phase, run.finished_at = "succeeded", None, started + dt.timedelta(seconds=300)
    code, out, _ = cli("runs", "show", str(run_id))
    assert "now:" not in out and "time: estimated 1m 30s – 2m 00s · took 5m 00s (3.0× the estimate)" in out
    assert json.loads(cli("runs", "show", str(run_id), "--json")[1])["estimate"]["seconds"] == 100.0


def test_a_usage_mistake_is_one_message_without_a_traceback(cli):
    code, out, err = cli("train", "--task", "text-classification", "--no-such-option")
    assert code == 2 and "No such option: --no-such-option" in err
    assert "Traceback" not in err + out


ID_COMMANDS = [("runs", "show"), ("runs", "cancel"), ("runs", "retry"), ("runs", "logs"), ("data", "audit-show"),
               ("publish",), ("sweep", "show"), ("sweep", "cancel"), ("sweep", "best")]


@pytest.mark.parametrize("command", ID_COMMANDS, ids=" ".join)
@pytest.mark.parametrize("value", ["100000000000000000000", "9223372036854775808", "0", "-1", "abc", "1e3", "2.0"])
def test_an_id_that_cannot_exist_is_not_found_in_one_line(cli, command, value):
    """Ids are whole numbers from 1 to 2**63-1: anything else is exit 3 and one line, never an OverflowError."""
    code, out, err = cli(*command, "--", value) if value.startswith("-") else cli(*command, value)
    kind = "audit" if "audit-show" in command else "sweep" if command[0] == "sweep" else "run"
    assert (code, out) == (3, ""), err
    assert err == f"error: {kind} {value!r} does not exist: {kind} ids are whole numbers from 1 to {2**63 - 1}\n"


@pytest.mark.parametrize("argv", [*(command + ("-1",) for command in ID_COMMANDS), ("runs", "compare", "-1", "1"),
                                  ("runs", "compare", "1", "-12"), ("runs", "show", "--json", "-1")], ids=" ".join)
def test_a_negative_id_without_a_double_dash_is_not_found_too(cli, argv):
    """``-1`` looks like an option to click (a usage error, exit 2); the contract says exit 3, as for ``0``."""
    code, out, err = cli(*argv)
    value = next(arg for arg in argv if arg[1:].isdigit())
    kind = "audit" if "audit-show" in argv else "sweep" if argv[0] == "sweep" else "run"
    assert (code, out) == (3, ""), err
    assert err == f"error: {kind} {value!r} does not exist: {kind} ids are whole numbers from 1 to {2**63 - 1}\n"


def test_an_unknown_option_is_still_a_usage_error_where_ids_are_taken(cli):
    code, _, err = cli("runs", "compare", "1", "2", "--jsn")
    assert code == 2 and "No such option: --jsn" in err


@pytest.mark.parametrize("argv", [("runs", "compare", "1", "1"), ("runs", "compare", "3", "2", "3")], ids=" ".join)
def test_a_run_compared_with_itself_is_refused(cli, argv):
    """Not "no detectable difference" (true by construction, and read as a finding): an input mistake."""
    code, out, err = cli(*argv)
    assert (code, out) == (2, ""), out
    assert err.startswith(f"error: run {argv[-1]} is named twice: a run cannot be compared with itself"), err


def test_the_largest_id_is_looked_up(cli):
    code, _, err = cli("runs", "show", "9223372036854775807")
    assert code == 3 and err.startswith("error: run 9223372036854775807 does not exist;")


def write_csv(path: Path, records: list[dict]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(records)
    return path


def labelled(n: int, tag: str) -> list[dict]:
    """Distinct texts: the store drops duplicates, and validation texts seen in training."""
    return [{**r, "text": f"{r['text']} {tag}{i}"} for i, r in enumerate(classification_records(n))]


def test_train_config_imports_the_files_it_names_as_data_and_eval_do(cli, wb, tmp_path):
    train = write_csv(tmp_path / "reviews.csv", labelled(40, "t"))
    held_out = write_csv(tmp_path / "held_out.csv", labelled(12, "v"))
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"task": "text-classification", "model": "fake:succeed",
                                      "data": {"train_path": str(train), "validation_path": str(held_out)}}))
    code, out, err = cli("train", "--config", str(config))
    assert code == 0, err
    run = runs.get_run(wb, int(out))
    data = run["spec"]["data"]
    # The spec records the dataset, whose normalized files the worker reads; not the CSV itself.
    assert data["dataset_id"] and not data["train_path"] and data["validation_path"] is None
    stored = datasets.get_dataset(wb, data["dataset_id"])
    assert (stored.name, stored.train, stored.validation, run["dataset"]) == ("reviews", 40, 12, "reviews")
    code, out, err = cli("train", "--task", "text-classification", "--data", str(train), "--eval", str(held_out))
    assert code == 0, err
    assert runs.get_run(wb, int(out))["spec"]["data"]["dataset_id"] == data["dataset_id"]  # one import path
    # A stored dataset with a validation file: the file is stored whole and read in its normalized form.
    config.write_text(yaml.safe_dump({"task": "text-classification", "model": "fake:succeed",
                                      "data": {"dataset_id": data["dataset_id"], "validation_path": str(held_out)}}))
    code, out, err = cli("train", "--config", str(config))
    assert code == 0, err
    validation = Path(runs.get_run(wb, int(out))["spec"]["data"]["validation_path"])
    assert validation.name == "train.jsonl" and validation.is_relative_to(wb.settings.datasets_dir)
    config.write_text(yaml.safe_dump({"task": "text-classification", "data": {"train_path": str(tmp_path / "no.csv")}}))
    code, _, err = cli("train", "--config", str(config))
    assert code == 3 and "data.train_path: no such file" in err


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_train_config_with_a_csv_file_trains(cli, wb, tmp_path):
    """The documented `data: {train_path: file.csv}` trains; it failed every run with "not valid JSON"."""
    model = tiny_bert(tmp_path / "tiny-bert")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "task": "text-classification", "model": str(model),
        "data": {"train_path": str(write_csv(tmp_path / "train.csv", labelled(32, "t"))),
                 "validation_path": str(write_csv(tmp_path / "dev.csv", labelled(8, "v")))},
        "train": {"epochs": 1, "batch_size": 8, "max_length": 16}}))
    code, out, err = cli("train", "--config", str(config), "--wait", "--json")
    assert code == 0, out + err
    final = json.loads(out)
    assert final["status"] == SUCCEEDED and final["error"] is None and "accuracy" in final["metrics"]


def test_train_on_a_test_set_warns(cli, wb, tmp_path):
    path = write_jsonl(tmp_path / "held_out.jsonl", classification_records(20))
    test_set = datasets.import_dataset(wb, path, "text-classification", validation_fraction=0.0, tokenizer=False)
    code, out, err = cli("train", "--task", "text-classification", "--data", test_set.id, "--model", "fake:succeed")
    assert code == 0 and "warning" not in err
    datasets.mark_test_set(wb, test_set.id)
    code, out, err = cli("train", "--task", "text-classification", "--data", test_set.id, "--model", "fake:succeed",
                         "--json")
    assert code == 0 and json.loads(out)["status"] == "queued"
    assert f"warning: dataset {test_set.id} (held_out) is a test set: runs were evaluated on it" in err
