"""Compare tab: two or more runs side by side — metrics, overlaid curves, config diff, per-class scores."""
from __future__ import annotations

import dataclasses
from typing import Any

import gradio as gr
import pandas as pd

from jobs import baselines
from workbench.errors import WorkbenchError
from workbench.services import runs as runs_service
from workbench.ui import format as fmt
from workbench.ui import plots
from workbench.services.runs import read_run_tables
from workbench.ui.runs_tab import _items_and_total, per_class_rows

PICKER_LIMIT = 200


def run_choices(wb) -> list[tuple[str, int]]:
    """The most recent runs for the picker (the picker is a search box; 200 is plenty to scroll)."""
    items, _ = _items_and_total(runs_service.list_runs(wb, order_by="-created_at", limit=PICKER_LIMIT, offset=0))
    return [fmt.run_choice(run) for run in items]


@dataclasses.dataclass
class Comparison:
    metrics: pd.DataFrame
    diff: pd.DataFrame
    per_class: pd.DataFrame
    curves: dict[str, Any]
    curve_names: list[str]
    message: str


def compare(wb, run_ids: list[int]) -> Comparison:
    """Read the chosen runs through the runs service and line them up."""
    runs = [fmt.as_dict(runs_service.get_run(wb, int(r))) for r in run_ids]
    labels = [f"#{r['id']} {fmt.run_name(r)}" for r in runs]
    metric_keys = quality_metrics(runs)
    metrics = pd.DataFrame([[label, r.get("status"), fmt.model_name(r.get("model")),
                             *[fmt.format_metric((r.get("metrics") or {}).get(k)) for k in metric_keys],
                             baselines.summary(r.get("metrics")) or fmt.MISSING,
                             baselines.warning(r.get("metrics")) or ("beats the baselines"
                                                                     if baselines.summary(r.get("metrics")) else fmt.MISSING)]
                            for label, r in zip(labels, runs)],
                           columns=["Run", "Status", "Model", *metric_keys, "Baselines (same split)", "Verdict"])
    # None in a spec means "the engine chooses": show what it chose once the run has recorded it.
    resolved = [runs_service.read_run_hyperparameters(r.get("output_dir")) for r in runs]
    diff_rows = [[key, *[fmt.shown_setting(key, v, hp) for v, hp in zip(values, resolved)]]
                 for key, values in fmt.config_diff([r.get("spec") or {} for r in runs])]
    diff = pd.DataFrame(diff_rows, columns=["Setting", *labels])
    per_class = side_by_side(labels, [per_class_rows(read_run_tables(r["output_dir"]) if r.get("output_dir") else {})
                                      for r in runs])
    curves = {label: runs_service.run_curves(wb, r["id"]) for label, r in zip(labels, runs)}
    message = f"{len(diff_rows)} setting(s) differ." if diff_rows else "The configurations are identical."
    return Comparison(metrics, diff, per_class, curves, plots.curve_names(curves.values()), message)


HOUSEKEEPING = ("seconds", "peak_", "per_second", "params", "parameters", "runtime", "step", "epoch", "examples",
                "records", "evaluations", "checkpoints", "processes")


def quality_metrics(runs: list[dict[str, Any]]) -> list[str]:
    """The metric keys worth comparing (scores, not timings or memory), headline metrics first."""
    keys = {k for r in runs for k, v in (r.get("metrics") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not any(h in k for h in HOUSEKEEPING)}
    headline = [k for task_keys in fmt.MAIN_METRICS.values() for k in task_keys]
    return sorted(keys, key=lambda k: (headline.index(k) if k in headline else len(headline), k))


def overlay_svg(curves: dict[str, Any], name: str | None) -> str:
    return plots.line_chart_svg(plots.overlaid_curves(curves, name or ""), name or "Overlaid curves",
                                empty="None of these runs has this curve.")


def side_by_side(labels: list[str], tables: list[list[list[Any]]]) -> pd.DataFrame:
    """Per-class F1 of each run in one table: one row per class, one column per run."""
    classes: dict[str, dict[str, Any]] = {}
    for label, rows in zip(labels, tables):
        for row in rows:
            classes.setdefault(str(row[0]), {})[label] = row[3]
    return pd.DataFrame([[name, *[scores.get(label, fmt.MISSING) for label in labels]]
                         for name, scores in classes.items()], columns=["Class / entity (F1)", *labels])


def build(wb) -> dict[str, Any]:
    with gr.Row():
        picker = gr.Dropdown([], multiselect=True, label="Runs to compare (two or more)", elem_id="compare-runs",
                             scale=4)
        refresh = gr.Button("↻ runs", size="sm", scale=0, min_width=80)
        go = gr.Button("Compare", variant="primary", scale=1, elem_id="compare-go")
    message = gr.Markdown(elem_id="compare-message")
    metrics = gr.Dataframe(label="Final metrics", interactive=False, elem_id="compare-metrics")
    with gr.Row():
        with gr.Column():
            diff = gr.Dataframe(label="Configuration: only what differs", interactive=False, wrap=True,
                                elem_id="compare-diff")
        with gr.Column():
            curve = gr.Dropdown([], label="Curve", elem_id="compare-curve")
            overlay = gr.HTML(elem_id="compare-plot")
    per_class = gr.Dataframe(label="Per class / entity, side by side", interactive=False)
    curves_state = gr.State({})

    def on_compare(ids):
        if not ids or len(ids) < 2:
            raise gr.Error("Pick at least two runs.")
        try:
            result = compare(wb, [int(i) for i in ids])
        except WorkbenchError as exc:
            raise gr.Error(str(exc))
        first = result.curve_names[0] if result.curve_names else None
        return (result.message, result.metrics, result.diff, result.per_class,
                gr.update(choices=result.curve_names, value=first),
                overlay_svg(result.curves, first),
                result.curves)

    go.click(on_compare, [picker], [message, metrics, diff, per_class, curve, overlay, curves_state])
    curve.change(lambda name, curves: overlay_svg(curves or {}, name), [curve, curves_state],
                 [overlay])
    def on_refresh(chosen):
        """Fresh choices. The value is left alone (a pick made while this ran must not be undone) unless a
        picked run no longer exists."""
        choices = run_choices(wb)
        ids = {value for _, value in choices}
        kept = [r for r in (chosen or []) if _as_id(r) in ids]
        if len(kept) == len(chosen or []):
            return gr.update(choices=choices)
        return gr.update(choices=choices, value=kept)

    refresh.click(on_refresh, [picker], [picker])
    return {"picker": picker, "refresh": on_refresh}


def _as_id(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
