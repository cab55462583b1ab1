"""The Sweep form and Sweeps view as plain functions (no browser): spec from the form, the view's values."""
from __future__ import annotations

import json

import pytest
import yaml

from jobs.process.fake_runner import InProcessRunner
from jobs.queue.worker import Worker
from tests.queue_support import fake_spec, wait_until
from workbench.errors import ConfigError
from workbench.services import datasets, sweeps
from workbench.ui import sweep_plots, sweep_tab
from tests.tiny_models import classification_records, write_jsonl


def base_json(wb, tmp_path, model="fake:sweep:10:0.002") -> str:
    records = [{**r, "text": f"{r['text']} {i}"} for i, r in enumerate(classification_records(20))]
    dataset = datasets.import_dataset(wb, write_jsonl(tmp_path / "d.jsonl", records), "text-classification")
    spec = fake_spec(wb, model=model).to_dict()
    spec["data"] = {"dataset_id": dataset.id}
    return json.dumps(spec)


def test_default_space_yaml_round_trips_into_a_spec(wb, tmp_path):
    text = sweep_tab.space_yaml("text-classification")
    assert set(yaml.safe_load(text)) == {"learning_rate", "batch_size", "warmup_ratio", "weight_decay"}
    lora_base = json.dumps({"task": "text-classification", "lora": {"enabled": True}})
    assert "lora_r" in sweep_tab.default_space_for(lora_base)
    spec = sweep_tab.spec_from_form(base_json(wb, tmp_path), text, 6, 3, "successive-halving", "", "", "mine")
    assert (spec.n_trials, spec.parallelism, spec.pruner, spec.metric, spec.name) == (
        6, 3, "successive-halving", "accuracy", "mine")
    assert spec.space["learning_rate"].log is True


def test_form_errors_say_what_to_fix(wb, tmp_path):
    with pytest.raises(ConfigError, match="choose a dataset"):
        sweep_tab.spec_from_form(json.dumps({"task": "text-classification", "data": {}}), "", 2, 1, "none", "",
                                 "", "")
    with pytest.raises(ConfigError, match="not valid YAML"):
        sweep_tab.spec_from_form(base_json(wb, tmp_path), "learning_rate: [1, 2", 2, 1, "none", "", "", "")
    with pytest.raises(ConfigError, match="search space is empty"):
        sweep_tab.spec_from_form(base_json(wb, tmp_path), "", 2, 1, "none", "", "", "")


def test_view_values_follow_the_sweep(wb, tmp_path):
    assert sweep_tab.view_values(wb, None)[0].startswith("No sweep selected")
    spec = sweep_tab.spec_from_form(base_json(wb, tmp_path), "learning_rate: {low: 1.0e-6, high: 1.0e-2, log: true}\n"
                                    "batch_size: [8, 16]\n", 4, 2, "none", "", "", "ui")
    sweep_id = sweeps.create_sweep(wb, spec)
    progress, by_trial, parallel, importance, table = sweep_tab.view_values(wb, sweep_id)
    assert "running 2" in progress and "no trial has completed yet" in progress
    assert "No trial has completed yet" in by_trial
    assert parallel.count("class='wb-trial'") == 2
    assert list(table["State"]) == ["queued", "queued"]
    worker = Worker(wb, InProcessRunner(wb), max_jobs=2, gpus=[])
    assert wait_until(lambda: sweeps.get_sweep(wb, sweep_id)["status"] == "finished", 30, worker.loop_once)
    progress, by_trial, parallel, importance, table = sweep_tab.view_values(wb, sweep_id)
    best = sweeps.get_sweep(wb, sweep_id)["best"]
    assert "done 4" in progress and f"{best['value']:.4f}" in progress and f"run #{best['run_id']}" in progress
    assert "best so far" in by_trial and by_trial.count("<circle") == 8
    assert parallel.count("class='wb-trial'") == 4
    assert "learning_rate" in importance and "wb-bar" in importance
    assert list(table["State"]) == ["succeeded"] * 4
    assert sweep_tab.top_five(wb, sweep_id)[0] == best["run_id"]
    assert sweep_tab.best_of(wb, sweep_id) == best["run_id"]
    assert sweep_tab.sweep_choices(wb)[0][1] == sweep_id
    # The best trial is a run like any other: it publishes as a playground.
    from workbench.playground import service as playgrounds

    assert playgrounds.publish(wb, sweep_tab.best_of(wb, sweep_id)).url_path.startswith("/play/")


