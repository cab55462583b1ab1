"""Data for the UI's plots, as pandas frames for ``gr.BarPlot``/``gr.LinePlot``, and the confusion-matrix heat-map.

Native Gradio plots render in the browser (no matplotlib, nothing to rasterise on
the server), so a refresh of the live curves costs one small frame per tick.
Every function here is pure: it takes what a service returned and gives a frame.
"""
from __future__ import annotations

import html
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from workbench.ui.format import as_dict

CURVE_COLUMNS = ["step", "value", "curve"]
KEPT, TRUNCATED = "kept", "truncated"


def _curve_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Typed even when empty: the browser keeps the axis types of the first frame it gets, and an
    empty frame of ``object`` columns would make the value axis categorical for good."""
    frame = pd.DataFrame(rows, columns=CURVE_COLUMNS)
    return frame.astype({"step": "int64", "value": "float64", "curve": "str"})


def label_distribution(labels: Mapping[str, Any] | None) -> pd.DataFrame:
    """``{label: count}`` (or ``{entity_type: count}``) as rows, most frequent first."""
    rows = []
    for label, count in (labels or {}).items():
        if isinstance(count, Mapping):  # per-split counts: {"train": n, "validation": m}
            count = sum(v for v in count.values() if isinstance(v, (int, float)))
        rows.append({"label": str(label), "count": int(count)})
    frame = pd.DataFrame(rows, columns=["label", "count"]).astype({"label": "str", "count": "int64"})
    return frame.sort_values("count", ascending=False, kind="stable").reset_index(drop=True)


def histogram_bins(stats: Mapping[str, Any]) -> list[tuple[float, float, int]]:
    """The token-length histogram of a dataset report as ``(low, high, count)`` bins.

    Accepts ``{"edges": [...], "counts": [...]}`` (numpy style), ``{"bins": [...], "counts": [...]}``
    or a list of ``[low, high, count]`` / ``{"low", "high", "count"}`` items.
    """
    hist = stats.get("histogram") if isinstance(stats, Mapping) else None
    if not hist:
        return []
    if isinstance(hist, Mapping):
        counts = list(hist.get("counts") or [])
        edges = list(hist.get("edges") or hist.get("bins") or hist.get("bin_edges") or [])
        if len(edges) == len(counts) + 1:
            return [(float(edges[i]), float(edges[i + 1]), int(counts[i])) for i in range(len(counts))]
        if len(edges) == len(counts) and len(edges) > 1:  # left edges only
            step = float(edges[1]) - float(edges[0])
            return [(float(e), float(e) + step, int(c)) for e, c in zip(edges, counts)]
        return []
    bins = []
    for item in hist:
        if isinstance(item, Mapping):
            bins.append((float(item["low"]), float(item["high"]), int(item["count"])))
        else:
            low, high, count = item
            bins.append((float(low), float(high), int(count)))
    return bins


def token_length_frame(stats: Mapping[str, Any] | None) -> pd.DataFrame:
    """Histogram bars, each marked ``kept`` or ``truncated`` against the max length.

    A bar is ``truncated`` when its lower edge is at or beyond the max length, so
    the colour change on the plot *is* the max-length marker.
    """
    stats = stats or {}
    max_length = stats.get("max_length")
    rows = []
    for low, high, count in histogram_bins(stats):
        part = TRUNCATED if max_length is not None and low >= max_length else KEPT
        rows.append({"tokens": f"{int(low)}–{int(high)}", "low": low, "count": count, "part": part})
    frame = pd.DataFrame(rows, columns=["tokens", "low", "count", "part"])
    return frame.astype({"tokens": "str", "low": "float64", "count": "int64", "part": "str"})


def token_length_caption(stats: Mapping[str, Any] | None) -> str:
    """One line under the histogram: max length, share truncated, mean/p95, sampling."""
    stats = stats or {}
    if not stats:
        return "Token lengths are not available (no tokenizer could be loaded offline)."
    share = stats.get("truncated_share")
    parts = [f"max length **{stats.get('max_length', '?')}**"]
    if isinstance(share, (int, float)):
        parts.append(f"**{share * 100:.1f}%** of examples truncated")
    for key, label in (("mean", "mean"), ("p50", "median"), ("p95", "p95"), ("max", "longest")):
        value = stats.get(key)
        if isinstance(value, (int, float)):
            parts.append(f"{label} {value:.0f}")
    if stats.get("sampled"):
        parts.append(f"measured on a sample of {stats.get('sample_size', stats['sampled'])}")
    return " · ".join(parts)


def curve_points(curves: Any) -> list[tuple[str, int, float]]:
    """A run's curves as ``(name, step, value)`` points.

    Accepts ``{name: [(step, value), ...]}``, ``{name: {"steps": [...], "values": [...]}}``,
    ``{name: [{"step", "value"}, ...]}`` or a flat list of ``{"name", "step", "value"}``.
    """
    points: list[tuple[str, int, float]] = []
    if isinstance(curves, Mapping):
        for name, series in curves.items():
            if isinstance(series, Mapping):
                steps, values = series.get("steps", []), series.get("values", [])
                points.extend((str(name), int(s), float(v)) for s, v in zip(steps, values))
                continue
            for item in series or []:
                if isinstance(item, Mapping):
                    points.append((str(name), int(item["step"]), float(item["value"])))
                else:
                    points.append((str(name), int(item[0]), float(item[1])))
    else:
        for item in curves or []:
            p = as_dict(item)
            points.append((str(p["name"]), int(p["step"]), float(p["value"])))
    return points


def is_loss(name: str) -> bool:
    return "loss" in name.lower()


def curves_frame(curves: Any, *, loss: bool) -> pd.DataFrame:
    """Loss curves (``loss=True``) or the other metric curves of one run, for a ``gr.LinePlot``.

    The learning rate is left out: on the same axis as a loss it flattens the plot.
    """
    rows = [{"step": s, "value": v, "curve": n} for n, s, v in curve_points(curves)
            if is_loss(n) == loss and "learning_rate" not in n and v == v]
    return _curve_frame(rows).sort_values(["curve", "step"], kind="stable").reset_index(drop=True)


def overlaid_curves(curves_by_run: Mapping[str, Any], metric: str) -> pd.DataFrame:
    """One metric (e.g. ``eval/accuracy``) of several runs, coloured by run label."""
    rows = []
    for label, curves in curves_by_run.items():
        rows.extend({"step": s, "value": v, "curve": label} for n, s, v in curve_points(curves) if n == metric)
    return _curve_frame(rows)


def curve_names(curves_list: Iterable[Any]) -> list[str]:
    """The curve names present in any of the runs, eval curves first."""
    names = {n for curves in curves_list for n, _, _ in curve_points(curves) if "learning_rate" not in n}
    return sorted(names, key=lambda n: (not n.startswith("eval"), n))


def confusion_html(labels: Sequence[str], matrix: Sequence[Sequence[float]], max_labels: int = 30) -> str:
    """A confusion matrix as an HTML heat-map table (rows: gold, columns: predicted).

    Cell colour is the share of the gold row, so rare classes stay readable.
    """
    if not labels or not matrix:
        return "<p class='wb-muted'>No confusion matrix for this run.</p>"
    labels = [str(label) for label in labels][:max_labels]
    head = "".join(f"<th title='predicted {html.escape(l)}'>{html.escape(l)}</th>" for l in labels)
    body = []
    for label, row in zip(labels, matrix):
        total = sum(row[: len(labels)]) or 1
        cells = []
        for j, value in enumerate(row[: len(labels)]):
            share = value / total
            colour = f"rgba(37,99,235,{0.08 + 0.85 * share:.2f})" if value else "transparent"
            ink = "#fff" if share > 0.55 else "inherit"
            weight = "700" if label == labels[j] else "400"
            cells.append(f"<td style='background:{colour};color:{ink};font-weight:{weight}'>{int(value)}</td>")
        body.append(f"<tr><th>{html.escape(label)}</th>{''.join(cells)}</tr>")
    return ("<div class='wb-confusion'><table><thead><tr><th>gold \\ predicted</th>" + head + "</tr></thead><tbody>"
            + "".join(body) + "</tbody></table></div>")
