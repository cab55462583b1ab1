"""`workbench predict` and `workbench evaluate`: put a trained run's model to work over whole files.

Both queue a job (a run of kind "predict" or "evaluate") and print its id; with ``--wait`` they block
until it ends, running it in this process when no worker is alive, as ``train --wait`` does. The
``--json`` output is a contract (docs/cli.md, "CLI contract"): predict prints ``{"id", "status", "rows",
"output"}``, evaluate ``{"id", "status", "metrics", "dataset_id"}``, both with ``error``.
"""
from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Optional

import typer

from workbench.cli import app, emit, id_argument

log = logging.getLogger(__name__)


def _columns(text_column: Optional[str], text_pair_column: Optional[str]) -> dict[str, str]:
    return {k: v for k, v in (("text", text_column), ("text_pair", text_pair_column)) if v}


def _wait(wb, job_id: int, what: str) -> dict[str, Any]:
    """Wait for a worker; with none alive, run this one job in-process so the command still completes."""
    from workbench.commands.waiting import worker_unless_one_is_alive
    from workbench.services import runs

    with worker_unless_one_is_alive(wb, [job_id], what):
        try:
            return runs.wait_for_run(wb, job_id)
        except KeyboardInterrupt:
            runs.cancel_run(wb, job_id)
            typer.echo(f"job {job_id}: cancel requested", err=True)
            raise


def _predictions_file(outputs: list[Path], output_format: str) -> Optional[Path]:
    """The job's output in the format asked for (a CoNLL input also gets a CoNLL file back)."""
    files = [p for p in outputs if p.name.startswith("predictions")]
    suffix = "." + output_format
    return next((p for p in files if p.suffix == suffix), files[0] if files else None)


def copy_output(source: Path, target: Path) -> Path:
    """Copy the finished file to where the user asked (into it, when it is a folder), through a temporary
    name: an interrupted copy never leaves a file that looks complete."""
    target = target.expanduser()
    if target.is_dir():
        target = target / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.part")
    try:
        shutil.copyfile(source, partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


@app.command()
def predict(
    run_id: int = id_argument("run", "The run whose model predicts (a succeeded training run)."),
    input_path: Path = typer.Option(..., "--input", help="The file to predict on: CSV, TSV, JSONL, TXT (one text "
                                                          "per line), CoNLL or SQuAD JSON; or a stored dataset id "
                                                          "or name (its records, training then validation split)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the finished predictions here (a file, or "
                                                                 "a folder to put it in); implies --wait."),
    output_format: str = typer.Option("csv", "--format", help="Output format: csv, jsonl or parquet."),
    input_format: Optional[str] = typer.Option(None, "--input-format", help="csv, tsv, jsonl, txt, conll or squad "
                                                                            "(default: detected)."),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="The column (or JSON key) with the text."),
    text_pair_column: Optional[str] = typer.Option(None, "--text-pair-column",
                                                   help="The column with the second text of a pair (QA: the context)."),
    runtime: str = typer.Option("pytorch", "--runtime", help="What predicts: pytorch, or an ONNX variant of the "
                                                            "run's newest export (onnx-fp32, onnx-int8, onnx-fp16)."),
    wait: bool = typer.Option(False, "--wait", help="Block until the job ends and print its result."),
    as_json: bool = typer.Option(False, "--json", help='Print JSON: {"id", "status", "rows", "output", "error"}.'),
) -> None:
    """Queue a prediction of a run's model over a whole file and print the job id (with --wait: its result)."""
    from storage.context import open_workbench
    from workbench.services import predictions

    with open_workbench() as wb:
        if input_path.expanduser().exists():
            job_id = predictions.submit_prediction(wb, run_id, input_path, input_format=input_format,
                                                   columns=_columns(text_column, text_pair_column),
                                                   output_format=output_format, runtime=runtime)
        else:
            job_id = _predict_dataset(wb, run_id, str(input_path), output_format,
                                      given=input_format or text_column or text_pair_column, runtime=runtime)
        reads = predictions.get_job(wb, job_id)["reads"]
        if reads and not as_json:  # which column holds the text is said, never guessed silently
            typer.echo(f"job {job_id} reads the {predictions.reads_text(reads)}", err=True)
        if not (wait or output):
            emit({"id": job_id, "status": "queued", "rows": 0, "output": None, "error": None}, as_json, str(job_id))
            return
        if not as_json:
            typer.echo(str(job_id))
        _wait(wb, job_id, f"prediction job {job_id}")
        job = predictions.get_job(wb, job_id)
    _report_prediction(job, output, output_format, as_json)


