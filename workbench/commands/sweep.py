"""`workbench sweep`: start a hyper-parameter sweep from flags or a YAML sweep spec; list, show, cancel it.

    workbench sweep --config sweep.yaml [flags over it]
    workbench sweep --task text-classification --data train.csv --param learning_rate=1e-5..1e-4:log \
                    --param batch_size=16,32 --trials 12 --parallel 2 --pruner median
    workbench sweep show ID [--json]      best trial, each trial's params, value and state
    workbench sweep cancel ID
    workbench sweep list [--json]
    workbench sweep best ID               the best trial's run id (for `workbench publish`)
    workbench sweep confirm ID --top 3 --seeds 3   re-run the best trials with more seeds; show ranks by the mean

`sweep show --json` is a contract: `id`, `status`, `counts` (done/running/pruned/failed), `best`
(null or a trial), `trials` (each with `trial`, `run_id`, `state`, `params`, `value`), `ranking` (the
completed trials best first, those confirmed with more seeds by their mean ± std) and `error`
(null, or why a failed sweep stopped).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from workbench.cli import app, emit, id_argument
from workbench.errors import ConfigError

sweep_app = typer.Typer(help="Hyper-parameter sweeps: many runs on the queue, pruned early, compared in one view.",
                        invoke_without_command=True)
app.add_typer(sweep_app, name="sweep")


def _load_yaml(path: Optional[Path]) -> dict[str, Any]:
    """The sweep file's mapping, read within the spec-file limits and checked as far as it goes without flags."""
    if path is None:
        return {}
    from workbench.services.specs import load_sweep_spec_file

    return load_sweep_spec_file(path)


def build_sweep_spec(wb, config: dict[str, Any], *, task, data, eval_data, model, lora, params: list[str],
                     trials, parallel, pruner, metric, direction, name, seed):
    """Config file first, flags over it; the base run spec is built as `workbench train` builds one."""
    from workbench.services.specs import SweepSpec, default_space, parse_param
    from workbench.commands.train import build_spec

    raw = dict(config)
    base_config = dict(raw.get("base") or {})
    if data is None and not (base_config.get("data") or {}):
        raise ConfigError("give --data (a file, a folder or a dataset id), or base: data: in the --config file")
    base = build_spec(wb, base_config, task=task, data=data, eval_data=eval_data, model=model, epochs=None, lr=None,
                      batch_size=None, max_length=None, lora=lora)
    raw["base"] = base.to_dict()
    space = dict(raw.get("space") or {})
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param {item!r}: write NAME=LOW..HIGH[:log] or NAME=A,B,C")
        space[key.strip()] = parse_param(key.strip(), value)
    raw["space"] = space or default_space(base.task, lora=base.lora.enabled)
    for key, value in (("n_trials", trials), ("parallelism", parallel), ("pruner", pruner), ("metric", metric),
                       ("direction", direction), ("name", name), ("seed", seed)):
        if value is not None:
            raw[key] = value
    return SweepSpec.from_dict(raw)


def _summary(sweep: dict[str, Any]) -> str:
    from workbench.services.specs import format_params

    counts = sweep["counts"]
    lines = [f"sweep {sweep['id']}: {sweep['status']} — {len(sweep['trials'])}/{sweep['n_trials']} trials "
             f"(done {counts['done']}, running {counts['running']}, pruned {counts['pruned']}, "
             f"failed {counts['failed']}), {sweep['direction']} {sweep['metric']}"]
    if sweep.get("error"):
        lines.append(sweep["error"])
    best = sweep["best"]
    if best:
        lines.append(f"best: trial {best['trial']} (run {best['run_id']}) {sweep['metric']}={best['value']:.4g}  "
                     f"{format_params(best['params'])}")
    if sweep.get("verdict"):
        lines.append(f"warning: {sweep['verdict']}")
    confirmed = [r for r in sweep.get("ranking") or [] if r["confirmed"]]
    if confirmed:
        lines.append("ranked by the mean over seeds (confirmed trials first):")
        lines += [_ranking_line(r, sweep["metric"]) for r in sweep["ranking"]]
    lines.append(f"{'trial':>5}  {'run':>5}  {'state':<10} {'value':>8}  params")
    for t in sweep["trials"]:
        value = f"{t['value']:.4g}" if isinstance(t["value"], (int, float)) else "-"
        lines.append(f"{t['trial']:>5}  {t['run_id'] or '-':>5}  {t['state']:<10} {value:>8}  "
                     f"{format_params(t['params'])}")
    return "\n".join(lines)


def _ranking_line(row: dict[str, Any], metric: str) -> str:
    """``  trial 3 (run 14): accuracy 0.912 ± 0.006 over 3 seeds``, or ``... 0.9 (one seed)``."""
    if not row["confirmed"]:
        return f"  trial {row['trial']} (run {row['run_id']}): {metric} {row['value']:.4g} (one seed)"
    spread = f" ± {row['std']:.2g}" if row["std"] is not None else ""
    return f"  trial {row['trial']} (run {row['run_id']}): {metric} {row['mean']:.4g}{spread} over {row['n']} seeds"


