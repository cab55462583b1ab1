"""`workbench runs list|show|compare|cancel|retry|logs|mirror`: the queue from a terminal or a script.

The JSON output is a contract scripts depend on (see docs/cli.md, "CLI contract"): `runs show --json`
always has `id`, `status`, `progress` (0..1), `metrics`, `metrics_ci` (per headline metric its 95 %
bootstrap `low`/`high`, `{}` without per-example outcomes) and `error`; a queued run also has `queue`
(`position`, `ahead`, `after`, `expected_start_seconds`, `workers`, `unknown`).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from workbench.services import baselines
from workbench.services.specs import HEADLINE_METRICS
from storage.context import open_workbench
from workbench.cli import emit, id_argument, parse_id, runs_app
from storage.models import KIND_EXPORT, KIND_TRAIN
from workbench.services import comparisons
from workbench.services import exports as exports_service
from workbench.services import predictions as predictions_service
from workbench.services import runs as runs_service
from workbench.services import tracking as tracking_service
from workbench.ui import format as fmt


def _format_row(run: dict) -> str:
    values = run["metrics"] or {}
    metrics = ", ".join(f"{k}={values[k]:.4g}" for k in HEADLINE_METRICS.get(run["task"], ())
                        if isinstance(values.get(k), (int, float)))
    best = baselines.best(values)
    if metrics and best is not None:
        mark = {baselines.DID_NOT_LEARN: " (did not learn)", baselines.BELOW_BASELINE: " (below a baseline)",
                baselines.LEVEL_WITH_BASELINE: " (level with a baseline)"}.get(baselines.status(values), "")
        metrics += f" (baseline {best:.4g}){mark}"
    progress = f"{run['progress'] * 100:5.1f}%"
    phase = fmt.phase_text(run)
    of_run = f"  (run {run['parent_run_id']})" if run["kind"] != KIND_TRAIN and run["parent_run_id"] else ""
    return (f"{run['id']:>5}  {run['kind']:<8} {run['status']:<10} {progress}  {run['task']:<22} "
            f"{run['model'][:30]:<30} {metrics}{of_run}" + (f"  [{phase}]" if phase else ""))


@runs_app.command("list")
def list_(status: Optional[str] = typer.Option(None, help="Only runs in this status (queued, running, ...)."),
          search: Optional[str] = typer.Option(None, help="Filter by name, model, task or dataset."),
          kind: Optional[str] = typer.Option(None, help="Only training runs (train) or prediction/evaluation/"
                                                        "export jobs (predict, evaluate, export)."),
          limit: int = typer.Option(100, help="At most this many runs, newest first."),
          as_json: bool = typer.Option(False, "--json", help="Print JSON (a list of runs).")) -> None:
    """List runs, newest first."""
    with open_workbench() as wb:
        rows = runs_service.list_runs(wb, status=status, search=search, limit=limit, kind=kind)
    text = "\n".join([f"{'id':>5}  {'kind':<8} {'status':<10} {'done':>6}  {'task':<22} {'model':<30} metrics"]
                     + [_format_row(r) for r in rows]) if rows else "no runs"
    emit(rows, as_json, text)


@runs_app.command()
def show(run_id: int = id_argument("run"),
         as_json: bool = typer.Option(False, "--json", help="Print the full record as JSON.")) -> None:
    """Everything about one run: status, progress, metrics, error."""
    with open_workbench() as wb:
        run = runs_service.get_run(wb, run_id)
        if run["kind"] == KIND_EXPORT:
            run["outputs"] = [str(p) for p in exports_service.export_outputs(wb, run_id)]
            run["report"] = exports_service.export_report(wb, run_id)
        elif run["kind"] != KIND_TRAIN:
            run["outputs"] = [str(p) for p in predictions_service.job_outputs(wb, run_id)]
        if run["status"] == "queued":
            run["queue"] = runs_service.queue_position(wb, run_id)
        if run.get("seed_group") is not None:
            run["group"] = runs_service.group_summary(wb, run["seed_group"])
    if run["kind"] == KIND_TRAIN:
        lines = [f"run {run['id']}: {run['status']} ({run['progress'] * 100:.1f}%, "
                 f"step {run['step']}/{run['total_steps']})"]
    else:
        lines = _job_lines(run)
    lines.append(f"task {run['task']}, model {run['model']}, device {run['device'] or '-'}, "
                 f"attempts {run['attempts']}")
    phase = fmt.phase_text(run)
    if phase:
        lines.append(f"now: {phase}")
    if run.get("queue"):
        lines.append(f"queue: {fmt.queue_text(run['queue'])}")
    timing = fmt.live_estimate_line(run)
    if timing:
        lines.append(f"time: {timing}")
    if run.get("group"):
        lines.append(fmt.seed_group_text(run["group"]))
    intervals = run["metrics"].get("metrics_ci") or {}
    lines += [f"  {k}: {v}{_interval_text(intervals.get(k))}" for k, v in sorted(run["metrics"].items())
              if k not in ("baselines", "verdict", "metrics_ci")]
    if baselines.summary(run["metrics"]):
        where = "test set" if run["metrics"].get("test_set") else "validation split"
        lines.append(f"baselines on the same {where}: {baselines.summary(run['metrics'])}")
    if baselines.warning(run["metrics"]):
        lines.append(f"warning: this run {baselines.warning(run['metrics'])}")
    if run["error"]:
        lines.append(f"error: {run['error']}")
    run["metrics_ci"] = intervals
    emit(run, as_json, "\n".join(lines))


def _interval_text(interval: Optional[dict]) -> str:
    """`` [0.901, 0.923] (95 % bootstrap)`` after a metric that has an interval, else nothing."""
    if not interval:
        return ""
    return f" [{interval['low']:.4g}, {interval['high']:.4g}] ({interval['level'] * 100:g} % bootstrap)"


@runs_app.command()
def compare(a: int = id_argument("run", "Run A."), b: int = id_argument("run", "Run B, compared with A."),
            more: Optional[list[int]] = typer.Argument(None, metavar="ID",
                                                       help="More runs: rank them all and mark those not "
                                                            "distinguishable from the best."),
            metric: Optional[str] = typer.Option(None, help="The metric to compare (default: the task's "
                                                            "headline metric)."),
            as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Paired comparison of runs evaluated on the same examples: B − A with its 95 % bootstrap interval."""
    with open_workbench() as wb:
        if more:
            ids = [a, b, *(parse_id("run", str(run_id)) for run_id in more)]
            rows = comparisons.rank_runs(wb, ids, metric)
            emit(rows, as_json, "\n".join(_rank_line(row) for row in rows))
            return
        found = comparisons.compare_runs(wb, a, b, metric)
    lines = [found["verdict"], f"  run {a}: {_score_text(found['a'])}", f"  run {b}: {_score_text(found['b'])}",
             f"  difference (B − A): {found['difference']:+.4g} [{found['ci'][0]:+.4g}, {found['ci'][1]:+.4g}], "
             f"p = {found['p_value']:.3g}, {found['examples']} examples paired"]
    if "mcnemar" in found:
        test = found["mcnemar"]
        lines.append(f"  McNemar exact: {test['only_a']} right only in run {a}, {test['only_b']} only in run {b}, "
                     f"p = {test['p_value']:.3g}")
    emit(found, as_json, "\n".join(lines))


