"""ONNX export jobs on the queue (issue 26): the refusals before queueing, ``jobs.process.run_job``'s dispatch of kind
"export", the views of ``workbench.services.exports``, the CLI, the Runs tab's Export panel, the model zip and
deletion with the model's run.

The dispatch tests hand ``execute`` a fake ``export_fn`` that writes what the real job writes (``onnx/`` and
``export.json``); one end-to-end test exports a tiny real finished run through the real job.
"""
from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from sqlalchemy import select

from jobs.export.spec import ExportSpec
from jobs.predict.spec import ModelRef
from jobs.process import run_job
from jobs.progress import Cancelled
from jobs.queue import table as queue
from jobs.specs.run import DataSpec, RunSpec
from storage.models import CANCELLED, FAILED, QUEUED, RUNNING, SUCCEEDED, Artifact, Run
from tests.predict_support import job_count, trained_run
from workbench.errors import InvalidState, NotFound
from workbench.services import exports, runs
from workbench.ui import export_panel

REPORT = {"task": "text-classification", "metric": "accuracy", "validation_rows": 12, "device": "cpu",
          "seconds": 1.5,
          "pytorch": {"name": "pytorch", "metric": 0.75, "p50_ms": 4.0, "p95_ms": 5.0, "rows_per_s": 200.0,
                      "bytes": 4_000_000},
          "variants": [
              {"name": "onnx-fp32", "path": "onnx/model.onnx", "status": "ok", "reason": "", "agreement": 1.0,
               "max_abs_diff": 1e-6, "metric": 0.75, "metric_drop": 0.0, "p50_ms": 2.0, "p95_ms": 2.5,
               "rows_per_s": 400.0, "bytes": 4_000_000},
              {"name": "onnx-int8", "path": "onnx/model_quantized.onnx", "status": "check before use",
               "reason": "accuracy dropped 8.3 points", "agreement": 0.9, "max_abs_diff": 0.2, "metric": 0.667,
               "metric_drop": 8.3, "p50_ms": 1.0, "p95_ms": 1.5, "rows_per_s": 800.0, "bytes": 1_000_000}]}


def fake_export(calls: list, *, fail: str = "", cancel: bool = False):
    """An ``export_fn`` that records its arguments and writes what the real job leaves: ``onnx/`` and the report."""
    def export_fn(spec, model, run_spec, output_dir, reporter, *, device):
        calls.append({"spec": spec, "model": model, "run_spec": run_spec, "output_dir": output_dir,
                      "device": device})
        reporter.phase("exporting fp32")
        if cancel:
            raise Cancelled()
        if fail:
            raise ValueError(fail)
        onnx = Path(output_dir) / "onnx"
        onnx.mkdir(parents=True, exist_ok=True)
        for name in ("model.onnx", "model_quantized.onnx", "config.json"):
            (onnx / name).write_bytes(b"graph of " + name.encode())
        (Path(output_dir) / "export.json").write_text(json.dumps(REPORT))
        return REPORT
    return export_fn


def run_export_job(wb, job_id: int, export_fn) -> int:
    """Claim the queued export job and run one attempt through ``jobs.process.run_job.execute``; its exit code."""
    claimed = queue.claim(wb.db, "worker", only=[job_id])
    assert claimed is not None and (claimed.id, claimed.kind) == (job_id, "export")
    return run_job.execute(wb, job_id, claimed.attempt, train_fn=None, export_fn=export_fn)


def exported(wb) -> tuple[int, int]:
    """A succeeded run exported by the fake: (run id, export job id)."""
    run_id = trained_run(wb)
    job_id = exports.queue_export(wb, run_id)
    assert run_export_job(wb, job_id, fake_export([])) == run_job.EXIT_SUCCEEDED
    return run_id, job_id


# -- queueing -----------------------------------------------------------------------------------------------

def _refused(wb, error, match: str, run_id: int) -> None:
    jobs = job_count(wb)
    with pytest.raises(error, match=match):
        exports.queue_export(wb, run_id)
    assert job_count(wb) == jobs  # nothing queued


def test_export_is_refused_for_runs_without_a_model_to_export(wb):
    _refused(wb, NotFound, "run 999 does not exist", 999)
    failed = trained_run(wb, FAILED, model=False)
    _refused(wb, InvalidState, f"run {failed} failed; only a succeeded run has a model to export", failed)
    training = trained_run(wb, RUNNING)
    _refused(wb, InvalidState, f"run {training} is still training; export it once it has succeeded", training)
    waiting = runs.submit_run(wb, RunSpec(task="text-classification", model="m",
                                          data=DataSpec(train_path=str(wb.settings.home / "data" / "train.jsonl"))))
    _refused(wb, InvalidState, f"run {waiting} has not started training yet \\(it is queued\\); export it", waiting)
    gone = trained_run(wb, SUCCEEDED, model=False)
    _refused(wb, InvalidState, f"run {gone} has no saved model .*model is missing\\); train it again", gone)


