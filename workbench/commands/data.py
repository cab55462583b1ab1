"""`workbench data validate|import|list|show|delete|audit|audit-show|audits`.

Thin: options in, a service call, output out.

Scripts depend on these names and on the JSON keys; errors are printed by ``workbench.cli.main``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer

from storage.context import open_workbench
from storage.datasets import ColumnMapping
from storage.datasets.stats import windows_message
from workbench.cli import data_app, emit, id_argument
from workbench.services import datasets as service

T = TypeVar("T")

TASK = typer.Option(..., "--task", help="text-classification, token-classification, question-answering or masked-lm")
FORMAT = typer.Option(None, "--format", help="csv, tsv, jsonl, conll, squad or text (default: detected)")
TEXT_COLUMN = typer.Option(None, "--text-column", help="Column (or JSON key) with the text.")
LABEL_COLUMN = typer.Option(None, "--label-column", help="Column (or JSON key) with the label.")
TEXT_PAIR_COLUMN = typer.Option(None, "--text-pair-column", help="Second text of a pair.")
LABEL_SEPARATOR = typer.Option(None, "--label-separator", help="Splits multi-label cells, e.g. '|'.")
AS_JSON = typer.Option(False, "--json", help="Print JSON.")


def _with_workbench(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call a service with a workbench opened from the environment, and close it."""
    with open_workbench() as wb:
        return fn(wb, *args, **kwargs)


def _columns(text: Optional[str], label: Optional[str], pair: Optional[str],
             separator: Optional[str]) -> ColumnMapping | None:
    if not any((text, label, pair, separator)):
        return None
    return ColumnMapping(text=text, label=label, text_pair=pair, label_separator=separator)


def _labels_line(labels: dict[str, int] | None) -> str:
    if not labels:
        return ""
    shown = ", ".join(f"{k} {v}" for k, v in list(labels.items())[:20])
    more = f", ... ({len(labels)} in all)" if len(labels) > 20 else ""
    return f"\nlabels: {shown}{more}"


def _tokens_line(stats: dict[str, Any] | None) -> str:
    if not stats or not stats.get("count"):
        return ""
    sampled = f", sample of {stats['count']}" if stats.get("sampled") else ""
    return (f"\ntokens ({stats['tokenizer']}{sampled}): mean {stats['mean']}, median {stats['p50']}, "
            f"p95 {stats['p95']}, max {stats['max']}; {stats['truncated_share']:.1%} longer than "
            f"{stats['max_length']}" + (f"\n{windows_message(stats.get('windows'))}"
                                        if windows_message(stats.get("windows")) else ""))


def _warnings_block(warnings: list) -> str:
    return "".join(f"\n  {w}" for w in warnings) if warnings else ""


@data_app.command("validate")
def validate(
    path: Path = typer.Argument(..., help="The data file."),
    task: str = TASK,
    format: Optional[str] = FORMAT,
    text_column: Optional[str] = TEXT_COLUMN,
    label_column: Optional[str] = LABEL_COLUMN,
    text_pair_column: Optional[str] = TEXT_PAIR_COLUMN,
    label_separator: Optional[str] = LABEL_SEPARATOR,
    max_length: int = typer.Option(128, "--max-length", help="Token length counted as truncated above."),
    as_json: bool = AS_JSON,
) -> None:
    """Check a data file and print its statistics; exit 2 with one line per problem when it is invalid."""
    report = _with_workbench(service.validate_file, path, task, format=format, max_length=max_length,
                             columns=_columns(text_column, label_column, text_pair_column, label_separator))
    text = (f"{path}: valid {report.task} data ({report.format}), {report.examples} examples "
            f"({report.train} train / {report.validation} validation after the default split)"
            f"{_labels_line(report.labels)}{_tokens_line(report.token_stats)}"
            f"\nwarnings: {sum(report.warning_counts.values())}{_warnings_block(report.warnings)}")
    emit(report.to_dict(), as_json, text)


