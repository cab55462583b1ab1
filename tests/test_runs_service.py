"""The runs service: what the UI and the CLI see of the queue."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import event, insert

from jobs.process.fake_runner import InProcessRunner
from jobs.queue import table as queue
from jobs.queue.worker import Worker
from storage.models import FAILED, QUEUED, SUCCEEDED, Dataset, MetricPoint, Run
from tests.queue_support import fake_spec, qwb, wait_until  # noqa: F401
from workbench.errors import ConfigError, InvalidState, NotFound, WorkbenchError
from workbench.services import runs


def _drain(wb, *ids):
    worker = Worker(wb, InProcessRunner(wb), gpus=[])
    assert wait_until(lambda: all(runs.get_run(wb, i)["status"] in (SUCCEEDED, FAILED, "cancelled") for i in ids),
                      timeout=30, step=worker.loop_once)


def _count_queries(wb):
    statements: list[str] = []
    event.listen(wb.db.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    return statements


def test_get_run_has_the_documented_fields(qwb):
    run_id = runs.submit_run(qwb, fake_spec(qwb, name="demo"))
    record = runs.get_run(qwb, run_id)
    for key in ("id", "status", "progress", "step", "total_steps", "epoch", "eta_seconds", "metrics", "error",
                "error_detail", "device", "model", "task", "dataset", "created_at", "started_at", "finished_at",
                "spec", "output_dir", "attempts", "artifacts"):
        assert key in record, key
    assert record["status"] == QUEUED and record["progress"] == 0.0 and record["metrics"] == {}
    assert record["spec"]["data"]["train_path"].endswith("train.jsonl")
    with pytest.raises(NotFound):
        runs.get_run(qwb, 12345)


def test_progress_curves_metrics_and_artifacts_after_a_run(qwb):
    run_id = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:12:0.01"))
    _drain(qwb, run_id)
    record = runs.get_run(qwb, run_id)
    assert record["status"] == SUCCEEDED and record["progress"] == 1.0
    assert record["step"] == record["total_steps"] == 12 and record["finished_at"]
    assert record["metrics"]["loss"] == pytest.approx(1 / 12)
    assert {a["kind"] for a in record["artifacts"]} >= {"model", "checkpoint"}
    curve = runs.run_curves(qwb, run_id)["train/loss"]
    assert [p["step"] for p in curve] == list(range(1, 13)) and curve[0]["value"] == 1.0


def test_list_runs_filters_searches_and_orders(qwb):
    a = runs.submit_run(qwb, fake_spec(qwb, name="alpha sentiment"))
    b = runs.submit_run(qwb, fake_spec(qwb, "fake:raise", name="beta"))
    _drain(qwb, a, b)
    c = runs.submit_run(qwb, fake_spec(qwb, name="gamma"))
    assert [r["id"] for r in runs.list_runs(qwb)] == [c, b, a]
    assert [r["id"] for r in runs.list_runs(qwb, order_by="id")] == [a, b, c]
    assert [r["id"] for r in runs.list_runs(qwb, status=FAILED)] == [b]
    assert [r["id"] for r in runs.list_runs(qwb, search="SENTI")] == [a]
    assert [r["id"] for r in runs.list_runs(qwb, search=str(b))] == [b]
    assert [r["id"] for r in runs.list_runs(qwb, limit=1, offset=1)] == [b]
    assert runs.count_runs(qwb) == {SUCCEEDED: 1, FAILED: 1, QUEUED: 1}
    with pytest.raises(ConfigError):
        runs.list_runs(qwb, order_by="spec")


def test_runs_of_a_sweep_are_grouped_in_trial_order(qwb):
    from storage.models import Sweep

    with qwb.db.session() as session:
        sweeps = [Sweep(name=f"s{i}", task="text-classification", spec={}, study_name=f"study-{i}",
                        n_trials=2) for i in (1, 2)]
        session.add_all(sweeps)
        session.flush()
        first, second = (s.id for s in sweeps)
    plain_old = runs.submit_run(qwb, fake_spec(qwb, name="before"))
    submitted = [(sweep, trial, queue.submit(qwb.db, fake_spec(qwb, name=f"sweep {sweep} #{trial}"),
                                             qwb.settings.runs_dir, sweep_id=sweep, trial_number=trial))
                 for sweep, trial in ((first, 1), (second, 0), (first, 0), (second, 1))]
    plain_new = runs.submit_run(qwb, fake_spec(qwb, name="after"))
    by_id = {run_id: (sweep, trial) for sweep, trial, run_id in submitted}
    order = [r["id"] for r in runs.list_runs(qwb, order_by="sweep")]
    assert [by_id.get(i) for i in order] == [(second, 0), (second, 1), (first, 0), (first, 1), None, None]
    assert order[4:] == [plain_new, plain_old]
    assert [r["id"] for r in runs.list_runs(qwb, sweep_id=first, order_by="sweep")] == order[2:4]


def test_search_finds_wildcard_characters_literally(qwb):
    percent = runs.submit_run(qwb, fake_spec(qwb, name="100% of the data"))
    underscore = runs.submit_run(qwb, fake_spec(qwb, "my_model", name="plain"))
    slash = runs.submit_run(qwb, fake_spec(qwb, name="a/b split"))
    runs.submit_run(qwb, fake_spec(qwb, name="ordinary"))

    def found(text):
        return [r["id"] for r in runs.list_runs(qwb, search=text, order_by="id")]

    assert found("%") == [percent]
    assert found("_") == [underscore]
    assert found("y_m") == [underscore]
    assert found("0% o") == [percent]
    assert found("/") == [slash]
    assert found("a/b") == [slash]


def test_list_runs_with_1000_runs_is_one_fast_query(qwb):
    with qwb.db.session() as session:
        session.add(Dataset(id="d1", name="reviews", task="text-classification", format="csv", content_hash="h",
                            path="/x", num_train=1, num_validation=0))
        session.flush()
        spec = fake_spec(qwb).to_dict()
        session.execute(insert(Run), [{"name": f"r{i}", "task": "text-classification", "model": "m",
                                       "status": QUEUED, "spec": spec, "dataset_id": "d1", "metrics": {"f1": 0.5}}
                                      for i in range(1000)])
    statements = _count_queries(qwb)
    started = time.process_time()  # this process's CPU time: the wall clock counts the other work on the machine
    rows = runs.list_runs(qwb, limit=1000)
    elapsed = time.process_time() - started
    assert len(rows) == 1000 and rows[0]["dataset"] == "reviews"
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 1
    assert "spec" not in rows[0] and "error_detail" not in rows[0]
    assert elapsed < 2.0, f"listing 1000 runs took {elapsed:.2f} s of CPU"


def test_cancel_and_retry(qwb):
    run_id = runs.submit_run(qwb, fake_spec(qwb))
    assert runs.cancel_run(qwb, run_id) == "cancelled"
    assert runs.retry_run(qwb, run_id) == run_id
    assert runs.get_run(qwb, run_id)["status"] == QUEUED
    _drain(qwb, run_id)
    with pytest.raises(InvalidState, match="only failed or cancelled"):
        runs.retry_run(qwb, run_id)


def test_retry_resumes_a_failed_run_from_its_checkpoint(qwb):
    run_id = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:20:0.01"))
    claimed = queue.claim(qwb.db, "w")
    (Path(claimed.output_dir) / "checkpoints" / "checkpoint-15").mkdir(parents=True)
    (Path(claimed.output_dir) / "checkpoints" / "checkpoint-15" / "trainer_state.json").write_text("{}")
    queue.finish(qwb.db, run_id, claimed.attempt, FAILED, error="the machine rebooted")
    runs.retry_run(qwb, run_id)
    _drain(qwb, run_id)
    record = runs.get_run(qwb, run_id)
    assert record["status"] == SUCCEEDED and record["metrics"]["resumed_from"] == 15.0 and record["error"] is None


def test_clone_applies_nested_changes(qwb):
    source = runs.submit_run(qwb, fake_spec(qwb, name="base"))
    clone = runs.clone_run(qwb, source, {"train": {"learning_rate": 1e-5}, "name": "lower lr"})
    record = runs.get_run(qwb, clone)
    assert record["spec"]["train"]["learning_rate"] == 1e-5 and record["name"] == "lower lr"
    assert record["spec"]["data"] == runs.get_run(qwb, source)["spec"]["data"]
    assert record["parent_run_id"] == source
    with pytest.raises(ConfigError, match="unknown key"):
        runs.clone_run(qwb, source, {"train": {"learning_rat": 1}})


def test_continue_needs_a_succeeded_run(qwb):
    run_id = runs.submit_run(qwb, fake_spec(qwb))
    with pytest.raises(InvalidState, match="only a succeeded run can be continued"):
        runs.continue_run(qwb, run_id, 1)
    _drain(qwb, run_id)
    more = runs.continue_run(qwb, run_id, 1.5)
    spec = runs.get_run(qwb, more)["spec"]
    assert spec["init_from_run"] == run_id and spec["train"]["epochs"] == 1.5 and spec["train"]["warmup_ratio"] == 0
    with pytest.raises(ConfigError):
        runs.continue_run(qwb, run_id, 0)


def test_delete_removes_files_and_never_touches_other_runs(qwb):
    keep = runs.submit_run(qwb, fake_spec(qwb))
    gone = runs.submit_run(qwb, fake_spec(qwb, "fake:steps:6:0.01"))
    _drain(qwb, keep, gone)
    running = runs.submit_run(qwb, fake_spec(qwb))
    queue.claim(qwb.db, "w", only=[running])
    output = Path(runs.get_run(qwb, gone)["output_dir"])
    assert output.is_dir()
    before = {r["id"]: r["status"] for r in runs.list_runs(qwb)}
    runs.delete_run(qwb, gone)
    assert not output.exists()
    with pytest.raises(NotFound):
        runs.get_run(qwb, gone)
    after = {r["id"]: r["status"] for r in runs.list_runs(qwb)}
    assert after == {k: v for k, v in before.items() if k != gone}
    with qwb.db.session() as session:
        assert session.query(MetricPoint).filter_by(run_id=gone).count() == 0
    with pytest.raises(InvalidState, match="cancel it first"):
        runs.delete_run(qwb, running)


def test_delete_refuses_a_model_a_queued_run_starts_from(qwb):
    base = runs.submit_run(qwb, fake_spec(qwb))
    _drain(qwb, base)
    child = runs.continue_run(qwb, base, 1)
    with pytest.raises(InvalidState, match=f"starting model of run\\(s\\) {child}"):
        runs.delete_run(qwb, base)
    runs.cancel_run(qwb, child)
    runs.delete_run(qwb, base)
    assert runs.get_run(qwb, child)["status"] == "cancelled"


def test_submit_checks_references(qwb):
    spec = fake_spec(qwb)
    spec.data.dataset_id = "nope"
    with pytest.raises(NotFound, match="dataset nope"):
        runs.submit_run(qwb, spec)
    spec = fake_spec(qwb)
    spec.data.train_path = ""
    with pytest.raises(ConfigError, match="no training data"):
        runs.submit_run(qwb, spec)


def test_logs_and_wait(qwb):
    run_id = runs.submit_run(qwb, fake_spec(qwb, "fake:raise"))
    with pytest.raises(WorkbenchError, match="still queued"):
        runs.wait_for_run(qwb, run_id, timeout=0.1, poll=0.05)
    assert runs.run_logs(qwb, run_id) == ""
    _drain(qwb, run_id)
    assert runs.wait_for_run(qwb, run_id, timeout=1)["status"] == FAILED
