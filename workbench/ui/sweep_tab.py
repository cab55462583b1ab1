"""The Sweep form (under the Train form) and the Sweeps view (its own tab).

The form sweeps exactly the run spec the Train tab shows (its JSON panel is the base spec),
over a search space edited as YAML with defaults for the task; Start hands a ``SweepSpec``
to ``workbench.services.sweeps.create_sweep``. The view reads one sweep from the database
on every tick: progress, best so far, value by trial, parallel coordinates, parameter
importance and the trials table, with Cancel, Compare the top 5, Open best run, Publish best.

``spec_from_form`` and ``view_values`` are plain functions of their inputs, tested without a browser.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import gradio as gr
import pandas as pd
import yaml

from workbench.services.specs import load_json, load_yaml
from workbench.services.specs import PRUNERS, SweepSpec, default_space
from storage.models import SWEEP_RUNNING
from workbench.errors import ConfigError, WorkbenchError
from workbench.services import runs as runs_service
from workbench.services import sweeps as sweep_service
from workbench.ui import access
from workbench.ui import format as fmt
from workbench.ui import polling, runs_tab, sweep_plots

TICK_SECONDS = 3.0
# Then one column per searched parameter (trials_frame).
TRIAL_COLUMNS = ["Trial", "Run", "State", "Value", "Last reported", "Mean ± std over seeds"]
# "Confirm the top k with n seeds" in the view.
CONFIRM_TOP, CONFIRM_SEEDS = 3, 3


def space_yaml(task: str, lora: bool = False) -> str:
    """The default search space of ``task`` as the YAML the form shows."""
    # "is", not "in": 0.0 == False, and a range starting at 0 must keep its low end.
    space = {name: {("type" if k == "kind" else k): v for k, v in dataclasses.asdict(p).items()
                    if v is not None and v is not False}
             for name, p in default_space(task, lora).items()}
    return yaml.safe_dump(space, sort_keys=False)


def default_space_for(base_json: str) -> str:
    try:
        base = load_json(base_json or "{}", "the run spec")
    except ConfigError:
        base = {}
    if not isinstance(base, dict):
        base = {}
    return space_yaml(base.get("task") or "text-classification", bool((base.get("lora") or {}).get("enabled")))


def spec_from_form(base_json: str, space_text: str, n_trials: Any, parallelism: Any, pruner: str, metric: str,
                   direction: str, name: str) -> SweepSpec:
    """The sweep spec for the form's values; ``ConfigError`` says what to fix."""
    try:
        base = load_json(base_json or "", "the Train form's run spec")
    except ConfigError as exc:
        raise ConfigError(f"{exc}; fix the form first") from None
    if not isinstance(base, dict) or "error" in base:
        raise ConfigError(f"the Train form's run spec is not valid: {base.get('error') if isinstance(base, dict) else base}")
    if not (base.get("data") or {}).get("dataset_id"):
        raise ConfigError("choose a dataset in the Train form first")
    space = load_yaml(space_text or "", "the search space") or {}
    return SweepSpec.from_dict({"base": base, "space": space, "n_trials": _whole(n_trials, 12),
                                "parallelism": _whole(parallelism, 2), "pruner": pruner or "median",
                                "metric": (metric or "").strip(), "direction": direction or "",
                                "name": (name or "").strip()})


def _whole(value: Any, default: int) -> Any:
    """A form number as the spec takes it: blank is the default, 3.0 is 3; anything else (2.5, inf) is left
    for the spec to refuse with the field's name, not truncated or crashed on here."""
    if value is None or value == "":
        return default
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def sweep_choices(wb) -> list[tuple[str, int]]:
    return [(f"#{s['id']} {s['name'] or s['task']} · {s['status']} · {sum(s['counts'].values())}/{s['n_trials']}",
             s["id"]) for s in sweep_service.list_sweeps(wb)]


def refreshed_sweeps(wb, current: Any) -> dict:
    """The ↻ button's answer: the sweeps now, keeping the pick the user may have changed since the click
    (``polling.picker_update``); where the pick it was asked with is gone, the newest sweep."""
    choices = sweep_choices(wb)
    return polling.picker_update(choices, current, otherwise=choices[0][1] if choices else None)