@data_app.command("import")
def import_(
    path: Path = typer.Argument(..., help="The data file."),
    task: str = TASK,
    name: Optional[str] = typer.Option(None, "--name", help="Display name (default: the file name)."),
    validation: Optional[Path] = typer.Option(None, "--validation", help="A separate validation file (no split)."),
    validation_fraction: float = typer.Option(0.1, "--validation-fraction", help="Share held out for validation."),
    seed: int = typer.Option(13, "--seed", help="Seed of the train/validation split."),
    format: Optional[str] = FORMAT,
    text_column: Optional[str] = TEXT_COLUMN,
    label_column: Optional[str] = LABEL_COLUMN,
    text_pair_column: Optional[str] = TEXT_PAIR_COLUMN,
    label_separator: Optional[str] = LABEL_SEPARATOR,
    as_json: bool = AS_JSON,
) -> None:
    """Validate and store a data file; prints the dataset id."""
    summary = _with_workbench(service.import_dataset, path, task, name=name, format=format,
                              validation_path=validation, validation_fraction=validation_fraction, seed=seed,
                              columns=_columns(text_column, label_column, text_pair_column, label_separator))
    if as_json:
        emit(summary.to_dict(), True)
        return
    emit(None, False, summary.id)
    note = "already imported: reusing" if summary.reused else "imported"
    typer.echo(f"{note} {summary.name!r}: {summary.examples} examples ({summary.train} train / "
               f"{summary.validation} validation), {len(summary.warnings)} warning(s)", err=True)


@data_app.command("list")
def list_(
    task: Optional[str] = typer.Option(None, "--task", help="Only datasets of this task."),
    as_json: bool = AS_JSON,
) -> None:
    """List stored datasets, newest first."""
    rows = _with_workbench(service.list_datasets, task)
    lines = [f"{d.id}  {d.task:<21} {d.examples:>8}  {d.created_at}  {d.name}" for d in rows]
    emit([d.to_dict() for d in rows], as_json, "\n".join(lines) if lines else "no datasets yet")


@data_app.command("show")
def show(
    dataset: str = typer.Argument(..., help="Dataset id, id prefix or name."),
    as_json: bool = AS_JSON,
) -> None:
    """Show one stored dataset: counts, labels, token lengths, warnings."""
    d = _with_workbench(service.get_dataset, dataset)
    text = (f"{d.id} {d.name!r}: {d.task} ({d.format}), {d.examples} examples ({d.train} train / "
            f"{d.validation} validation)\nfolder: {d.path}{_labels_line(d.labels)}"
            f"{_tokens_line(d.stats.get('token_stats'))}\nwarnings: "
            f"{sum((d.stats.get('warning_counts') or {}).values())}"
            f"{_warnings_block(d.warnings)}")
    emit(d.to_dict(), as_json, text)


@data_app.command("delete")
def delete(dataset: str = typer.Argument(..., help="Dataset id, id prefix or name.")) -> None:
    """Delete a stored dataset (runs that used it keep their results)."""
    d = _with_workbench(service.delete_dataset, dataset)
    typer.echo(f"deleted {d.id} {d.name!r}")


def _issue_lines(issues: list[dict], top: int) -> str:
    if not issues:
        return "no suspicious labels found"
    lines = [f"{'rank':>4}  {'example':<16} {'given':<16} {'suggested':<16} {'conf.':>5}  text"]
    for row in issues[:top]:
        text = row.get("text") if "text" in row else " ".join(row.get("tokens") or [])
        given, suggested = str(row["given"]), str(row["suggested"])
        lines.append(f"{row['rank']:>4}  {row['example']:<16} {given[:16]:<16} {suggested[:16]:<16} "
                     f"{row['confidence']:>5.2f}  {' '.join(str(text).split())[:80]}")
    if len(issues) > top:
        lines.append(f"... {len(issues) - top} more (--top N shows more, --json all of them)")
    return "\n".join(lines)


def _audit_text(record: dict, issues: list[dict] | None, top: int) -> str:
    head = f"audit {record['id']} of {record.get('dataset') or record.get('dataset_id')}: {record['state']}, " \
           f"{record['message']}"
    folds = "\n".join(f"  fold {f['fold'] + 1}: run {f['run_id']} {f['status']}" for f in record["folds"])
    return head + (f"\n{folds}" if folds and issues is None else "") + (
        f"\n{_issue_lines(issues, top)}" if issues is not None else "")