def test_export_is_refused_for_a_job_and_while_one_is_pending(wb):
    run_id = trained_run(wb)
    job_id = exports.queue_export(wb, run_id, int8=False)
    _refused(wb, InvalidState, f"run {job_id} is an export job, not a training run; export the run whose model "
                               f"it used \\(run {run_id}\\)", job_id)
    _refused(wb, InvalidState, f"run {run_id} is already being exported by job {job_id}; wait for it", run_id)
    with wb.db.session() as session:
        job = session.get(Run, job_id)
        assert (job.kind, job.status, job.parent_run_id, job.task) == ("export", QUEUED, run_id, "text-classification")
        assert ExportSpec.from_dict(job.spec) == ExportSpec(run_id=run_id, int8=False, fp16=None,
                                                            name=f"ONNX export of run {run_id}")
    runs.cancel_run(wb, job_id)  # a cancelled export no longer blocks another
    assert exports.queue_export(wb, run_id) > job_id


# -- the dispatch in jobs.process.run_job ---------------------------------------------------------------------------

def test_run_job_hands_an_export_its_model_and_the_runs_resolved_spec(wb):
    run_id = trained_run(wb)
    job_id = exports.queue_export(wb, run_id)
    calls: list = []
    assert run_export_job(wb, job_id, fake_export(calls)) == run_job.EXIT_SUCCEEDED
    (call,) = calls
    assert call["spec"] == ExportSpec(run_id=run_id, int8=True, name=f"ONNX export of run {run_id}")
    assert isinstance(call["model"], ModelRef) and call["model"].run_id == run_id
    assert call["model"].model_dir.endswith(f"{run_id}/model") and call["model"].labels == ("neg", "pos")
    assert isinstance(call["run_spec"], RunSpec) and Path(call["run_spec"].data.train_path).is_file()
    assert Path(call["output_dir"]) == wb.settings.runs_dir / str(job_id)
    job = runs.get_run(wb, job_id)
    assert job["status"] == SUCCEEDED and job["metrics"] == REPORT
    with wb.db.session() as session:
        kinds = {a.kind: Path(a.path).name for a in session.scalars(select(Artifact).where(Artifact.run_id == job_id))}
    assert kinds == {"metrics": "export.json", "onnx": "onnx"}
    latest = exports.latest_export(wb, run_id)
    assert (latest["id"], latest["status"], latest["report"]) == (job_id, SUCCEEDED, REPORT)
    assert latest["onnx_dir"] == str(wb.settings.runs_dir / str(job_id) / "onnx")
    assert exports.export_report(wb, job_id) == REPORT
    assert [p.name for p in exports.export_outputs(wb, job_id)] == ["export.json", "config.json", "model.onnx",
                                                                    "model_quantized.onnx"]


def test_a_failing_export_fails_the_job_with_its_message_and_a_cancel_cancels_it(wb):
    run_id = trained_run(wb)
    job_id = exports.queue_export(wb, run_id)
    assert run_export_job(wb, job_id, fake_export([], fail="the exporter broke")) == run_job.EXIT_FAILED
    job = exports.latest_export(wb, run_id)
    assert job["status"] == FAILED and "the exporter broke" in job["error"] and job["onnx_dir"] is None
    again = exports.queue_export(wb, run_id)
    assert run_export_job(wb, again, fake_export([], cancel=True)) == run_job.EXIT_CANCELLED
    assert runs.get_run(wb, again)["status"] == CANCELLED


def test_an_export_whose_run_was_deleted_fails_with_a_sentence(wb):
    run_id = trained_run(wb)
    job_id = exports.queue_export(wb, run_id)
    with wb.db.session() as session:  # the run's row goes behind the service's back (deleting it is refused)
        session.delete(session.get(Run, run_id))
    assert run_export_job(wb, job_id, fake_export([])) == run_job.EXIT_FAILED
    assert "no longer exists" in runs.get_run(wb, job_id)["error"]


# -- listing, deleting, the zip -----------------------------------------------------------------------------

