"""Run mirrors against the real libraries: an MLflow SQLite store, a real ``mlflow server``, TensorBoard's
``EventAccumulator`` reading tensorboardX's files.

Runs are the fake runner's (``fake:steps``: a point a step, a checkpoint every 5 steps) except the first test,
which trains a tiny BERT for real; the worker is driven one iteration at a time.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import select

from jobs.process import run_job
from jobs.process.fake_runner import InProcessRunner, fake_train
from jobs.queue import table as queue
from jobs.queue.worker import Worker
from jobs.specs.run import DataSpec, RunSpec, TrainSpec
from jobs.tracking import params as P
from storage.models import SUCCEEDED, Run, Sweep
from tests.queue_support import fake_spec, qwb, wait_until  # noqa: F401
from tests.tiny_models import classification_records, tiny_bert, write_jsonl
from workbench.services import runs, sweeps, tracking


def _with(wb, **settings):
    wb.settings = dataclasses.replace(wb.settings, **settings)
    return wb


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _history(client, mlflow_run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(mlflow_run_id, key))


def _curves(wb, run_id: int) -> dict[str, list[tuple[int, float]]]:
    return {name: [(p["step"], p["value"]) for p in points] for name, points in runs.run_curves(wb, run_id).items()}


def _drain(wb, *run_ids, max_jobs=1, timeout=60):
    worker = Worker(wb, InProcessRunner(wb), max_jobs=max_jobs, gpus=[])
    # a run's state is recorded before its mirror closes: the job (here a thread) is done once its slot is free
    ended = lambda: not worker.slots and all(runs.get_run(wb, r)["status"] in ("succeeded", "failed") for r in run_ids)
    assert wait_until(ended, timeout, worker.loop_once)


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _as_float32(curves: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """TensorBoard keeps a scalar as a 32-bit float."""
    import numpy as np

    return {name: [(step, float(np.float32(value))) for step, value in points] for name, points in curves.items()}


# -- params within MLflow's limits ---------------------------------------------------------------------

def test_params_are_flattened_and_cut_to_mlflows_limits():
    spec = {"task": "text-classification", "train": {"learning_rate": 5e-5, "epochs": None},
            "data": {"labels": ["a", "b"]}, "note": "x" * 7000}
    params = P.run_params(spec, {"batch_size": 16, "why": "defaults"})
    assert params["spec.train.learning_rate"] == "5e-05" and "spec.train.epochs" not in params  # unset: left out
    assert params["spec.data.labels"] == '["a", "b"]' and params["hp.batch_size"] == "16"
    assert len(params["spec.note"]) == P.MAX_PARAM_VALUE and params["spec.note"].endswith(P.CUT)
    assert P.metric_key("f1 (macro)") == "f1 _macro_"
    assert P.final_metrics({"accuracy": 0.9, "steps": 3, "machine": {"load": 1}, "ok": True,
                            "metrics_ci": {"accuracy": {"low": 0.8, "high": 0.95}}}) == {
        "accuracy": 0.9, "steps": 3.0, "accuracy_ci_low": 0.8, "accuracy_ci_high": 0.95}


# -- a real tiny run in an MLflow SQLite store ---------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_a_tiny_run_in_an_mlflow_sqlite_store_matches_the_workbench(qwb, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _with(qwb, mlflow_uri=uri, tensorboard_dir=str(tmp_path / "tb"), device="cpu")
    model = tiny_bert(tmp_path / "tiny-bert")
    data = DataSpec(train_path=str(write_jsonl(tmp_path / "train.jsonl", classification_records(40))),
                    validation_path=str(write_jsonl(tmp_path / "dev.jsonl", classification_records(16, seed=1))))
    spec = RunSpec(task="text-classification", model=str(model), data=data, name="tiny one",
                   train=TrainSpec(max_steps=12, eval_steps=4, batch_size=8, max_length=16, learning_rate=1e-3))
    run_id = runs.submit_run(qwb, spec)
    claimed = queue.claim(qwb.db, "w")
    assert run_job.execute(qwb, run_id, claimed.attempt, run_job._real_training) == run_job.EXIT_SUCCEEDED
    run = runs.get_run(qwb, run_id)
    assert run["status"] == SUCCEEDED and run["mlflow_run_id"] and run["mirror_warning"] is None
    saved = json.loads(Path(run["output_dir"], "metrics.json").read_text())

    client = _client(uri)
    mirrored = client.get_run(run["mlflow_run_id"])
    assert mirrored.info.status == "FINISHED" and mirrored.info.run_name == "tiny one"
    # params: what the user chose and the defaults chosen for the rest
    assert mirrored.data.params["spec.train.learning_rate"] == "0.001"
    assert mirrored.data.params["hp.batch_size"] == str(saved["hyperparameters"]["batch_size"])
    assert mirrored.data.params["hp.max_length"] == "16"
    # every curve point with its step, as the workbench has it
    curves = _curves(qwb, run_id)
    assert {"train/loss", "eval/accuracy", "eval/loss"} <= set(curves)
    for name, points in curves.items():
        assert _history(client, mirrored.info.run_id, name) == points, name
    # the final metrics and their intervals, as metrics.json has them
    for name in ("accuracy", "f1_macro", "train_loss"):
        assert mirrored.data.metrics[name] == pytest.approx(saved[name])
    interval = saved["metrics_ci"]["accuracy"]
    assert mirrored.data.metrics["accuracy_ci_low"] == pytest.approx(interval["low"])
    assert mirrored.data.metrics["accuracy_ci_high"] == pytest.approx(interval["high"])
    tags = mirrored.data.tags
    assert (tags["workbench.run_id"], tags["workbench.task"], tags["workbench.model"]) == (
        str(run_id), "text-classification", str(model))
    assert tags["workbench.url"].endswith(f"/?run={run_id}")
    artifacts = {a.path for a in client.list_artifacts(mirrored.info.run_id)}
    assert {"metrics.json", "pictures"} <= artifacts
    assert {a.path for a in client.list_artifacts(mirrored.info.run_id, "pictures")} == {
        "pictures/curves.png", "pictures/confusion_matrix.png"}
    local = Path(client.download_artifacts(mirrored.info.run_id, "metrics.json", str(tmp_path / "back")))
    assert json.loads(local.read_text()) == saved
    # the same run in TensorBoard: a scalar per curve point
    assert _scalars(tmp_path / "tb" / f"run-{run_id}-tiny-one") == _as_float32(curves)


# -- TensorBoard: two runs at once in one worker -------------------------------------------------------

def test_two_runs_at_once_in_one_worker_each_have_their_own_tensorboard_folder(qwb, tmp_path):
    _with(qwb, tensorboard_dir=str(tmp_path / "tb"))
    first = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:30:0.01", name="first"))
    second = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:20:0.01", name="second"))
    _drain(qwb, first, second, max_jobs=2)
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == [f"run-{first}-first", f"run-{second}-second"]
    for run_id, name, steps in ((first, "first", 30), (second, "second", 20)):
        scalars = _scalars(tmp_path / "tb" / f"run-{run_id}-{name}")
        assert scalars == _as_float32(_curves(qwb, run_id))
        assert [step for step, _ in scalars["train/loss"]] == list(range(1, steps + 1))
