"""`workbench sweep ...`: flags and YAML build the same spec; show --json is a contract; plus one real sweep."""
from __future__ import annotations

import json

import pytest
import yaml

from jobs.queue.worker import Worker
from storage.models import SUCCEEDED
from tests.queue_support import wait_until
from tests.test_cli_runs import labelled, write_csv
from tests.tiny_models import classification_records, tiny_bert, write_jsonl
from workbench.services import datasets, runs, sweeps


def data_file(tmp_path):
    """A file the dataset store imports: two labels, no duplicate texts."""
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(30))]
    return str(write_jsonl(tmp_path / "train.jsonl", records))


def test_sweep_from_flags_show_list_cancel(cli, wb, tmp_path):
    data = data_file(tmp_path)
    code, out, err = cli("sweep", "--task", "text-classification", "--data", data, "--model", "fake:succeed",
                         "--param", "learning_rate=1e-5..1e-3:log", "--param", "batch_size=8,16",
                         "--trials", "4", "--parallel", "2", "--pruner", "none", "--name", "flags", "--json")
    assert code == 0, err
    created = json.loads(out)
    assert created["status"] == "running" and len(created["trials"]) == 2
    code, out, _ = cli("sweep", "show", str(created["id"]), "--json")
    shown = json.loads(out)
    assert {"id", "status", "counts", "best", "trials"} <= set(shown)
    assert shown["counts"] == {"done": 0, "running": 2, "pruned": 0, "failed": 0} and shown["best"] is None
    for trial in shown["trials"]:
        assert {"trial", "run_id", "state", "params", "value"} <= set(trial)
        assert set(trial["params"]) == {"learning_rate", "batch_size"}
        spec = runs.get_run(wb, trial["run_id"])["spec"]
        assert spec["train"]["batch_size"] == trial["params"]["batch_size"]
        assert spec["name"] == f"sweep {created['id']} #{trial['trial']}"  # the parameters have their own columns
    code, out, _ = cli("sweep", "list", "--json")
    assert [s["id"] for s in json.loads(out)] == [created["id"]]
    assert cli("sweep", "cancel", str(created["id"]))[:2] == (0, f"sweep {created['id']}: cancelled\n")
    code, _, err = cli("sweep", "cancel", str(created["id"]))
    assert code == 4 and "it is cancelled" in err
    code, _, err = cli("sweep", "best", str(created["id"]))
    assert code == 3 and "no completed trial" in err


def test_sweep_from_yaml_with_flags_over_it_and_defaults(cli, wb, tmp_path):
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({
        "base": {"task": "text-classification", "model": "fake:succeed",
                 "data": {"train_path": data_file(tmp_path)}},
        "space": {"learning_rate": {"type": "float", "low": 1e-5, "high": 1e-4, "log": True},
                  "epochs": {"low": 1, "high": 3}},
        "objective": {"metric": "f1_macro", "direction": "maximize"},
        "n_trials": 5, "parallelism": 1, "pruner": "successive-halving"}))
    code, out, err = cli("sweep", "--config", str(config), "--parallel", "3", "--json")
    assert code == 0, err
    shown = sweeps.get_sweep(wb, json.loads(out)["id"])
    assert (shown["metric"], shown["parallelism"], shown["n_trials"], shown["pruner"]) == (
        "f1_macro", 3, 5, "successive-halving")
    assert all(isinstance(t["params"]["epochs"], int) for t in shown["trials"]) and len(shown["trials"]) == 3
    # No --param and no space: the task's default search space.
    code, out, err = cli("sweep", "--task", "text-classification", "--data", data_file(tmp_path), "--json")
    assert code == 0, err
    default = sweeps.get_sweep(wb, json.loads(out)["id"])
    assert set(default["spec"]["space"]) == {"learning_rate", "batch_size", "warmup_ratio", "weight_decay"}
    assert (default["n_trials"], default["parallelism"], default["pruner"]) == (12, 2, "median")