def tick_values(wb, sweep_id: Optional[int], shown_choices: Optional[list], shown_view: str = "",
                interval: Any = TICK_SECONDS) -> tuple:
    """What one timer tick sends: the picker's choices (only when a label changed: a sweep's status and
    counts are in it, "running · 1/4" must become "finished · 4/4"), the view of the picked sweep (only when
    it changed: ``shown_view`` fingerprints the one shown), the choices and the view's fingerprint now shown
    (kept in ``gr.State``s for the next tick), and the timer's next interval: every few seconds while a sweep
    has a trial queued or running, backing off while nothing changes (``workbench.ui.polling``)."""
    choices = sweep_choices(wb)
    picker = gr.skip() if choices == shown_choices else gr.update(choices=choices)
    view = view_values(wb, sweep_id)
    key = polling.content_key(sweep_id, *view)
    changed = choices != shown_choices or key != shown_view
    counts = runs_service.count_runs(wb)
    active = any(counts.get(state, 0) for state in runs_tab.MOVING)
    shown = view if key != shown_view else [gr.skip()] * len(view)
    return (picker, *shown, choices, key, polling.timer_update(interval, changed, active, low=TICK_SECONDS))


def _value(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "–"


def _seeds_cell(trial: dict[str, Any]) -> str:
    group = trial.get("group") or {}
    if not group.get("n"):
        return "–" if not group else f"0 of {len(group.get('ids') or [])} seeds done"
    n = group["n"]
    return f"{fmt.mean_std_text(group.get('mean'), group.get('std'))} ({n} seed{'s' if n != 1 else ''})"


def ranked_trials(sweep: dict[str, Any]) -> list[dict[str, Any]]:
    """The trials in trial order; once some are confirmed with more seeds, best first by the service's ranking
    (confirmed ones by their mean, the other completed ones by their value), then the rest in trial order."""
    order = [r["trial"] for r in sweep.get("ranking") or []] if any(
        r["confirmed"] for r in sweep.get("ranking") or []) else []
    by_number = {t["trial"]: t for t in sweep["trials"]}
    return [by_number[n] for n in order] + [t for t in sweep["trials"] if t["trial"] not in set(order)]


def trials_frame(sweep: dict[str, Any]) -> pd.DataFrame:
    """One row per trial, with each searched parameter in a column of its own (3 significant digits)."""
    space = (sweep.get("spec") or {}).get("space") or {}
    names = list(dict.fromkeys([*space, *(n for t in sweep["trials"] for n in t["params"])]))
    return pd.DataFrame([[t["trial"], t["run_id"] or "–", t["state"], _value(t["value"]), _value(t["last_reported"]),
                          _seeds_cell(t), *[fmt.param_value(t["params"].get(n)) for n in names]]
                         for t in ranked_trials(sweep)], columns=[*TRIAL_COLUMNS, *names])


def progress_markdown(sweep: dict[str, Any], left: Optional[dict[str, Any]] = None) -> str:
    """The sweep's state line, best trial and warnings; ``left`` (``sweep_service.time_left``) the time it
    still needs while it runs."""
    c = sweep["counts"]
    line = (f"**Sweep #{sweep['id']}** {sweep['name']} — **{sweep['status']}** · "
            f"{len(sweep['trials'])}/{sweep['n_trials']} trials asked, {sweep['parallelism']} at a time · "
            f"done {c['done']} · running {c['running']} · pruned {c['pruned']} · failed {c['failed']} · "
            f"pruner {sweep['pruner']} · {sweep['direction']} {sweep['metric']}")
    if left is not None:
        asked = f", then {left['to_ask']} trial(s) not started yet" if left["to_ask"] else ""
        line += (f"  \nTime left: **{fmt.rough_duration(left['seconds'])}** ({left['active']} trial(s) queued "
                 f"or running{asked}; pruning as expected before the start).")
    elif sweep["status"] == SWEEP_RUNNING:
        line += "  \nTime left: unknown (a trial has no estimate yet, or no worker is running)."
    best = sweep["best"]
    if best:
        line += (f"  \nBest so far: **{sweep['metric']} {best['value']:.4f}** — trial {best['trial']} "
                 f"(run #{best['run_id']}): {fmt.params_text(best['params'])}")
    else:
        line += "  \nBest so far: no trial has completed yet."
    if sweep.get("verdict"):
        line += f"  \n⚠ **{sweep['verdict']}**"
    if sweep.get("error"):
        line += f"  \n⚠ **{sweep['error']}**"
    return line


def view_values(wb, sweep_id: Optional[int]) -> tuple[str, str, str, str, pd.DataFrame]:
    """(progress markdown, value-by-trial SVG, parallel coordinates SVG, importance SVG, trials table)."""
    if not sweep_id:
        empty = "<p class='wb-muted'>No sweep selected.</p>"
        return ("No sweep selected: start one from the Train tab (Sweep), or `workbench sweep --help`.",
                empty, empty, empty, pd.DataFrame(columns=TRIAL_COLUMNS))
    sweep = sweep_service.get_sweep(wb, int(sweep_id))
    importance = sweep_service.param_importance(wb, int(sweep_id))
    return (progress_markdown(sweep, sweep_service.time_left(wb, sweep)), sweep_plots.value_vs_trial_svg(sweep),
            sweep_plots.parallel_coordinates_svg(sweep), sweep_plots.importance_svg(importance),
            trials_frame(sweep))


@dataclasses.dataclass
class SweepForm:
    start_event: Any
    submitted_id: gr.Number


def sweep_estimate(wb, base_json: str, n_trials: Any, parallelism: Any, pruner: str) -> str:
    """Before a sweep starts: its trials' time and what pruning should leave of it, as markdown ("" when the
    form's spec or numbers are not usable yet, or a trial has no estimate)."""
    from workbench.services.specs import RunSpec
    from workbench.services import estimates
    from workbench.services import runs as runs_service

    try:
        base = RunSpec.from_dict(load_json(base_json or "", "the Train form's run spec"))
        n, at_once = int(_whole(n_trials, 12)), int(_whole(parallelism, 2))
        est = estimates.estimate_sweep(wb, base, n, at_once, pruner or "median",
                                       workers=max(1, runs_service.worker_slots(wb)))
    except (WorkbenchError, TypeError, ValueError, AttributeError):
        return ""
    if est is None or n < 1 or at_once < 1:
        return ""
    trial = est["trial"]
    text = (f"{n} trials × {fmt.rough_duration(trial['seconds'])} ({fmt.estimate_range(trial)} each, as the base "
            f"spec; searched epochs or models change it) = {fmt.rough_duration(est['seconds'])} of runs.")
    if est["prunable"]:
        text += (f" With pruning expect **{fmt.rough_duration(est['pruned_seconds'])}**, assuming that after the "
                 f"first {est['startup_trials']} trials about half stop at their first evaluation "
                 f"({fmt.format_duration(est['stopped_seconds'])} each).")
    elif (pruner or "median") != "none":
        text += " No trial evaluates before its end, so pruning cannot stop one early."
    text += (f" {est['at_once']} at a time: done in {fmt.rough_duration(est['wall_seconds'])}. "
             f"{fmt.sentence_case(trial.get('sureness', trial['basis']))}.")
    return text


def build_form(wb, base_spec: gr.components.Component, task: Optional[gr.components.Component] = None) -> SweepForm:
    """The Sweep accordion; ``base_spec`` is the Train tab's run-spec JSON (the base of every trial) and
    ``task`` its task picker: a new task brings that task's default search space."""
    with gr.Accordion("Sweep: search these settings (many runs, pruned early)", open=False,
                      elem_id="sweep-form"):
        gr.Markdown("Every trial is the run spec above with the searched parameters set; trials queue like "
                    "runs and any worker runs them. Parameters: learning_rate, batch_size, epochs, warmup_ratio, "
                    "weight_decay, lora_r, lora_alpha, lora_dropout, model — a range `{low, high, log}` or "
                    "`[choices]`.", elem_classes=["wb-muted"])
        with gr.Row():
            n_trials = gr.Number(12, label="Trials", precision=0, minimum=1, elem_id="sweep-trials")
            parallelism = gr.Number(2, label="In parallel", precision=0, minimum=1, elem_id="sweep-parallel")
            pruner = gr.Dropdown(list(PRUNERS), value="median", label="Pruner", elem_id="sweep-pruner")
            metric = gr.Textbox(label="Objective metric", placeholder="the task's main metric",
                                elem_id="sweep-metric")
            direction = gr.Dropdown(["", "maximize", "minimize"], value="", label="Direction (blank: from the metric)")
            name = gr.Textbox(label="Sweep name", placeholder="optional", elem_id="sweep-name")
        space = gr.Code(space_yaml("text-classification"), language="yaml", label="Search space",
                        interactive=True, elem_id="sweep-space")
        with gr.Row():
            defaults = gr.Button("Defaults for this task", size="sm")
            start = gr.Button("Start sweep", variant="primary", elem_id="sweep-start")
        estimate = gr.Markdown(elem_id="sweep-estimate", elem_classes=["wb-muted"])
        status = gr.Markdown(elem_id="sweep-status")
    submitted_id = gr.Number(visible=False, precision=0)

    def on_start(base_json, space_text, trials, parallel, pruner_, metric_, direction_, name_):
        try:
            sweep_id = sweep_service.create_sweep(wb, spec_from_form(base_json, space_text, trials, parallel,
                                                                     pruner_, metric_, direction_, name_),
                                                  owner_id=access.owner_id())
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        access.record(wb, "create", "sweep", sweep_id)
        return f"✔ Sweep #{sweep_id} started; its first trials are on the queue.", sweep_id

    defaults.click(default_space_for, [base_spec], [space])
    settings = [base_spec, n_trials, parallelism, pruner]
    gr.on([control.change for control in settings], lambda *values: sweep_estimate(wb, *values), settings,
          [estimate], show_progress="hidden", trigger_mode="always_last")
    if task is not None:
        task.change(space_yaml, [task], [space])
    start_event = start.click(on_start, [base_spec, space, n_trials, parallelism, pruner, metric, direction, name],
                              [status, submitted_id])
    return SweepForm(start_event=start_event, submitted_id=submitted_id)


def top_five(wb, sweep_id) -> list[int]:
    """The runs of the five best completed trials (for the Compare tab); ``gr.Error`` with fewer than two."""
    ids = sweep_service.top_runs(wb, int(sweep_id), 5) if sweep_id else []
    if len(ids) < 2:
        raise gr.Error("Comparing needs at least two completed trials.")
    return ids


def confirm_top_text(wb, sweep_id, top: int = CONFIRM_TOP, seeds: int = CONFIRM_SEEDS) -> str:
    """Queue more seeds of the best trials (``sweep_service.confirm_top``) and say what was queued."""
    if not sweep_id:
        raise gr.Error("Pick a sweep first.")
    try:
        confirmed = sweep_service.confirm_top(wb, int(sweep_id), top, seeds, owner_id=access.owner_id())
    except WorkbenchError as exc:
        raise gr.Error(str(exc))
    for new_id in (i for c in confirmed for i in c["ids"]):
        access.record(wb, "create", "run", new_id, {"sweep": int(sweep_id)})
    lines = [f"Trial {c['trial']} (run #{c['run_id']}): " + (
        f"queued runs {', '.join(map(str, c['ids']))} with seeds {', '.join(map(str, c['seeds']))}." if c["ids"]
        else f"already has {seeds} seeds.") for c in confirmed]
    return "  \n".join(lines + ["The trials table ranks confirmed trials by their mean once two seeds finished."])


def best_of(wb, sweep_id) -> int:
    if not sweep_id:
        raise gr.Error("Pick a sweep first.")
    try:
        return sweep_service.best_run(wb, int(sweep_id))
    except WorkbenchError as exc:
        raise gr.Error(str(exc))


def publish_best(wb, sweep_id, with_token: bool) -> str:
    """Publish the sweep's best run as the Share tab publishes a run: public, or protected by a generated
    token shown once with the link that carries it; a refusal is one "✘" line."""
    def publish_best_run(sweep_id_):
        best = best_of(wb, sweep_id_)
        return f"**Best run #{best}** — " + runs_tab.publish_playground(wb, best, with_token)

    return runs_tab.inline(publish_best_run, sweep_id)


@dataclasses.dataclass
class SweepView:
    sweep_id: gr.Dropdown
    compare_top: gr.Button  # wired in workbench.ui.app: fills the Compare tab with top_five()
    open_best: gr.Button  # wired in workbench.ui.app: opens best_of() in the Runs tab
    on_load: Any


def build_view(wb) -> SweepView:
    with gr.Row():
        picker = gr.Dropdown([], label="Sweep", elem_id="sweep-picker", scale=4)
        refresh = gr.Button("↻ sweeps", size="sm", scale=0, min_width=90)
    progress = gr.Markdown(elem_id="sweep-progress")
    with gr.Row():
        cancel = gr.Button("Cancel sweep", variant="stop", size="sm", elem_id="sweep-cancel")
        compare_top = gr.Button("Compare the top 5", size="sm", elem_id="sweep-compare")
        open_best = gr.Button("Open the best run", size="sm", elem_id="sweep-open-best")
        publish = gr.Button("Publish the best run", size="sm", elem_id="sweep-publish")
        confirm = gr.Button(f"Confirm the top {CONFIRM_TOP} with {CONFIRM_SEEDS} seeds", size="sm",
                            elem_id="sweep-confirm")
        publish_token = gr.Checkbox(False, label="Protect with an access token (generated now, shown once)",
                                    elem_id="sweep-publish-token")
    action = gr.Markdown(elem_id="sweep-action")
    with gr.Row():
        by_trial = gr.HTML(elem_id="sweep-by-trial")
        parallel = gr.HTML(elem_id="sweep-parallel-plot")
    with gr.Row():
        with gr.Column(scale=1):
            importance = gr.HTML(elem_id="sweep-importance")
        with gr.Column(scale=2):
            trials = gr.Dataframe(headers=TRIAL_COLUMNS, label="Trials (each one a run in the Runs tab)",
                                  interactive=False, wrap=True, elem_id="sweep-trials-table")
    outputs = [progress, by_trial, parallel, importance, trials]

    def show(sweep_id):
        try:
            return view_values(wb, sweep_id)
        except WorkbenchError as exc:
            raise gr.Error(str(exc))

    def on_tick(sweep_id, shown_choices, shown_view_key, interval):
        try:
            return tick_values(wb, sweep_id, shown_choices, shown_view_key, interval)
        except WorkbenchError as exc:
            raise gr.Error(str(exc))

    def on_cancel(sweep_id):
        if not sweep_id:
            raise gr.Error("Pick a sweep first.")
        try:
            said = sweep_service.cancel_sweep(wb, int(sweep_id))
            access.record(wb, "cancel", "sweep", int(sweep_id))
            return f"Sweep #{sweep_id}: {said}."
        except WorkbenchError as exc:
            raise gr.Error(str(exc))

    picker.change(show, [picker], outputs, show_progress="hidden")
    refresh.click(lambda current: refreshed_sweeps(wb, current), [picker], [picker])
    cancel.click(on_cancel, [picker], [action]).then(show, [picker], outputs)
    def on_publish_best(sweep_id, with_token):
        return publish_best(wb, sweep_id, with_token)

    def on_confirm(sweep_id):
        return confirm_top_text(wb, sweep_id)

    publish.click(on_publish_best, [picker, publish_token], [action])
    confirm.click(on_confirm, [picker], [action]).then(show, [picker], outputs)
    shown_choices = gr.State(None)  # the picker's choices as the last tick sent them
    shown_view = gr.State("")  # the view's fingerprint as the last tick sent it
    timer = gr.Timer(TICK_SECONDS)
    timer.tick(on_tick, [picker, shown_choices, shown_view, timer],
               [picker, *outputs, shown_choices, shown_view, timer], show_progress="hidden")
    picker.change(lambda: gr.Timer(value=TICK_SECONDS), None, [timer], show_progress="hidden", queue=False)

    def on_load(current=None):
        choices = sweep_choices(wb)
        return gr.update(choices=choices, value=current or (choices[0][1] if choices else None))

    return SweepView(sweep_id=picker, compare_top=compare_top, open_best=open_best, on_load=on_load)