def _score_text(score: dict) -> str:
    return f"{score['value']:.4g} [{score['ci'][0]:.4g}, {score['ci'][1]:.4g}]"


def _rank_line(row: dict) -> str:
    mark = "best or not distinguishable from it" if row["with_best"] else "worse than the best"
    return f"run {row['run']}: {_score_text(row)}  {mark}"


def _job_lines(run: dict) -> list[str]:
    """What a prediction, evaluation or export job adds: its model's run, what it reads, rows done and its
    files (an export: where its ONNX files are)."""
    spec = run.get("spec") or {}
    parent = run["parent_run_id"] or spec.get("run_id")
    unit = "stages" if run["kind"] == KIND_EXPORT else "rows"  # an export's steps: see jobs.export.job.Stages
    lines = [f"job {run['id']} ({run['kind']} with the model of run {parent}): {run['status']} "
             f"({run['progress'] * 100:.1f}%, {run['step']}/{run['total_steps']} {unit})"]
    if run["kind"] == KIND_EXPORT:
        from workbench.commands.export import variant_lines

        onnx = sorted({str(Path(path).parent) for path in run["outputs"] if path.endswith(".onnx")})
        return lines + variant_lines(run.get("report") or {}) + [f"files: {folder}" for folder in onnx]
    if run["kind"] == "predict":
        lines.append(f"input: {spec.get('input_name') or spec.get('input_path')} "
                     f"({spec.get('input_format') or 'detected'}), output format {spec.get('output_format')}")
    else:
        facts = fmt.test_set_facts_text(run.get("metrics"))
        lines.append(f"test set: dataset {run['dataset_id'] or spec.get('dataset_id')}"
                     + (f" ({run['dataset']})" if run.get("dataset") else "") + (f": {facts}" if facts else ""))
    lines += ["outputs:"] + [f"  {path}" for path in run["outputs"]] if run["outputs"] else []
    return lines


