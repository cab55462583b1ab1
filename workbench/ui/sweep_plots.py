"""The sweep view's charts, drawn as SVG text like ``workbench.ui.plots``: pure functions of a sweep record.

    value_vs_trial_svg(sweep)          each trial's value, and the best so far
    parallel_coordinates_svg(sweep)    one axis per parameter plus the objective; a line per trial
    importance_svg(importances)        Optuna's parameter importances as bars
"""
from __future__ import annotations

import html
import math
from typing import Any, Mapping

import pandas as pd

from workbench.ui import format as fmt
from workbench.ui import plots

STATE_COLOURS = {"succeeded": "#2563eb", "pruned": "#f59e0b", "failed": "#dc2626", "cancelled": "#9ca3af",
                 "running": "#16a34a", "queued": "#16a34a", "cancelling": "#9ca3af"}
_W, _H, _T, _B, _SIDE = 560, 300, 40, 40, 40


def value_vs_trial_frame(sweep: Mapping[str, Any]) -> pd.DataFrame:
    """``step`` = trial number; the curves "trial value" (completed trials) and "best so far"."""
    rows, best = [], None
    better = max if sweep.get("direction") == "maximize" else min
    for trial in sorted(sweep.get("trials") or [], key=lambda t: t["trial"]):
        value = trial.get("value")
        if trial.get("optuna_state") != "complete" or not isinstance(value, (int, float)):
            continue
        best = value if best is None else better(best, value)
        rows.append({"step": trial["trial"], "value": float(value), "curve": "trial value"})
        rows.append({"step": trial["trial"], "value": float(best), "curve": "best so far"})
    frame = pd.DataFrame(rows, columns=["step", "value", "curve"])
    return frame.astype({"step": "int64", "value": "float64", "curve": "str"})


def value_vs_trial_svg(sweep: Mapping[str, Any]) -> str:
    return plots.line_chart_svg(value_vs_trial_frame(sweep), f"{sweep.get('metric', 'value')} by trial",
                                x_title="trial", y_title=str(sweep.get("metric", "value")),
                                empty="No trial has completed yet.")


def _axis(values: list[Any], log: bool, label: Any = plots._num) -> tuple[Any, list[str]]:
    """A function value -> 0..1 for one axis, and its labels (low, high; or the choices) written by ``label``."""
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) != len(values):
        choices = sorted({str(v) for v in values})
        span = max(len(choices) - 1, 1)
        return (lambda v: choices.index(str(v)) / span if len(choices) > 1 else 0.5), choices
    use_log = log and all(n > 0 for n in numbers)
    f = (lambda v: math.log10(v)) if use_log else (lambda v: float(v))
    low, high = min(f(n) for n in numbers), max(f(n) for n in numbers)
    span = (high - low) or 1.0
    end = lambda v: label(10 ** v if use_log else v)  # noqa: E731
    return (lambda v: (f(v) - low) / span if high > low else 0.5), [end(low), end(high)]


def parallel_coordinates_svg(sweep: Mapping[str, Any]) -> str:
    """One vertical axis per searched parameter and one for the objective; each trial is a polyline
    coloured by its state (completed trials in blue, pruned amber, failed red)."""
    title = "Parallel coordinates"
    trials = [t for t in sweep.get("trials") or [] if t.get("params")]
    space = (sweep.get("spec") or {}).get("space") or {}
    names = [n for n in space if any(n in t["params"] for t in trials)]
    if not trials or not names:
        return (f"<div class='wb-chart-empty'><b>{title}</b><p class='wb-muted'>No trial has parameters yet.</p>"
                "</div>")
    metric = str(sweep.get("metric", "value"))
    axes = names + [metric]
    values_of = {n: [t["params"].get(n) for t in trials if n in t["params"]] for n in names}
    scored = [t["value"] if isinstance(t.get("value"), (int, float)) else t.get("last_reported") for t in trials]
    values_of[metric] = [v for v in scored if isinstance(v, (int, float))]
    scales = {n: _axis(values_of[n], bool((space.get(n) or {}).get("log")), fmt.param_value) for n in names}
    if values_of[metric]:
        scales[metric] = _axis(values_of[metric], False)
    inner_h = _H - _T - _B
    gap = (_W - 2 * _SIDE) / max(len(axes) - 1, 1)
    x_of = {name: _SIDE + i * gap for i, name in enumerate(axes)}
    parts = []
    for name in axes:
        x = x_of[name]
        parts.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{_T}' y2='{_T + inner_h}' stroke='#94a3b8'/>"
                     f"<text x='{x:.1f}' y='{_H - 8}' font-size='11' text-anchor='middle'>{html.escape(name[:18])}"
                     "</text>")
        if name in scales:
            labels = scales[name][1]
            for j, label in enumerate(labels):
                y = _T + inner_h - (j / max(len(labels) - 1, 1)) * inner_h if len(labels) > 1 else _T + inner_h / 2
                parts.append(f"<text x='{x + 4:.1f}' y='{y + 4:.1f}' font-size='9'>{html.escape(label[:14])}</text>")
    for trial, score in zip(trials, scored):
        points = []
        for name in axes:
            value = score if name == metric else trial["params"].get(name)
            if value is None or name not in scales:
                continue
            y = _T + inner_h - scales[name][0](value) * inner_h
            points.append(f"{x_of[name]:.1f},{y:.1f}")
        colour = STATE_COLOURS.get(str(trial.get("state")), "#475569")
        parts.append(f"<polyline class='wb-trial' points='{' '.join(points)}' fill='none' stroke='{colour}' "
                     f"stroke-width='1.6' opacity='0.8'><title>trial {trial['trial']} ({trial.get('state')}): "
                     f"{html.escape(fmt.params_text(trial['params']))}</title></polyline>")
    legend = "".join(f"<g transform='translate({_SIDE + i * 100},{_T - 16})'><rect width='10' height='10' y='-9' "
                     f"fill='{colour}'/><text x='14' font-size='11'>{state}</text></g>"
                     for i, (state, colour) in enumerate((("succeeded", STATE_COLOURS["succeeded"]),
                                                          ("pruned", STATE_COLOURS["pruned"]),
                                                          ("failed", STATE_COLOURS["failed"]),
                                                          ("running", STATE_COLOURS["running"]))))
    return (f"<svg class='wb-chart wb-parallel' viewBox='0 0 {_W} {_H}' width='100%' role='img' "
            f"xmlns='http://www.w3.org/2000/svg' font-family='sans-serif' fill='currentColor'><title>{title}</title>"
            f"<text x='{_SIDE}' y='14' font-size='13' font-weight='600'>{title}</text>{legend}{''.join(parts)}</svg>")


def importance_svg(importances: Mapping[str, float]) -> str:
    frame = pd.DataFrame([{"parameter": k, "importance": float(v)} for k, v in importances.items()],
                         columns=["parameter", "importance"])
    return plots.bar_chart_svg(frame, "parameter", "importance", "Parameter importance (fANOVA)",
                               y_title="share", empty="Needs at least two completed trials that differ.")
