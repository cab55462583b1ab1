"""`workbench label`: labelling projects from a terminal, through the same service as the Label tab.

    workbench label create FILE --labels A,B[,…] [--name N] [--multi-label] [--json]   -> {"id", …}
    workbench label import PROJECT FILE          labels from a CSV of id,label, as the user running it
    workbench label status PROJECT [--json]      counts, the current estimate with its interval, the next items
    workbench label export PROJECT --output FILE [--format csv|jsonl]
    workbench label train PROJECT [--wait] [--json]   the hand-off run; the same JSON as `train --json`
    workbench label list [--json]
"""
from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any, Optional

import typer

from workbench.cli import app, emit, id_argument

label_app = typer.Typer(help="Labelling projects: label a pool of texts with the model in the loop, then train.",
                        no_args_is_help=True)
app.add_typer(label_app, name="label")


def _user() -> str:
    """Who runs the command: their labels and imports carry this name."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


@label_app.command()
def create(file: Path = typer.Argument(..., help="The texts to label: CSV, TSV, JSON Lines or plain text (one a "
                                                 "line); it may hold an id column and some labels already."),
           labels: str = typer.Option(..., "--labels", help="The label set, comma-separated: spam,ham. "
                                                             "A description after a colon: 'spam: unwanted ads'."),
           name: Optional[str] = typer.Option(None, help="The project's name (default: the file's name)."),
           multi_label: bool = typer.Option(False, "--multi-label", help="Each text may take several labels."),
           text_column: Optional[str] = typer.Option(None, "--text-column"),
           id_column: Optional[str] = typer.Option(None, "--id-column"),
           label_column: Optional[str] = typer.Option(None, "--label-column",
                                                      help="Labels already given (blank: unlabelled)."),
           strategy: str = typer.Option("margin", help="What to ask next: margin, entropy, random or clusters."),
           random_share: float = typer.Option(0.1, "--random-share", help="Share of items asked at random."),
           as_json: bool = typer.Option(False, "--json", help="Print JSON: {id, name, pool, labelled, …}.")) -> None:
    """Create a project from a file of texts and queue the embedding of its pool."""
    from storage.context import open_workbench
    from workbench.services import labelling

    with open_workbench() as wb:
        project = labelling.create_project(wb, file, labels, name=name, multi_label=multi_label, user=_user(),
                                           text_column=text_column, id_column=id_column,
                                           label_column=label_column, strategy=strategy, random_share=random_share)
    for warning in [] if as_json else project["warnings"]:
        typer.echo(f"warning: {warning}", err=True)
    emit(project, as_json, f"{project['id']}")
    if not as_json:
        typer.echo(f"project {project['id']} ({project['name']}): {project['pool']} texts, "
                   f"{project['labelled']} labelled; embedding queued as job {project['embed_job']}", err=True)


@label_app.command("import")
def import_(project_id: int = id_argument("project", "The labelling project id."),
            file: Path = typer.Argument(..., help="A CSV (or TSV) with an id and a label column."),
            as_json: bool = typer.Option(False, "--json")) -> None:
    """Add labels from a CSV of id,label, as the user running the command."""
    from storage.context import open_workbench
    from workbench.services import labelling

    with open_workbench() as wb:
        result = labelling.import_labels(wb, project_id, file, _user())
    emit(result, as_json, f"imported {result['imported']} label(s) ({result['unchanged']} unchanged); "
                          f"{result['labelled']} labelled" + (f"; refit queued as job {result['refit']}"
                                                              if result["refit"] else ""))


def _status_text(status: dict[str, Any]) -> str:
    lines = [f"project {status['id']} ({status['name']}): {status['labelled']} of {status['pool']} labelled, "
             f"{status['embedded']} embedded, {status['labels_per_minute']:g} labels/min",
             "per class: " + ", ".join(f"{k} {v}" for k, v in status["per_class"].items())]
    estimate = status["estimate"]
    if estimate and estimate["estimate"] is not None:
        interval = (f" [{estimate['low']:.3f}, {estimate['high']:.3f}]" if estimate["low"] is not None
                    and estimate["high"] is not None else "")
        majority = f"; majority class {estimate['majority']:.3f}" if estimate["majority"] is not None else ""
        lines.append(f"estimated {estimate['metric']} at {estimate['labels']} labels: {estimate['estimate']:.3f}"
                     f"{interval} ({estimate['source']}){majority}")
    else:
        lines.append("no estimate yet: it comes with the first refit of the fast model")
    if status["stop_hint"]:
        lines.append(status["stop_hint"])
    for kind, job in status["jobs"].items():
        if job:
            lines.append(f"{kind} job {job['id']}: {job['status']} ({job['progress'] * 100:.0f} %)")
    if status["next_items"]:
        lines.append("next to label:")
        lines.extend(f"  - {text[:100]}" for text in status["next_items"])
    return "\n".join(lines)


@label_app.command()
def status(project_id: int = id_argument("project", "The labelling project id."),
           as_json: bool = typer.Option(False, "--json", help="Print JSON: labelled, pool, per_class, estimate "
                                                              "(with low/high), curve, next_items, …")) -> None:
    """Counts, the current estimate with its interval, and the next items to label."""
    from storage.context import open_workbench
    from workbench.services import labelling

    with open_workbench() as wb:
        result = labelling.project_status(wb, project_id)
    emit(result, as_json, _status_text(result))


@label_app.command()
def export(project_id: int = id_argument("project", "The labelling project id."),
           output: Path = typer.Option(..., "--output", "-o", help="The file to write."),
           fmt: str = typer.Option("csv", "--format", help="csv or jsonl.")) -> None:
    """Write every item with its label, labelled_by and labelled_at."""
    from storage.context import open_workbench
    from workbench.services import labelling

    with open_workbench() as wb:
        path = labelling.export_labels(wb, project_id, output, fmt)
    typer.echo(str(path))


@label_app.command()
def train(project_id: int = id_argument("project", "The labelling project id."),
          wait: bool = typer.Option(False, "--wait", help="Block until the run ends and print its final record."),
          as_json: bool = typer.Option(False, "--json", help="Print JSON: {id, status, metrics, ...}.")) -> None:
    """Train a model from the project's labels: a dataset version and a normal run with the defaults."""
    from storage.context import open_workbench
    from workbench.commands.train import _wait, print_end
    from workbench.services import labelling, runs

    with open_workbench() as wb:
        run_id = labelling.train_from_labels(wb, project_id, _user())
        if not wait:
            emit({"id": run_id, "status": "queued"}, as_json, str(run_id))
            return
        if not as_json:
            typer.echo(str(run_id))
        record = _wait(wb, run_id, runs)
        warning = runs.learned_warning(wb, run_id) if record["status"] == "succeeded" else ""
    print_end(record, as_json, warning)


@label_app.command("list")
def list_(as_json: bool = typer.Option(False, "--json")) -> None:
    """Every labelling project, newest first."""
    from storage.context import open_workbench
    from workbench.services import labelling

    with open_workbench() as wb:
        projects = labelling.list_projects(wb)
    emit(projects, as_json, "\n".join(f"{p['id']:>4}  {p['labelled']:>6}/{p['pool']:<7} {p['name']}"
                                      for p in projects) or "no labelling projects")