@data_app.command("audit")
def audit(
    dataset: str = typer.Argument(..., help="Dataset id, id prefix or name."),
    folds: int = typer.Option(5, "--folds", help="Cross-validation folds: one training run each (2 to 20)."),
    model: Optional[str] = typer.Option(None, "--model", help="Model of the fold runs (default: the packaged "
                                                                 "MiniLM)."),
    preset: str = typer.Option("quick", "--preset", help="quick, standard or thorough, for every fold run."),
    seed: int = typer.Option(42, "--seed", help="Seed of the fold split and of the training."),
    wait: bool = typer.Option(False, "--wait", help="Block until every fold has run, then print the ranking."),
    top: int = typer.Option(20, "--top", help="Rows of the ranking printed (--json prints all)."),
    as_json: bool = AS_JSON,
) -> None:
    """Find labels that are probably wrong: k-fold runs predict every example once, confident
    learning ranks the disagreements. Prints the audit id (with --wait: the ranked issues)."""
    from workbench.services.specs import DEFAULT_MODEL
    from workbench.services import audits

    with open_workbench() as wb:
        audit_id = audits.create_audit(wb, dataset, folds=folds, model=model or DEFAULT_MODEL, preset=preset,
                                       seed=seed)
        record = audits.get_audit(wb, audit_id)
        if not wait:
            emit(record, as_json, f"{audit_id}")
            if not as_json:
                typer.echo(f"audit {audit_id}: {folds} fold runs queued "
                           f"({', '.join(str(f['run_id']) for f in record['folds'])}); "
                           f"`workbench data audit-show {audit_id}` shows the ranking when they are done", err=True)
            return
        record = _wait_for_audit(wb, audits, record)
        issues = audits.audit_issues(wb, audit_id) if record["state"] == audits.FINISHED else None
    emit({**record, "issues": issues}, as_json, _audit_text(record, issues, top))
    if record["state"] != audits.FINISHED:
        raise typer.Exit(1)


def _wait_for_audit(wb, audits, record: dict) -> dict:
    """Wait for the folds; with no worker alive, run them in this process so the command still completes."""
    from workbench.commands.waiting import worker_unless_one_is_alive
    from workbench.services import runs

    fold_runs = [f["run_id"] for f in record["folds"]]
    seen = {"message": record["message"]}

    def tell(current: dict) -> None:
        if current["message"] != seen["message"]:
            seen["message"] = current["message"]
            typer.echo(f"audit {current['id']}: {current['message']}", err=True)

    with worker_unless_one_is_alive(wb, fold_runs, f"running the {len(fold_runs)} folds"):
        try:
            return audits.wait_for_audit(wb, record["id"], on_poll=tell)
        except KeyboardInterrupt:
            for run_id in fold_runs:
                runs.cancel_run(wb, run_id)
            typer.echo(f"audit {record['id']}: cancel requested", err=True)
            raise


@data_app.command("audit-show")
def audit_show(
    audit_id: int = id_argument("audit", "The audit id (`workbench data audits` lists them)."),
    top: int = typer.Option(20, "--top", help="Rows of the ranking printed (--json prints all)."),
    as_json: bool = AS_JSON,
) -> None:
    """An audit's state and, once it has finished, its ranked suspicious labels."""
    from workbench.services import audits

    with open_workbench() as wb:
        record = audits.get_audit(wb, audit_id)
        issues = audits.audit_issues(wb, audit_id) if record["state"] == audits.FINISHED else None
    emit({**record, "issues": issues}, as_json, _audit_text(record, issues, top))


@data_app.command("audits")
def audits_(
    dataset: Optional[str] = typer.Argument(None, help="Only the audits of this dataset (id, prefix or name)."),
    as_json: bool = AS_JSON,
) -> None:
    """List label audits, newest first."""
    from workbench.services import audits

    with open_workbench() as wb:
        dataset_id = service.get_dataset(wb, dataset).id if dataset else None
        rows = audits.list_audits(wb, dataset_id)
    lines = [f"{a['id']:>4}  {a['state']:<9} {a['dataset'] or a['dataset_id'] or '(deleted)':<28} {a['message']}"
             for a in rows]
    emit(rows, as_json, "\n".join(lines) if lines else "no audits yet")