def test_sweep_errors_are_one_line(cli, wb, tmp_path):
    data = data_file(tmp_path)
    code, _, err = cli("sweep", "--task", "text-classification", "--data", data, "--param", "lr=1..2")
    assert code == 2 and err.startswith("error: unknown sweep parameter 'lr'")
    code, _, err = cli("sweep", "--task", "text-classification", "--data", data, "--param", "learning_rate")
    assert code == 2 and "NAME=LOW..HIGH" in err
    code, _, err = cli("sweep", "--task", "text-classification", "--data", data, "--pruner", "hyperband")
    assert code == 2 and "unknown pruner" in err
    code, _, err = cli("sweep", "show", "42")
    assert code == 3 and "sweep 42 does not exist" in err


def test_sweep_config_imports_the_files_its_base_names(cli, wb, tmp_path):
    from jobs.process.run_job import resolve_spec
    from jobs.specs.run import RunSpec
    from jobs.tasks import task_module

    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({
        "base": {"task": "text-classification", "model": "fake:succeed",
                 "data": {"train_path": str(write_csv(tmp_path / "train.csv", labelled(30, "t"))),
                          "validation_path": str(write_csv(tmp_path / "dev.csv", labelled(10, "v")))}},
        "space": {"learning_rate": "1e-5..1e-3:log"}, "n_trials": 3, "parallelism": 2, "pruner": "none"}))
    code, out, err = cli("sweep", "--config", str(config), "--json")
    assert code == 0, err
    shown = sweeps.get_sweep(wb, json.loads(out)["id"])
    dataset_id = shown["spec"]["base"]["data"]["dataset_id"]
    stored = datasets.get_dataset(wb, dataset_id)
    assert (stored.train, stored.validation) == (30, 10) and not shown["spec"]["base"]["data"]["train_path"]
    for trial in shown["trials"]:
        spec = RunSpec.from_dict(runs.get_run(wb, trial["run_id"])["spec"])
        assert spec.data.dataset_id == dataset_id and not spec.data.train_path
        resolved, _ = resolve_spec(wb, spec)  # what the trial's training reads: the store's normalized files
        assert len(task_module(spec.task).read(resolved.data.train_path)) == 30
        assert len(task_module(spec.task).read(resolved.data.validation_path)) == 10


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_a_real_sweep_with_a_tiny_model_reports_evaluations_and_ends(wb, tmp_path):
    """Three trials of a 2-layer BERT through the real training subprocess, evaluated 4 times each."""
    from jobs.specs.sweep import SweepSpec

    model = tiny_bert(tmp_path / "tiny-bert")
    data = write_jsonl(tmp_path / "train.jsonl", classification_records(48))
    base = {"task": "text-classification", "model": str(model), "data": {"train_path": str(data)},
            "train": {"epochs": 1, "batch_size": 8, "max_length": 16, "eval_steps": 1}}
    spec = SweepSpec.from_dict({"base": base, "space": {"learning_rate": "1e-4..1e-2:log"}, "n_trials": 3,
                                "parallelism": 2, "pruner": "median"})
    sweep_id = sweeps.create_sweep(wb, spec)
    worker = Worker(wb, max_jobs=2, gpus=[])
    try:
        assert wait_until(lambda: sweeps.get_sweep(wb, sweep_id)["status"] == "finished", 540, worker.loop_once,
                          interval=0.5)
    finally:
        worker.shutdown()
    shown = sweeps.get_sweep(wb, sweep_id)
    assert len(shown["trials"]) == 3
    assert {t["state"] for t in shown["trials"]} <= {SUCCEEDED, "pruned"}
    assert shown["trials"][0]["state"] == SUCCEEDED  # the median pruner needs finished trials to compare with
    assert all(t["steps_reported"] >= 1 for t in shown["trials"])  # eval accuracy reported at each evaluation
    best = shown["best"]
    assert best is not None and best["value"] == runs.get_run(wb, best["run_id"])["metrics"]["accuracy"]
    assert sweeps.best_run(wb, sweep_id) == best["run_id"]
