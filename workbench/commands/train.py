"""`workbench train`: queue a fine-tuning run from flags or a YAML run spec, optionally wait for it."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

import typer

from workbench.cli import app, emit
from workbench.errors import ConfigError, NotFound

log = logging.getLogger(__name__)


def _load_config(path: Optional[Path]) -> dict[str, Any]:
    """The run spec file's mapping, read within the spec-file limits and checked as far as it goes without flags."""
    if path is None:
        return {}
    from workbench.services.specs import load_run_spec_file

    return load_run_spec_file(path)


def _dataset_id(wb, value: str, task: str, validation: Optional[str] = None) -> str:
    """A file or folder is imported through the dataset store first (with its validation file when one
    is given); anything else is a dataset id or name."""
    from workbench.services import datasets

    if Path(value).exists():
        return datasets.import_dataset(wb, Path(value), task, validation_path=validation).id
    return datasets.get_dataset(wb, value).id


def build_spec(wb, config: dict[str, Any], *, task, data, eval_data, model, epochs, lr, batch_size, max_length,
               lora, procs: Optional[int] = None, method: Optional[str] = None):
    """Config file first, flags over it; data paths become dataset ids."""
    from workbench.services.specs import RunSpec
    from workbench.services import datasets

    raw = dict(config)
    train = dict(raw.get("train") or {})
    data_spec = dict(raw.get("data") or {})
    raw["task"] = task or raw.get("task")
    if not raw["task"]:
        raise ConfigError("give --task (or task: in the --config file)")
    if model:
        raw["model"] = model
    for key, value in (("epochs", epochs), ("learning_rate", lr), ("batch_size", batch_size),
                       ("max_length", max_length), ("method", method)):
        if value is not None:
            train[key] = value
    if lora:
        raw["lora"] = {**(raw.get("lora") or {}), "enabled": True}
    if procs is not None:
        raw["procs"] = procs
    if data:
        data_spec = {}  # --data replaces the file's data: section
    elif data_spec:
        RunSpec.from_dict({**raw, "train": train, "data": data_spec})  # typos first, before any import
        data, eval_data, data_spec = _files_named_in_spec(data_spec, eval_data)
    data_is_file = bool(data) and Path(data).exists()
    eval_is_file = bool(eval_data) and Path(eval_data).exists()
    if data:
        data_spec = {**data_spec, "dataset_id": _dataset_id(wb, data, raw["task"],
                                                            eval_data if eval_is_file else None)}
    if eval_data and not (data_is_file and eval_is_file):
        # A stored dataset (or a file stored whole, without a split) is this run's validation data.
        eval_id = (datasets.import_dataset(wb, Path(eval_data), raw["task"], validation_fraction=0.0).id
                   if eval_is_file else eval_data)
        data_spec["validation_path"] = str(datasets.dataset_files(wb, eval_id)[0])
    if not data_spec:
        raise ConfigError("give --data (a file, a folder or a dataset id), or data: in the --config file")
    raw["train"], raw["data"] = train, data_spec
    return RunSpec.from_dict(raw)


def _files_named_in_spec(data_spec: dict[str, Any], eval_data: Optional[str]
                         ) -> tuple[Optional[str], Optional[str], dict[str, Any]]:
    """The files a spec's ``data:`` names, taken out of it to be imported as ``--data`` and ``--eval`` are:
    (training file or None, validation file or ``eval_data``, the rest of ``data:``). The worker reads only
    the dataset store's normalized files, so a CSV queued as ``train_path`` failed every run."""
    rest = dict(data_spec)
    if rest.get("dataset_id") and rest.get("train_path"):
        raise ConfigError("data: give dataset_id or train_path (a file to import), not both")
    train_path, validation_path = rest.pop("train_path", None), rest.pop("validation_path", None)
    for key, value in (("train_path", train_path), ("validation_path", validation_path)):
        if value and not Path(value).is_file():
            raise NotFound(f"data.{key}: no such file {value} (a relative path is read from the current "
                           "directory, as --data is)")
    return train_path, eval_data or validation_path, rest


