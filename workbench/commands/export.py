"""`workbench export RUN_ID`: queue an ONNX export of a succeeded run's model.

It prints the job's id; with ``--wait`` it blocks until the export ends (running it in this process when no
worker is alive, as ``predict --wait`` does) and prints each variant's parity and speed. The ``--json``
output is a contract (docs/cli.md): ``{"id", "status", "error", "variants": [{"name", "path" (absolute),
"status", "agreement", "metric", "p50_ms", "rows_per_s", "bytes"}]}``; ``variants`` is empty until the job
has a report.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import typer

from workbench.cli import app, emit, id_argument

log = logging.getLogger(__name__)

VARIANT_KEYS = ("name", "path", "status", "agreement", "metric", "p50_ms", "rows_per_s", "bytes")


def json_result(job: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` shape of an export job (see the module docstring): variant paths made absolute."""
    folder = Path(job.get("output_dir") or "")
    variants = []
    for variant in (job.get("report") or {}).get("variants") or []:
        row = {key: variant.get(key) for key in VARIANT_KEYS}
        if row["path"]:
            row["path"] = str((folder / row["path"]).resolve())
        variants.append(row)
    return {"id": job["id"], "status": job["status"], "error": job.get("error"), "variants": variants}


def _number(value: Any, spec: str, unit: str = "") -> str:
    return f"{value:{spec}}{unit}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "—"


def text_result(job: dict[str, Any]) -> str:
    """What a person reads: the job's state, then one line per runtime, PyTorch first."""
    lines = [f"job {job['id']}: {job['status']}" + (f" (export of run {job['run_id']})" if job.get("run_id") else "")]
    lines += variant_lines(job.get("report") or {})
    if job.get("onnx_dir"):
        lines.append(f"files: {job['onnx_dir']}")
    if job.get("error"):
        lines.append(f"error: {job['error']}")
    return "\n".join(lines)


def variant_lines(report: dict[str, Any]) -> list[str]:
    """One line per runtime of an export report, PyTorch first: status, agreement, metric, speed, size."""
    metric = report.get("metric") or "metric"
    rows = [{**report["pytorch"], "status": "reference"}] if isinstance(report.get("pytorch"), dict) else []
    return [_row_line(row, metric) for row in rows + list(report.get("variants") or [])]


def _row_line(row: dict[str, Any], metric: str) -> str:
    agreement = "—" if row.get("name") == "pytorch" else _number(row.get("agreement"), ".2%")
    size = row["bytes"] / 1e6 if isinstance(row.get("bytes"), (int, float)) else None
    reason = f"  ({row['reason']})" if row.get("reason") else ""
    return (f"  {row.get('name', '?'):<10} {row.get('status') or '':<17} agreement {agreement:>8}  "
            f"{metric} {_number(row.get('metric'), '.4f')}  p50 {_number(row.get('p50_ms'), '.2f', ' ms')}  "
            f"{_number(row.get('rows_per_s'), '.1f', ' rows/s')}  {_number(size, '.1f', ' MB')}{reason}")


def _wait(wb, job_id: int) -> None:
    """Wait for a worker to finish the job; with none alive, run it in this process so the command completes."""
    from workbench.commands.waiting import worker_unless_one_is_alive
    from workbench.services import runs

    with worker_unless_one_is_alive(wb, [job_id], f"export job {job_id}"):
        try:
            runs.wait_for_run(wb, job_id)
        except KeyboardInterrupt:
            runs.cancel_run(wb, job_id)
            typer.echo(f"job {job_id}: cancel requested", err=True)
            raise


@app.command()
def export(
    run_id: int = id_argument("run", "The run whose model to export (a succeeded training run)."),
    int8: bool = typer.Option(True, "--int8/--no-int8", help="Also write the dynamic int8 variant (default: on)."),
    wait: bool = typer.Option(False, "--wait", help="Block until the export ends and print its parity and speed "
                                                    "report."),
    as_json: bool = typer.Option(False, "--json", help='Print JSON: {"id", "status", "error", "variants"}.'),
) -> None:
    """Queue an ONNX export of a run's model and print the job id (with --wait: its report)."""
    from storage.context import open_workbench
    from workbench.services import exports

    with open_workbench() as wb:
        job_id = exports.queue_export(wb, run_id, int8=int8)
        if not wait:
            emit(json_result(exports.get_export(wb, job_id)), as_json, str(job_id))
            return
        if not as_json:
            typer.echo(str(job_id))
        _wait(wb, job_id)
        job = exports.get_export(wb, job_id)
    emit(json_result(job), as_json, text_result(job))
    if job["status"] != "succeeded":
        raise typer.Exit(1)
