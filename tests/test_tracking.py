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
from jobs.tracking import mlflow_target
from jobs.tracking import params as P
from storage.models import SUCCEEDED, Run, Sweep
from tests.queue_support import fake_spec, wait_until
from tests.tiny_models import classification_records, tiny_bert, write_jsonl
from workbench.services import runs, sweeps, tracking


def _with(wb, **settings):
    """The workbench with these settings; a run waits up to 60 s for its mirror at its end (not the default 5 s),
    so that a slow, busy test machine cannot leave it behind, unless a test is about that wait."""
    wb.settings = dataclasses.replace(wb.settings, **{"tracking_timeout_seconds": 60.0, **settings})
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
def test_a_tiny_run_in_an_mlflow_sqlite_store_matches_the_workbench(wb, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _with(wb, mlflow_uri=uri, tensorboard_dir=str(tmp_path / "tb"), device="cpu")
    model = tiny_bert(tmp_path / "tiny-bert")
    data = DataSpec(train_path=str(write_jsonl(tmp_path / "train.jsonl", classification_records(40))),
                    validation_path=str(write_jsonl(tmp_path / "dev.jsonl", classification_records(16, seed=1))))
    spec = RunSpec(task="text-classification", model=str(model), data=data, name="tiny one",
                   train=TrainSpec(max_steps=12, eval_steps=4, batch_size=8, max_length=16, learning_rate=1e-3))
    run_id = runs.submit_run(wb, spec)
    claimed = queue.claim(wb.db, "w")
    assert run_job.execute(wb, run_id, claimed.attempt, run_job._real_training) == run_job.EXIT_SUCCEEDED
    run = runs.get_run(wb, run_id)
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
    curves = _curves(wb, run_id)
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

def test_two_runs_at_once_in_one_worker_each_have_their_own_tensorboard_folder(wb, tmp_path):
    _with(wb, tensorboard_dir=str(tmp_path / "tb"))
    first = runs.submit_run(wb, fake_spec(wb, "fake:steps:30:0.01", name="first"))
    second = runs.submit_run(wb, fake_spec(wb, "fake:steps:20:0.01", name="second"))
    _drain(wb, first, second, max_jobs=2)
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == [f"run-{first}-first", f"run-{second}-second"]
    for run_id, name, steps in ((first, "first", 30), (second, "second", 20)):
        scalars = _scalars(tmp_path / "tb" / f"run-{run_id}-{name}")
        assert scalars == _as_float32(_curves(wb, run_id))
        assert [step for step, _ in scalars["train/loss"]] == list(range(1, steps + 1))


# -- a kill -9, then a resume: one MLflow run, no step twice ------------------------------------------

@pytest.mark.timeout(120)
def test_a_run_killed_and_resumed_is_one_mlflow_run_without_repeated_steps(wb, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _with(wb, mlflow_uri=uri, tensorboard_dir=str(tmp_path / "tb"))
    client = _client(uri)
    # the store's tables made here (the child only connects), its artifacts beside it as the mirror would put them:
    # MLflow's own default is ./mlruns in the folder the tests started in
    client.create_experiment("workbench", artifact_location=mlflow_target.artifact_root(uri))
    run_id = runs.submit_run(wb, fake_spec(wb, "fake:steps:60:0.2", name="killed"))
    first = queue.claim(wb.db, "w1")
    env = {**os.environ, **wb.settings.as_env()}
    child = subprocess.Popen([sys.executable, "-m", "jobs.process.fake_runner", str(run_id), "--attempt",
                              str(first.attempt)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # killed past the checkpoint at step 20, the last points logged but not all sent (the mirror writes once
        # a second): the steps the resumed attempt does not replay reach MLflow from the database at its end
        mirrored = lambda: runs.get_run(wb, run_id)["mlflow_run_id"] and runs.get_run(wb, run_id)["step"] >= 22
        assert wait_until(mirrored, timeout=60, interval=0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    first_id = runs.get_run(wb, run_id)["mlflow_run_id"]
    # the next attempt, as a worker that takes the lease over starts it: from the checkpoint, steps replayed
    with wb.db.session() as session:  # (the same steps, without the pause between them)
        session.execute(Run.__table__.update().where(Run.id == run_id).values(
            status="queued", worker_id=None, spec={**runs.get_run(wb, run_id)["spec"], "model": "fake:steps:60:0"}))
    second = queue.claim(wb.db, "w2")
    assert run_job.execute(wb, run_id, second.attempt, fake_train) == run_job.EXIT_SUCCEEDED
    run = runs.get_run(wb, run_id)
    assert run["metrics"]["resumed_from"] >= 20 and run["mlflow_run_id"] == first_id
    experiment = client.get_experiment_by_name("workbench")
    assert [r.info.run_id for r in client.search_runs([experiment.experiment_id])] == [first_id]
    history = _history(client, first_id, "train/loss")
    assert [step for step, _ in history] == list(range(1, 61))  # each step once
    assert history == _curves(wb, run_id)["train/loss"]
    assert client.get_run(first_id).info.status == "FINISHED"
    assert _scalars(tmp_path / "tb" / f"run-{run_id}-killed") == _as_float32(_curves(wb, run_id))


# -- a tracking server that goes down, or never answers ------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    """``mlflow server`` from PyPI on 127.0.0.1, its runs in a SQLite file; stopped with SIGKILL."""

    def __init__(self, folder: Path, port: int):
        self.folder, self.port, self.process = folder, port, None
        self.uri = f"http://127.0.0.1:{port}"

    def start(self) -> "MlflowServer":
        import urllib.request

        command = [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1", "--port",
                   str(self.port), "--workers", "1", "--backend-store-uri", f"sqlite:///{self.folder / 'server.db'}",
                   "--artifacts-destination", str(self.folder / "artifacts")]
        log = open(self.folder / "server.log", "ab")
        # without the job runner MLflow starts for its GenAI features: half the CPU of a start
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                        env=env)

        def healthy() -> bool:
            try:
                return urllib.request.urlopen(f"{self.uri}/health", timeout=1).status == 200
            except OSError:
                return False

        assert wait_until(healthy, timeout=90, interval=0.3), (self.folder / "server.log").read_text()[-2000:]
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@pytest.fixture
def short_requests(monkeypatch):
    """Each request to a tracking server gives up after a second, without MLflow's own retries."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")


def _mirror_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("jobs.tracking") and r.levelno >= logging.WARNING]


class PausedTraining:
    """A train function that logs 20 steps, waits until ``resume`` is set, then logs 20 more: the test decides
    what happens in the middle of the run."""

    def __init__(self):
        self.halfway, self.resume = threading.Event(), threading.Event()

    def __call__(self, spec, output_dir, reporter, **_):
        for step in range(1, 41):
            if step == 21:
                self.halfway.set()
                assert self.resume.wait(60)
            reporter.progress(step, 40, step / 40)
            reporter.metrics(step, step / 40, {"train/loss": 1.0 / step})
        (output_dir / "model").mkdir(parents=True, exist_ok=True)
        return {"loss": 1.0 / 40}


@pytest.mark.timeout(240)
def test_a_tracking_server_stopped_mid_run_leaves_a_warning_then_runs_mirror_completes_it(
        wb, cli, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    server = MlflowServer(tmp_path, _free_port()).start()
    training = PausedTraining()
    try:
        _with(wb, mlflow_uri=server.uri, tracking_timeout_seconds=10.0)
        run_id = runs.submit_run(wb, fake_spec(wb, name="through an outage"))
        claimed = queue.claim(wb.db, "w")
        codes = []
        job = threading.Thread(target=lambda: codes.append(run_job.execute(wb, run_id, claimed.attempt, training)))
        job.start()
        assert training.halfway.wait(60)
        client = _client(server.uri)
        mirrored = lambda: runs.get_run(wb, run_id)["mlflow_run_id"] and len(client.get_metric_history(
            runs.get_run(wb, run_id)["mlflow_run_id"], "train/loss")) == 19  # step 20 waits for a later one
        assert wait_until(mirrored, timeout=60, interval=0.2)
        server.stop()  # in the middle of the run
        training.resume.set()
        job.join(60)
    finally:
        training.resume.set()
        server.stop()
    run = runs.get_run(wb, run_id)
    assert codes == [run_job.EXIT_SUCCEEDED] and run["status"] == SUCCEEDED and run["step"] == 40
    assert run["mirror_warning"].startswith(f"MLflow at {server.uri}: ")
    assert len(_mirror_warnings(caplog)) == 1, _mirror_warnings(caplog)  # one line in the run's log
    mlflow_id = run["mlflow_run_id"]

    server.start()  # back, with what it had before it stopped
    try:
        monkeypatch.setenv("WORKBENCH_MLFLOW_URI", server.uri)
        code, out, err = cli("runs", "mirror", str(run_id), "--to", "mlflow", "--json")
        assert code == 0, out + err
        assert json.loads(out) == [{"run_id": run_id, "written": ["MLflow"], "behind": [], "mlflow_run_id": mlflow_id,
                                    "ok": True}]
        client = _client(server.uri)
        assert _history(client, mlflow_id, "train/loss") == _curves(wb, run_id)["train/loss"]
        assert client.get_run(mlflow_id).info.status == "FINISHED"
        assert len(client.search_runs([client.get_experiment_by_name("workbench").experiment_id])) == 1
    finally:
        server.stop()
    assert runs.get_run(wb, run_id)["mirror_warning"] is None


@pytest.mark.timeout(60)
def test_a_tracking_server_that_never_answers_does_not_hold_the_run(wb, caplog, short_requests):
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        _with(wb, mlflow_uri=uri, tracking_timeout_seconds=1.0)
        run_id = runs.submit_run(wb, fake_spec(wb, "fake:steps:10:0.01"))
        claimed = queue.claim(wb.db, "w")
        assert run_job.execute(wb, run_id, claimed.attempt, fake_train) == run_job.EXIT_SUCCEEDED
    run = runs.get_run(wb, run_id)
    assert run["status"] == SUCCEEDED and run["mlflow_run_id"] is None
    assert run["mirror_warning"].startswith(f"MLflow at {uri}: ")
    assert len(_mirror_warnings(caplog)) == 1


# -- sweeps, runs made before the mirror, the run page ------------------------------------------------

def test_a_sweep_is_a_parent_run_with_its_trials_as_children(wb, tmp_path):
    from jobs.specs.sweep import SweepSpec

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _with(wb, mlflow_uri=uri)
    base = fake_spec(wb, model="fake:sweep:10:0.005").to_dict()
    sweep_id = sweeps.create_sweep(wb, SweepSpec.from_dict({
        "base": base, "name": "lr search", "space": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}},
        "n_trials": 3, "parallelism": 2, "pruner": "none"}))
    worker = Worker(wb, InProcessRunner(wb), max_jobs=2, gpus=[])
    with wb.db.session() as session:
        finished = lambda: session.get(Sweep, sweep_id, populate_existing=True).status == "finished"
        assert wait_until(lambda: finished() and not worker.slots, 60, worker.loop_once)
        parent_id = session.get(Sweep, sweep_id).mlflow_run_id
        trials = dict(session.execute(select(Run.id, Run.mlflow_run_id).where(Run.sweep_id == sweep_id)).all())
    client = _client(uri)
    parent = client.get_run(parent_id)
    assert parent.info.run_name == "lr search" and parent.data.tags["workbench.kind"] == "sweep"
    assert parent.data.params["sweep.n_trials"] == "3"
    experiment = client.get_experiment_by_name("workbench").experiment_id
    children = client.search_runs([experiment], f"tags.`mlflow.parentRunId` = '{parent_id}'")
    assert sorted(c.info.run_id for c in children) == sorted(trials.values()) and len(trials) == 3
    assert {c.data.tags["workbench.run_id"] for c in children} == {str(r) for r in trials}
    assert {c.data.tags["workbench.trial"] for c in children} == {"0", "1", "2"}
    assert client.get_run(parent_id).info.status == "FINISHED"


def test_runs_made_before_the_mirror_are_written_by_runs_mirror(wb, cli, tmp_path, monkeypatch):
    run_id = runs.submit_run(wb, fake_spec(wb, "fake:steps:12:0", name="older"))
    _drain(wb, run_id)  # no tracker set: nothing mirrored
    with wb.db.session() as session:
        session.execute(Run.__table__.update().where(Run.id == run_id).values(seed_group=run_id, group_seed=0))
    assert cli("runs", "mirror", "--to", "mlflow")[0] == 2  # no MLflow set
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("WORKBENCH_MLFLOW_URI", uri)
    monkeypatch.setenv("WORKBENCH_TENSORBOARD_DIR", str(tmp_path / "tb"))
    for _ in range(2):  # a second backfill writes nothing twice
        code, out, err = cli("runs", "mirror")
        assert (code, out) == (0, f"run {run_id}: TensorBoard, MLflow complete\n"), err
    client = _client(uri)
    [mirrored] = client.search_runs([client.get_experiment_by_name("workbench").experiment_id])
    assert mirrored.info.run_id == runs.get_run(wb, run_id)["mlflow_run_id"]
    assert mirrored.data.tags["workbench.seed_group"] == str(run_id)
    assert _history(client, mirrored.info.run_id, "train/loss") == _curves(wb, run_id)["train/loss"]
    assert _scalars(tmp_path / "tb" / f"run-{run_id}-older") == _as_float32(_curves(wb, run_id))


def test_the_run_page_links_to_mlflow_and_shows_a_mirror_that_is_behind(wb):
    from workbench.ui import runs_tab

    run_id = runs.submit_run(wb, fake_spec(wb))
    with wb.db.session() as session:
        session.execute(Run.__table__.update().where(Run.id == run_id).values(
            mlflow_run_id="abc123", mirror_warning="MLflow at http://mlflow:5000: ConnectionError"))
    header = runs_tab.run_view(wb, run_id).header
    assert "run-mlflow-link" not in header  # no UI address set
    assert "mirror behind" in header and f"workbench runs mirror {run_id}" in header
    _with(wb, mlflow_ui_url="http://mlflow.example:5000/")
    header = runs_tab.run_view(wb, run_id).header
    assert "href='http://mlflow.example:5000/#/runs/abc123'" in header