def test_the_refresh_button_keeps_a_pick_made_while_it_was_answered(wb, tmp_path):
    """↻ is answered with the list only while the pick it was asked with is still a sweep: sending that pick
    back would undo one made since (the late-answer race of the Train tab's picker, tests/test_ui_rough_edges.py)."""
    spec = sweep_tab.spec_from_form(base_json(wb, tmp_path), "batch_size: [8, 16]\n", 2, 1, "none", "", "", "a")
    first = sweeps.create_sweep(wb, spec)
    second = sweeps.create_sweep(wb, spec)
    update = sweep_tab.refreshed_sweeps(wb, first)
    assert "value" not in update and {v for _, v in update["choices"]} == {first, second}
    assert sweep_tab.refreshed_sweeps(wb, None)["value"] == sweep_tab.sweep_choices(wb)[0][1]
    assert sweep_tab.refreshed_sweeps(wb, 999)["value"] == sweep_tab.sweep_choices(wb)[0][1]


def test_value_vs_trial_keeps_the_best_so_far_by_direction():
    sweep = {"direction": "minimize", "metric": "perplexity", "trials": [
        {"trial": 0, "optuna_state": "complete", "value": 5.0}, {"trial": 1, "optuna_state": "pruned", "value": None},
        {"trial": 2, "optuna_state": "complete", "value": 7.0}, {"trial": 3, "optuna_state": "complete", "value": 3.0}]}
    frame = sweep_plots.value_vs_trial_frame(sweep)
    best = frame[frame["curve"] == "best so far"]
    assert list(best["step"]) == [0, 2, 3] and list(best["value"]) == [5.0, 5.0, 3.0]


def test_a_running_sweep_says_how_long_it_still_needs(wb, tmp_path, monkeypatch):
    """Issue 25: a sweep waited 10 minutes with no word; the view says the time left, or why it cannot."""
    from jobs.queue import table as queue
    from storage.models import Run
    from workbench.services import estimates

    spec = sweep_tab.spec_from_form(base_json(wb, tmp_path), "learning_rate: {low: 1.0e-6, high: 1.0e-2, log: true}\n",
                                    4, 2, "median", "", "", "ui")
    sweep_id = sweeps.create_sweep(wb, spec)
    assert "Time left: unknown" in sweep_tab.view_values(wb, sweep_id)[0]  # no worker: no start time
    queue.register_worker(wb.db, "w1", 2, "")
    with wb.db.session() as session:
        for run in session.query(Run).filter(Run.sweep_id == sweep_id):
            run.estimate = {"seconds": 300.0, "low": 250.0, "high": 350.0}
    asked = []

    def rest(wb_, base, n_trials, parallelism, pruner, workers=1):
        asked.append((n_trials, parallelism, pruner, workers))
        return {"wall_seconds": 600.0}

    monkeypatch.setattr(estimates, "estimate_sweep", rest)
    left = sweeps.time_left(wb, sweeps.get_sweep(wb, sweep_id))
    # two trials on two slots end in 5 min; the two not asked yet, as estimate_sweep expects them, take 10 more
    assert left == {"seconds": 900.0, "active": 2, "to_ask": 2}
    assert asked == [(2, 2, "median", 2)]
    progress = sweep_tab.view_values(wb, sweep_id)[0]
    assert "Time left: **about 15 min** (2 trial(s) queued or running, then 2 trial(s) not started yet" in progress
    sweeps.cancel_sweep(wb, sweep_id)
    assert sweeps.time_left(wb, sweeps.get_sweep(wb, sweep_id)) is None
    assert "Time left" not in sweep_tab.view_values(wb, sweep_id)[0]