def _predict_dataset(wb, run_id: int, name: str, output_format: str, given: Any, runtime: str = "pytorch") -> int:
    """A prediction job over the stored dataset ``name`` (``--input`` named no file)."""
    from workbench.errors import ConfigError, NotFound
    from workbench.services import datasets, predictions

    predictions.model_run_checked(wb, run_id)  # a missing run is said as such, not as a missing file
    try:
        datasets.get_dataset(wb, name)
    except NotFound:
        raise NotFound(f"no such file or stored dataset: {name} (`workbench data list` shows the stored "
                       "datasets)") from None
    if given:
        raise ConfigError("--input-format, --text-column and --text-pair-column describe a file; a stored "
                          "dataset's records are read as they were imported")
    return predictions.submit_dataset_prediction(wb, run_id, name, output_format=output_format, runtime=runtime)


def _report_prediction(job: dict[str, Any], output: Optional[Path], output_format: str, as_json: bool) -> None:
    """Copy the finished file where the user asked and print the result; exit 1 unless it succeeded."""
    produced = _predictions_file([Path(p) for p in job["outputs"]], output_format)
    written = copy_output(produced, output) if output and produced else produced
    rows = job["metrics"].get("rows") if isinstance(job["metrics"].get("rows"), int) else job["rows_done"]
    final = {"id": job["id"], "status": job["status"], "rows": rows, "output": str(written) if written else None,
             "error": job["error"]}
    text = (f"job {job['id']}: {job['status']}, {rows} row(s)" + (f" -> {written}" if written else "")
            + (f"\nerror: {job['error']}" if job["error"] else ""))
    emit(final, as_json, text)
    if job["status"] != "succeeded":
        raise typer.Exit(1)


@app.command()
def evaluate(
    run_id: int = id_argument("run", "The run to evaluate (a succeeded training run)."),
    data: str = typer.Option(..., "--data", help="The labelled test set: a stored dataset id or name, or a file "
                                                 "(imported whole as a dataset: the same file is the same test set)."),
    input_format: Optional[str] = typer.Option(None, "--input-format", help="Format of a --data file "
                                                                            "(default: detected)."),
    text_column: Optional[str] = typer.Option(None, "--text-column", help="The column with the text (a file)."),
    text_pair_column: Optional[str] = typer.Option(None, "--text-pair-column", help="The second text's column."),
    wait: bool = typer.Option(False, "--wait", help="Block until the evaluation ends and print its metrics."),
    as_json: bool = typer.Option(False, "--json", help='Print JSON: {"id", "status", "metrics", "dataset_id", '
                                                       '"error"}.'),
) -> None:
    """Queue an evaluation of a run on a labelled test set and print the job id (with --wait: its metrics)."""
    from storage.context import open_workbench
    from workbench.services import predictions

    with open_workbench() as wb:
        job_id = predictions.submit_evaluation(wb, run_id, data, input_format=input_format,
                                               columns=_columns(text_column, text_pair_column))
        dataset_id = predictions.get_job(wb, job_id)["dataset_id"]
        if not wait:
            emit({"id": job_id, "status": "queued", "metrics": {}, "dataset_id": dataset_id, "error": None},
                 as_json, str(job_id))
            return
        if not as_json:
            typer.echo(str(job_id))
        _wait(wb, job_id, f"evaluation job {job_id}")
        job = predictions.get_job(wb, job_id)
    final = {"id": job_id, "status": job["status"], "metrics": job["metrics"], "dataset_id": dataset_id,
             "error": job["error"]}
    metrics = "\n".join(f"  {k}: {v}" for k, v in sorted(job["metrics"].items()) if not isinstance(v, (dict, list)))
    emit(final, as_json, f"job {job_id}: {job['status']} (run {run_id} on dataset {dataset_id})"
         + (f"\n{metrics}" if metrics else "") + (f"\nerror: {job['error']}" if job["error"] else ""))
    if job["status"] != "succeeded":
        raise typer.Exit(1)
