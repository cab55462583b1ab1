"""Shipping a finished run's model: ONNX export jobs, their reports, and the model zip that carries them.

An export is a run of another kind (``storage.models.KIND_EXPORT``) on the same queue as training, with the
model's run as its ``parent_run_id`` and a ``jobs.export.spec.ExportSpec`` as its spec, so a worker claims,
leases, cancels and retries it like any job (``jobs.process.run_job`` hands it to ``jobs.export.job``). This module
refuses what cannot be exported before anything is queued, and gives the views the UI and the CLI share:
a run's latest export with its report (``export.json``), and the downloadable zip of the model with the
latest successful export's ``onnx/`` folder in it. Plain dicts out, ``workbench.errors`` raised; no gradio.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import re
import uuid
import zipfile
from pathlib import Path
from typing import Any, Iterator, Optional

from sqlalchemy import select

from jobs.export.runtime import ONNX_DIR, latest_onnx_dir
from jobs.export.spec import ExportSpec
from jobs.queue import table as queue
from jobs.queue.states import ACTIVE
from storage.context import Workbench
from storage.models import FAILED, KIND_EXPORT, KIND_TRAIN, QUEUED, SUCCEEDED, Run
from workbench.errors import InvalidState, NotFound
from workbench.services.predictions import Wording, model_run

log = logging.getLogger(__name__)

REPORT_FILE = "export.json"  # in an export job's output folder: the report, also the job's metrics
PENDING = (QUEUED, *ACTIVE)
EXPORT_WORDS = Wording(act="export it", use="to export", instead="export another run", redirect="export",
                       again=" to export it")


def _exportable(session, run_id: int) -> Run:
    """The training run ``run_id`` once its model can be exported: it exists, succeeded and kept its model
    folder, and no export of it is already waiting or running."""
    run = model_run(session, run_id, EXPORT_WORDS)
    pending = session.scalar(select(Run.id).where(Run.parent_run_id == run_id, Run.kind == KIND_EXPORT,
                                                  Run.status.in_(PENDING)).order_by(Run.id.desc()).limit(1))
    if pending is not None:
        raise InvalidState(f"run {run_id} is already being exported by job {pending}; wait for it (or cancel "
                           "it) before exporting again")
    return run


def queue_export(wb: Workbench, run_id: int, *, int8: bool = True, fp16: Optional[bool] = None,
                 priority: int = 0, owner_id: Optional[int] = None) -> int:
    """Queue an ONNX export of run ``run_id``'s model (fp32, plus int8 unless ``int8`` is False; fp16 by
    default only on a GPU); returns the job's id. Refused before queueing when the run cannot be exported."""
    with wb.db.session() as session:
        run = _exportable(session, run_id)
        task, model = run.task, run.model
    spec = ExportSpec(run_id=run_id, int8=bool(int8), fp16=fp16, name=f"ONNX export of run {run_id}")
    job_id = queue.submit_job(wb.db, KIND_EXPORT, spec.to_dict(), wb.settings.runs_dir, parent_run_id=run_id,
                              task=task, model=model, name=spec.name, priority=priority, owner_id=owner_id)
    log.info("queued export job %s: run %s (int8 %s)", job_id, run_id, spec.int8)
    return job_id


def _iso(value: Optional[dt.datetime]) -> Optional[str]:
    return value.isoformat(timespec="seconds") + "Z" if value else None