@runs_app.command()
def cancel(run_id: int = id_argument("run")) -> None:
    """Cancel a run (a running one stops at its next step and keeps a checkpoint)."""
    with open_workbench() as wb:
        status = runs_service.cancel_run(wb, run_id)
    typer.echo(f"run {run_id}: {status}")


@runs_app.command()
def retry(run_id: int = id_argument("run")) -> None:
    """Queue a failed or cancelled run again; it resumes from its last checkpoint."""
    with open_workbench() as wb:
        runs_service.retry_run(wb, run_id)
    typer.echo(f"run {run_id}: queued")


@runs_app.command()
def mirror(run_ids: Optional[list[int]] = typer.Argument(None, metavar="[ID]...",
                                                         help="The runs to mirror (default: every training run)."),
           to: Optional[str] = typer.Option(None, "--to", help="mlflow or tensorboard (default: every tracker "
                                                               "that is set)."),
           as_json: bool = typer.Option(False, "--json", help="Print JSON (one outcome per run).")) -> None:
    """Write runs to MLflow or TensorBoard: catch up a mirror that fell behind, or mirror runs made before the
    tracker was set (WORKBENCH_MLFLOW_URI, WORKBENCH_TENSORBOARD_DIR; docs/tracking.md). Exit code 1 when a
    run could not be written."""
    with open_workbench() as wb:
        outcomes = tracking_service.mirror_runs(wb, run_ids or (), to)
    lines = [f"run {o['run_id']}: " + (", ".join(o["written"]) + " complete" if o["written"] else "")
             + ("; behind: " + "; ".join(o["behind"]) if o["behind"] else "") for o in outcomes]
    emit(outcomes, as_json, "\n".join(lines) or "no runs")
    if not all(o["ok"] for o in outcomes):
        raise typer.Exit(1)


@runs_app.command()
def logs(run_id: int = id_argument("run"), tail: int = typer.Option(200, help="How many lines to print first."),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends.")) -> None:
    """Print the run's log (the training process's output)."""
    with open_workbench() as wb:
        text = runs_service.run_logs(wb, run_id, tail)
        if text:
            typer.echo(text)
        if follow:
            _follow(wb, run_id)


def _follow(wb, run_id: int) -> None:
    path = runs_service.run_log_path(wb, run_id)
    position = path.stat().st_size if path and path.exists() else 0
    while True:
        finished = runs_service.get_run(wb, run_id)["status"] in runs_service.TERMINAL
        if path and path.exists():
            with open(path, "rb") as fh:
                fh.seek(position)
                chunk = fh.read()
                position += len(chunk)
            if chunk:
                typer.echo(chunk.decode("utf-8", "replace"), nl=False)
        if finished:
            return
        time.sleep(0.5)