def test_export_jobs_are_listed_shown_and_deleted_with_their_run(wb, cli):
    run_id, job_id = exported(wb)
    assert [r["id"] for r in runs.list_runs(wb, kind="export")] == [job_id]
    code, out, _ = cli("runs", "list", "--kind", "export")
    assert code == 0 and f"{job_id}  export" in out
    code, out, _ = cli("runs", "show", str(job_id), "--json")
    shown = json.loads(out)
    assert code == 0 and shown["kind"] == "export" and shown["report"] == REPORT
    assert any(path.endswith("onnx/model_quantized.onnx") for path in shown["outputs"])
    code, out, _ = cli("runs", "show", str(job_id))
    assert code == 0 and "onnx-int8" in out and "check before use" in out
    folder = wb.settings.runs_dir / str(job_id)
    runs.delete_run(wb, run_id)
    assert not folder.exists()
    with pytest.raises(NotFound):
        runs.get_run(wb, job_id)


def test_a_run_cannot_be_deleted_while_its_export_waits(wb):
    run_id = trained_run(wb)
    job_id = exports.queue_export(wb, run_id)
    with pytest.raises(InvalidState, match=f"used by queued or running job\\(s\\) {job_id}"):
        runs.delete_run(wb, run_id)


def test_the_model_zip_carries_the_latest_successful_export(wb):
    run_id = trained_run(wb)
    plain = exports.model_zip(wb, run_id)
    with zipfile.ZipFile(plain) as archive:
        assert archive.namelist() == ["config.json"]
    job_id = exports.queue_export(wb, run_id)
    run_export_job(wb, job_id, fake_export([]))
    with_onnx = exports.model_zip(wb, run_id)
    assert with_onnx != plain and exports.model_zip(wb, run_id) == with_onnx  # made once, then reused
    assert not plain.exists()  # the zip without the export is replaced, not kept beside it
    with zipfile.ZipFile(with_onnx) as archive:
        assert sorted(archive.namelist()) == ["config.json", "onnx/config.json", "onnx/model.onnx",
                                              "onnx/model_quantized.onnx"]
        assert archive.read("onnx/model.onnx") == b"graph of model.onnx"
    failed = exports.queue_export(wb, run_id)  # a failed later export leaves the good one in the zip
    run_export_job(wb, failed, fake_export([], fail="no"))
    assert exports.model_zip(wb, run_id) == with_onnx


# -- the CLI ------------------------------------------------------------------------------------------------

def test_cli_export_queues_and_prints_the_json_contract(wb, cli, monkeypatch):
    run_id = trained_run(wb)
    code, out, _ = cli("export", str(run_id), "--no-int8", "--json")
    queued = json.loads(out)
    assert code == 0 and queued == {"id": queued["id"], "status": "queued", "error": None, "variants": []}
    assert runs.get_run(wb, queued["id"])["spec"]["int8"] is False
    code, _, err = cli("export", str(run_id))
    assert code == 4 and f"already being exported by job {queued['id']}" in err
    runs.cancel_run(wb, queued["id"])

    # --wait: the worker's part is played by one attempt with the fake export.
    monkeypatch.setattr("workbench.commands.export._wait",
                        lambda wb_, job_id: run_export_job(wb, job_id, fake_export([])))
    code, out, _ = cli("export", str(run_id), "--wait", "--json")
    done = json.loads(out)
    assert code == 0 and done["status"] == "succeeded" and done["error"] is None
    assert [v["name"] for v in done["variants"]] == ["onnx-fp32", "onnx-int8"]
    fp32 = done["variants"][0]
    assert set(fp32) == {"name", "path", "status", "agreement", "metric", "p50_ms", "rows_per_s", "bytes"}
    assert fp32["path"] == str((wb.settings.runs_dir / str(done["id"]) / "onnx" / "model.onnx").resolve())
    assert (fp32["agreement"], fp32["rows_per_s"], fp32["bytes"]) == (1.0, 400.0, 4_000_000)


def test_cli_export_refusals_are_one_line_and_an_exit_code(wb, cli):
    assert cli("export", "abc")[0] == 3
    code, _, err = cli("export", "999")
    assert code == 3 and err.startswith("error: run 999 does not exist")
    failed = trained_run(wb, FAILED, model=False)
    code, _, err = cli("export", str(failed), "--json")
    assert code == 4 and err.strip().splitlines() == [f"error: run {failed} failed; only a succeeded run has a model "
                                                      "to export (retry it, or export another run)"]


# -- the Runs tab's Export panel ----------------------------------------------------------------------------