@sweep_app.callback()
def sweep(
    ctx: typer.Context,
    config: Optional[Path] = typer.Option(None, help="A YAML sweep spec (base:, space:, objective:, n_trials:, "
                                                     "parallelism:, pruner:); flags override it."),
    task: Optional[str] = typer.Option(None, help="The base run's task."),
    data: Optional[str] = typer.Option(None, help="Training data: a file/folder (imported first) or a dataset id."),
    eval_data: Optional[str] = typer.Option(None, "--eval", help="Validation data: a file or a dataset id."),
    model: Optional[str] = typer.Option(None, help="The base run's model (search it with --param model=a,b)."),
    lora: bool = typer.Option(False, "--lora", help="Trials train LoRA adapters."),
    param: list[str] = typer.Option([], "--param", help="A search dimension: NAME=LOW..HIGH[:log] or NAME=A,B,C "
                                                        "(learning_rate, batch_size, epochs, warmup_ratio, "
                                                        "weight_decay, lora_r, lora_alpha, lora_dropout, model). "
                                                        "Repeat it; none: defaults for the task."),
    trials: Optional[int] = typer.Option(None, "--trials", help="How many trials (default 12)."),
    parallel: Optional[int] = typer.Option(None, "--parallel", help="Trials queued or running at once (default 2)."),
    pruner: Optional[str] = typer.Option(None, help="median (default), successive-halving or none."),
    metric: Optional[str] = typer.Option(None, help="The final metric to optimise (default: the task's main one)."),
    direction: Optional[str] = typer.Option(None, help="maximize or minimize (default: from the metric)."),
    name: Optional[str] = typer.Option(None, help="A name for the sweep; trials are named after it."),
    seed: Optional[int] = typer.Option(None, help="The sampler's seed (default 0)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: {id, status, trials}."),
) -> None:
    """Start a sweep (its first trials are queued at once; workers run them and queue the next ones)."""
    if ctx.invoked_subcommand is not None:
        return
    from storage.context import open_workbench
    from workbench.services import sweeps

    if config is None and task is None and data is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    with open_workbench() as wb:
        spec = build_sweep_spec(wb, _load_yaml(config), task=task, data=data, eval_data=eval_data, model=model,
                                lora=lora, params=param, trials=trials, parallel=parallel, pruner=pruner,
                                metric=metric, direction=direction, name=name, seed=seed)
        sweep_id = sweeps.create_sweep(wb, spec)
        shown = sweeps.get_sweep(wb, sweep_id)
    emit({"id": sweep_id, "status": shown["status"], "trials": shown["trials"]}, as_json,
         f"{sweep_id}\nsweep {sweep_id}: {spec.n_trials} trials, {spec.parallelism} at a time, pruner {spec.pruner}; "
         f"`workbench sweep show {sweep_id}` follows it")


@sweep_app.command()
def show(sweep_id: int = id_argument("sweep"), as_json: bool = typer.Option(False, "--json", help="Print the full record as JSON.")) -> None:
    """Progress, the best trial, and each trial's parameters, value and state."""
    from storage.context import open_workbench
    from workbench.services import sweeps

    with open_workbench() as wb:
        shown = sweeps.get_sweep(wb, sweep_id)
    emit(shown, as_json, _summary(shown))


@sweep_app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON (a list of sweeps).")) -> None:
    """Sweeps, newest first."""
    from storage.context import open_workbench
    from workbench.services import sweeps

    with open_workbench() as wb:
        rows = sweeps.list_sweeps(wb)
    text = "\n".join(f"{r['id']:>5}  {r['status']:<10} {r['task']:<22} {sum(r['counts'].values())}/{r['n_trials']} "
                     f"trials  {r['name']}" for r in rows) or "no sweeps"
    emit(rows, as_json, text)


@sweep_app.command()
def cancel(sweep_id: int = id_argument("sweep")) -> None:
    """Ask for no more trials and cancel the queued and running ones (running ones stop at their next step)."""
    from storage.context import open_workbench
    from workbench.services import sweeps

    with open_workbench() as wb:
        status = sweeps.cancel_sweep(wb, sweep_id)
    typer.echo(f"sweep {sweep_id}: {status}")


@sweep_app.command()
def best(sweep_id: int = id_argument("sweep")) -> None:
    """Print the best trial's run id: `workbench publish $(workbench sweep best ID)` shares it."""
    from storage.context import open_workbench
    from workbench.services import sweeps

    with open_workbench() as wb:
        typer.echo(str(sweeps.best_run(wb, sweep_id)))


@sweep_app.command()
def confirm(sweep_id: int = id_argument("sweep"),
            top: int = typer.Option(3, "--top", help="How many of the best completed trials to confirm."),
            seeds: int = typer.Option(3, "--seeds", help="Seeds per trial, the trial's own included (2-10)."),
            as_json: bool = typer.Option(False, "--json", help="Print JSON: a list of {trial, run_id, group, ids, "
                                                               "seeds}.")) -> None:
    """Queue more seeds of the best trials; `sweep show` then ranks them by their mean ± std."""
    from storage.context import open_workbench
    from workbench.services import sweeps

    with open_workbench() as wb:
        confirmed = sweeps.confirm_top(wb, sweep_id, top, seeds)
    emit(confirmed, as_json, "\n".join(
        f"trial {c['trial']} (run {c['run_id']}): " + (f"queued runs {', '.join(map(str, c['ids']))} with seeds "
                                                       f"{', '.join(map(str, c['seeds']))}" if c["ids"]
                                                       else f"already has {seeds} seeds")
        + f" (seed group {c['group']})" for c in confirmed))