@app.command()
def train(
    task: Optional[str] = typer.Option(None, help="text-classification, token-classification, question-answering "
                                                  "or masked-lm."),
    data: Optional[str] = typer.Option(None, help="Training data: a file/folder (imported first) or a dataset id."),
    eval_data: Optional[str] = typer.Option(None, "--eval", help="Validation data: a file or a dataset id."),
    model: Optional[str] = typer.Option(None, help="Model name or local folder (default: the packaged MiniLM)."),
    epochs: Optional[float] = typer.Option(None),
    lr: Optional[float] = typer.Option(None, help="Learning rate."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size"),
    max_length: Optional[int] = typer.Option(None, "--max-length"),
    lora: bool = typer.Option(False, "--lora", help="Train LoRA adapters instead of all weights."),
    method: Optional[str] = typer.Option(None, "--method",
                                         help="Text classification: auto (SetFit below 25 examples per class), "
                                              "finetune or setfit."),
    procs: Optional[int] = typer.Option(None, "--procs",
                                        help="Data-parallel processes on a CPU worker (default: the worker's "
                                             "--procs / WORKBENCH_CPU_PROCS); --batch-size is per process."),
    config: Optional[Path] = typer.Option(None, help="A YAML run spec; flags override it."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Queue a seed group of N runs (2-10) that differ "
                                                              "only in the seed: the spec's seed, +1, ..."),
    wait: bool = typer.Option(False, "--wait", help="Block until the run ends and print its final record."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: {id, status, metrics, ...}."),
) -> None:
    """Queue a fine-tuning run and print its id (with --wait: train, then print the result)."""
    from storage.context import open_workbench
    from workbench.services import runs

    if seeds is not None and wait:
        raise ConfigError("--wait follows one run; drop it with --seeds and follow the group with "
                          "`workbench runs show ID`")
    with open_workbench() as wb:
        spec = build_spec(wb, _load_config(config), task=task, data=data, eval_data=eval_data, model=model,
                          epochs=epochs, lr=lr, batch_size=batch_size, max_length=max_length, lora=lora,
                          procs=procs, method=method)
        if seeds is not None:
            _warn_test_set(wb, spec.data.dataset_id)
            _submit_group(wb, spec, seeds, as_json)
            return
        _warn_test_set(wb, spec.data.dataset_id)
        run_id = runs.submit_run(wb, spec)
        estimate = runs.get_run(wb, run_id).get("estimate")
        if estimate and not as_json:
            from workbench.ui.format import estimate_range

            typer.echo(f"run {run_id}: estimated {estimate_range(estimate)} ({estimate['basis']})", err=True)
        if not wait:
            emit({"id": run_id, "status": "queued"}, as_json, str(run_id))
            return
        if not as_json:
            typer.echo(str(run_id))
        record = _wait(wb, run_id, runs)
        warning = runs.learned_warning(wb, run_id) if record["status"] == "succeeded" else ""
    print_end(record, as_json, warning)


def print_end(record: dict, as_json: bool, warning: str = "") -> None:
    """A waited-for run's end: its status, metrics and error (or one JSON document); exit 1 unless it succeeded."""
    if warning and not as_json:
        typer.echo(f"warning: run {record['id']} {warning}", err=True)
    final = {"id": record["id"], "status": record["status"], "metrics": record["metrics"], "error": record["error"],
             "output_dir": record["output_dir"]}
    metrics = "\n".join(f"  {k}: {v}" for k, v in sorted(record["metrics"].items()))
    emit(final, as_json, f"run {record['id']}: {record['status']}" + (f"\n{metrics}" if metrics else "")
         + (f"\nerror: {record['error']}" if record["error"] else ""))
    if record["status"] != "succeeded":
        raise typer.Exit(1)


def _warn_test_set(wb, dataset_id: Optional[str]) -> None:
    """Say on stderr when the run trains on a test set (``--json`` output stays one JSON document)."""
    from workbench.services import datasets

    warning = datasets.test_set_warning(wb, dataset_id)
    if warning:
        log.warning("training on a test set: %s", warning)
        typer.echo(f"warning: {warning}", err=True)


def _submit_group(wb, spec, seeds: int, as_json: bool) -> None:
    """``--seeds N``: queue the seed group and print its run ids (``{"ids", "group", "seeds"}`` with --json)."""
    from workbench.services import runs

    queued = runs.submit_seed_group(wb, spec, seeds)
    emit({"ids": queued["ids"], "group": queued["group"], "seeds": queued["seeds"], "status": "queued"}, as_json,
         "\n".join(map(str, queued["ids"])))
    if not as_json:
        typer.echo(f"seed group {queued['group']}: runs {', '.join(map(str, queued['ids']))} with seeds "
                   f"{', '.join(map(str, queued['seeds']))}", err=True)


def _wait(wb, run_id: int, runs) -> dict[str, Any]:
    """Wait for a worker; with none alive, train this one run in-process so the command still completes."""
    from workbench.commands.waiting import worker_unless_one_is_alive

    with worker_unless_one_is_alive(wb, [run_id], f"training run {run_id}"):
        try:
            return runs.wait_for_run(wb, run_id)
        except KeyboardInterrupt:
            runs.cancel_run(wb, run_id)
            typer.echo(f"run {run_id}: cancel requested", err=True)
            raise