def test_export_panel_shows_the_report_pytorch_first_and_enables_export_only_for_a_succeeded_run(wb):
    run_id, job_id = exported(wb)
    values = export_panel.export_values(wb, run_id)
    assert values.can_export and f"Export job #{job_id}" in values.state and "succeeded" in values.state
    assert [row[:4] for row in values.rows] == [["pytorch", "reference", "—", "0.7500"],
                                                ["onnx-fp32", "ok", "100.00%", "0.7500"],
                                                ["onnx-int8", "check before use", "90.00%", "0.6670"]]
    assert values.rows[2][4:] == ["1.00", "1.50", "800.0", "1.0"]  # p50, p95, rows/s, MB
    # the status cell stays short, so the speed columns stay in view; why is said under the table
    assert "<b>onnx-int8</b> — check before use: accuracy dropped 8.3 points" in values.state
    mine = export_panel.export_values(wb, job_id)  # an export job shows its own report, and cannot be exported
    assert not mine.can_export and mine.rows == values.rows and f"of run #{run_id}" in mine.note
    failed = trained_run(wb, FAILED, model=False)
    assert not export_panel.export_values(wb, failed).can_export
    # the tick reads nothing more while nothing changed, and everything once the run has a new export
    key = values.key
    assert export_panel.on_tick(wb, run_id, key)[-1] == key
    queued = export_panel.queue_export(wb, run_id, False)
    assert queued.startswith("✔ Queued export job #") and "(fp32)" in queued
    note, button, state, rows, new_key = export_panel.on_tick(wb, run_id, key)
    assert new_key != key and "queued" in state and button["interactive"] is False  # one export at a time
    assert export_panel.queue_export(wb, failed, True).startswith(f"✘ run {failed} failed")


# -- end to end ---------------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_a_tiny_finished_run_is_really_exported_through_the_queue(wb, tmp_path, monkeypatch):
    from tests.export_support import tiny_run

    tiny = tiny_run(tmp_path / "built", "text-classification")
    spec = RunSpec(task="text-classification", model=tiny.model.model_dir,
                   data=DataSpec(train_path=tiny.run_spec.data.train_path,
                                 validation_path=tiny.run_spec.data.validation_path))
    run_id = runs.submit_run(wb, spec)
    claimed = queue.claim(wb.db, "trainer", only=[run_id])
    shutil.copytree(tiny.run_dir, claimed.output_dir, dirs_exist_ok=True)
    assert queue.finish(wb.db, run_id, claimed.attempt, SUCCEEDED)

    job_id = exports.queue_export(wb, run_id)
    written: list[tuple[float, str]] = []  # the job's row after each write: what the Runs tab polls
    flush = run_job.DbReporter.flush

    def watched(self):
        flush(self)
        row = runs.get_run(wb, job_id)
        written.append((row["progress"], row["phase"]))

    monkeypatch.setattr(run_job.DbReporter, "flush", watched)
    assert run_export_job(wb, job_id, None) == run_job.EXIT_SUCCEEDED, runs.get_run(wb, job_id)["error"]
    progress = [fraction for fraction, _ in written]
    assert progress == sorted(progress) and progress[-1] == 1.0 and len(set(progress)) > 5, written
    phases = {phase for _, phase in written}
    assert {"exporting onnx-fp32", "quantizing onnx-int8", "checking parity", "timing onnx-int8"} <= phases, written
    row = runs.get_run(wb, job_id)
    assert row["step"] == row["total_steps"] == 8 and row["progress"] == 1.0
    job = exports.latest_export(wb, run_id)
    report = job["report"]
    assert [v["name"] for v in report["variants"]][:2] == ["onnx-fp32", "onnx-int8"]
    fp32 = report["variants"][0]
    assert fp32["status"] == "ok" and fp32["agreement"] >= 0.999 and report["validation_rows"] == 12
    assert (Path(job["onnx_dir"]) / "model.onnx").is_file()
    with zipfile.ZipFile(exports.model_zip(wb, run_id)) as archive:
        names = set(archive.namelist())
    assert {"config.json", "onnx/model.onnx", "onnx/model_quantized.onnx", "onnx/config.json"} <= names


def test_serve_it_by_offers_a_variant_that_passed_its_checks_first(wb):
    from workbench.services import predictions
    from workbench.ui import runs_tab

    run_id, _ = exported(wb)
    options = predictions.runtime_options(wb, run_id)
    # the newest export's int8 is marked "check before use" (its accuracy dropped 8.3 points): listed last,
    # and never the one offered first
    assert options[-1] == ("onnx-int8 (check before use)", "onnx-int8")
    assert runs_tab.safe_runtime(wb, run_id) == predictions.safe_runtime(wb, run_id) == "onnx-fp32"
    assert runs_tab.safe_runtime(wb, None) == "pytorch" and predictions.safe_runtime(wb, 999) == "pytorch"