def read_report(output_dir: str | Path | None) -> dict[str, Any]:
    """The report an export job wrote (``export.json``); ``{}`` when it has none (yet) or it is unreadable."""
    if not output_dir:
        return {}
    try:
        value = json.loads((Path(output_dir) / REPORT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _export_dict(job: Run) -> dict[str, Any]:
    """One export job as the UI and the CLI show it: its state, and its report once it has one (``export.json``,
    else the metrics the job recorded: a failed parity check still says which variant failed and why)."""
    report = read_report(job.output_dir) if job.status in (SUCCEEDED, FAILED) else {}
    if not report and isinstance(job.metrics, dict) and "variants" in job.metrics:
        report = dict(job.metrics)
    onnx_dir = Path(job.output_dir) / ONNX_DIR if job.output_dir else None
    return {"id": job.id, "kind": job.kind, "run_id": job.parent_run_id or (job.spec or {}).get("run_id"),
            "status": job.status, "phase": job.phase, "phase_done": job.phase_done,
            "phase_total": job.phase_total, "progress": float(job.progress or 0.0), "error": job.error,
            "int8": bool((job.spec or {}).get("int8", True)), "created_at": _iso(job.created_at),
            "finished_at": _iso(job.finished_at), "output_dir": job.output_dir,
            "onnx_dir": str(onnx_dir) if job.status == SUCCEEDED and onnx_dir and onnx_dir.is_dir() else None,
            "report": report}


def _require_export(session, job_id: int) -> Run:
    job = session.get(Run, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist; `workbench runs list --kind export` shows the export jobs")
    if job.kind != KIND_EXPORT:
        what = "a training run" if job.kind == KIND_TRAIN else f"a {job.kind} job"
        raise InvalidState(f"run {job_id} is {what}, not an export job")
    return job


def get_export(wb: Workbench, job_id: int) -> dict[str, Any]:
    """One export job (``_export_dict``); refused for a run of another kind."""
    with wb.db.session() as session:
        return _export_dict(_require_export(session, job_id))


def export_report(wb: Workbench, job_id: int) -> dict[str, Any]:
    """The report of export job ``job_id`` (``{}`` until it has one)."""
    return get_export(wb, job_id)["report"]


def latest_export(wb: Workbench, run_id: int) -> Optional[dict[str, Any]]:
    """The newest export job of run ``run_id`` whatever its state (``_export_dict``), or None when it has none."""
    with wb.db.session() as session:
        job = session.scalars(select(Run).where(Run.parent_run_id == run_id, Run.kind == KIND_EXPORT)
                              .order_by(Run.id.desc()).limit(1)).first()
        return _export_dict(job) if job is not None else None


def export_key(wb: Workbench, run_id: int) -> str:
    """A short string that changes whenever what a page shows about run ``run_id``'s export changes: the run's
    kind and state and those of its newest export (or, for an export job, its own). Narrow queries, for a page
    that polls and reads the report only when this changed."""
    state = (Run.kind, Run.status, Run.phase, Run.phase_done, Run.error)
    with wb.db.session() as session:
        run = session.execute(select(Run.id, *state).where(Run.id == run_id)).first()
        job = None
        if run is not None and run.kind != KIND_EXPORT:
            job = session.execute(select(Run.id, *state).where(Run.parent_run_id == run_id, Run.kind == KIND_EXPORT)
                                  .order_by(Run.id.desc()).limit(1)).first()
    return json.dumps([*(run or (run_id,)), *(job or ())], default=str)


def export_outputs(wb: Workbench, job_id: int) -> list[Path]:
    """The files a finished export made: its report, then every file of its ``onnx/`` folder (none before it
    succeeded, so never a half-written one)."""
    job = get_export(wb, job_id)
    if job["status"] != SUCCEEDED or not job["output_dir"]:
        return []
    folder = Path(job["output_dir"])
    report = [folder / REPORT_FILE] if (folder / REPORT_FILE).is_file() else []
    onnx = sorted(p for p in (folder / ONNX_DIR).rglob("*") if p.is_file()) if job["onnx_dir"] else []
    return report + onnx


def _files(folder: Path) -> Iterator[Path]:
    return (p for p in sorted(folder.rglob("*")) if p.is_file())


def model_zip(wb: Workbench, run_id: int) -> Path:
    """Zip the run's model folder and, when the run has a successful export, that export's ``onnx/`` folder
    under ``onnx/`` (made once; reused while neither folder has changed); returns the zip's path.

    The zip is written under a temporary name and renamed, so a download never gets a half-written one."""
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise NotFound(f"run {run_id} does not exist")
        model_dir = Path(run.output_dir or "") / "model"
        if not run.output_dir or not model_dir.is_dir():
            raise InvalidState(f"run {run_id} has no saved model folder to download")
        name = _slug(run.name or run.task)
    onnx_dir = latest_onnx_dir(wb.db, run_id)
    sources = [(model_dir, "")] + ([(onnx_dir, ONNX_DIR + "/")] if onnx_dir else [])
    newest = max((p.stat().st_mtime for folder, _ in sources for p in _files(folder)), default=0.0)
    # The name says whether the zip carries an export, so a zip made before an export was deleted is not reused.
    suffix = f"-onnx{onnx_dir.parent.name}" if onnx_dir else ""
    target = model_dir.parent / f"{name}-run{run_id}-model{suffix}.zip"
    if target.is_file() and target.stat().st_mtime >= newest:
        return target
    _write_zip(target, sources)
    for stale in model_dir.parent.glob(f"{name}-run{run_id}-model*.zip"):
        if stale != target:
            stale.unlink(missing_ok=True)  # a zip of an older export, or of none: this one replaces it
    log.info("zipped run %s's model%s to %s", run_id, " with its ONNX export" if onnx_dir else "", target)
    return target


def _write_zip(target: Path, sources: list[tuple[Path, str]]) -> None:
    """Every file of each (folder, prefix in the zip) into ``target``, through a temporary name of its own (two
    downloads at once each write their own) renamed over it."""
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
    try:
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for folder, prefix in sources:
                for path in _files(folder):
                    archive.write(path, prefix + path.relative_to(folder).as_posix())
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def _slug(text: str) -> str:
    """A file-name-safe version of a run's name."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-") or "model"


def delete_exports_of(session, run_id: int) -> list[Path]:
    """Delete run ``run_id``'s finished export jobs (an export is a copy of the model, useless once the model's
    run is gone) in ``session``; returns their folders for the caller to remove after the commit."""
    jobs = session.scalars(select(Run).where(Run.parent_run_id == run_id, Run.kind == KIND_EXPORT)).all()
    folders = [Path(job.output_dir) for job in jobs if job.output_dir]
    for job in jobs:
        session.delete(job)
    return folders
