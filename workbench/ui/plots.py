"""The UI's plots: pandas frames built from service results, drawn as small SVG charts, and the confusion heat-map.

Every function here is pure: frames from what a service returned, SVG/HTML
strings from frames. The SVG is drawn on the server as text (no matplotlib, no
image files), a few kB per chart, and only re-sent when the run changed.
"""
from __future__ import annotations

import html
import math
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from workbench.ui.format import as_dict

CURVE_COLUMNS = ["step", "value", "curve"]
KEPT, TRUNCATED = "kept", "truncated"


def _curve_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A ``step, value, curve`` frame, typed even when empty."""
    frame = pd.DataFrame(rows, columns=CURVE_COLUMNS)
    return frame.astype({"step": "int64", "value": "float64", "curve": "str"})


def label_distribution(labels: Mapping[str, Any] | None, top: int | None = None) -> pd.DataFrame:
    """``{label: count}`` (or ``{entity_type: count}``) as rows, most frequent first.

    With ``top``, at most ``top`` rows: the ``top - 1`` most frequent labels and one
    "other (N labels)" row with the rest summed, so a 124-tag set stays a readable chart.
    """
    rows = []
    for label, count in (labels or {}).items():
        if isinstance(count, Mapping):  # per-split counts: {"train": n, "validation": m}
            count = sum(v for v in count.values() if isinstance(v, (int, float)))
        rows.append({"label": str(label), "count": int(count)})
    frame = pd.DataFrame(rows, columns=["label", "count"]).astype({"label": "str", "count": "int64"})
    frame = frame.sort_values("count", ascending=False, kind="stable").reset_index(drop=True)
    if top is not None and len(frame) > top >= 2:
        rest = frame.iloc[top - 1:]
        other = pd.DataFrame([{"label": f"other ({len(rest)} labels)", "count": int(rest["count"].sum())}])
        frame = pd.concat([frame.iloc[: top - 1], other.astype(frame.dtypes.to_dict())], ignore_index=True)
    return frame


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


def whole_lengths(low: float, high: float, last: bool = False) -> tuple[int, int]:
    """The first and last whole token length a bin ``[low, high)`` (``[low, high]`` when ``last``) holds;
    the last is below the first when it holds none (narrow bins of a tiny file)."""
    first = math.ceil(low)
    end = math.floor(high) if last or high != math.floor(high) else int(high) - 1
    return first, end


def bin_label(low: float, high: float, last: bool = False) -> str:
    """The token lengths a histogram bin holds: ``[low, high)``, or ``[low, high]`` when ``last``.

    Lengths are whole numbers, so a bin is labelled by the whole numbers inside it: ``10–14``, or ``9``
    for a one-length bin. A bin with none (narrow bins of a tiny file) is labelled by its edges.
    """
    first, end = whole_lengths(low, high, last)
    if end < first:
        return f"{low:g}–{high:g}"
    return _lengths_label(first, end)


def _lengths_label(first: int, end: int) -> str:
    return str(first) if end == first else f"{first}–{end}"


def _truncated_in_cut_bin(stats: Mapping[str, Any], bins: list[tuple[float, float, int]], count: int,
                          first: int, end: int) -> int:
    """How many of the ``count`` examples of the bin ``first..end``, which holds the max length, are longer.

    The dataset report knows it exactly: ``truncated_share`` of all its examples, less those in the bins
    past the cut. A report without the share is split in proportion to the lengths on each side.
    """
    max_length = int(stats["max_length"])
    share = stats.get("truncated_share")
    if isinstance(share, (int, float)) and not isinstance(share, bool):
        total = stats.get("count") or sum(c for _, _, c in bins)
        beyond = sum(c for low, _, c in bins if math.ceil(low) > max_length)
        cut = round(share * total) - beyond
    else:
        cut = round(count * (end - max_length) / (end - first + 1))
    return min(max(cut, 0), count)


def token_length_frame(stats: Mapping[str, Any] | None) -> pd.DataFrame:
    """Histogram bars, each marked ``kept`` or ``truncated`` against the max length.

    An example is truncated when it is longer than the max length (as ``truncated_share`` counts
    it), so a bar is ``truncated`` when its shortest length is. The bar that holds both the max
    length and longer ones is split in two at the cut, so the red bars hold exactly the share the
    caption prints, and the colour change on the plot *is* the max-length marker.
    """
    stats = stats or {}
    max_length = stats.get("max_length")
    rows = []
    bins = histogram_bins(stats)
    for index, (low, high, count) in enumerate(bins):
        # numpy-style edges (older datasets) close the last bin at the longest example.
        closed = index == len(bins) - 1 and high == stats.get("max")
        first, end = whole_lengths(low, high, closed)
        if max_length is not None and first <= max_length < end:
            cut = _truncated_in_cut_bin(stats, bins, count, first, end)
            rows.append({"tokens": _lengths_label(first, max_length), "low": low, "count": count - cut,
                         "part": KEPT})
            rows.append({"tokens": _lengths_label(max_length + 1, end), "low": float(max_length + 1),
                         "count": cut, "part": TRUNCATED})
            continue
        part = TRUNCATED if max_length is not None and first > max_length else KEPT
        rows.append({"tokens": bin_label(low, high, last=closed), "low": low, "count": count, "part": part})
    frame = pd.DataFrame(rows, columns=["tokens", "low", "count", "part"])
    return frame.astype({"tokens": "str", "low": "float64", "count": "int64", "part": "str"})


LENGTH_TITLE = "Token lengths (red: cut at max length)"
MANY_CUT = 0.2  # from this share of examples cut, the caption offers a longer max length
MAX_LENGTHS = (128, 256, 384, 512)  # what it offers: the shortest of these that keeps 95 % of examples whole


def token_length_title(stats: Mapping[str, Any] | None) -> str:
    """The histogram's title, saying so when its last bar gathers the longest examples beyond p99."""
    clipped = (stats or {}).get("clipped_at")
    if not clipped:
        return LENGTH_TITLE
    return f"{LENGTH_TITLE} · clipped at p99: the last bar holds every example of {clipped:,}+ tokens"


def longer_max_length(stats: Mapping[str, Any] | None) -> int | None:
    """A max length to offer when at least ``MANY_CUT`` of the examples are cut: the shortest of ``MAX_LENGTHS``
    above the current one that holds p95 (else the longest, 512), None when none is longer or few are cut."""
    stats = stats or {}
    share, current, p95 = stats.get("truncated_share"), stats.get("max_length"), stats.get("p95")
    if not isinstance(share, (int, float)) or share < MANY_CUT or not isinstance(current, int):
        return None
    longer = [n for n in MAX_LENGTHS if n > current]
    if not longer:
        return None
    return next((n for n in longer if isinstance(p95, (int, float)) and n >= p95), longer[-1])


def windows_line(stats: Mapping[str, Any] | None) -> str:
    """"612 of 1,200 texts are longer than the window: they will be read in 2–6 windows each", and what sets it
    (empty when no text is longer than the window, or for tasks that do not read texts in windows)."""
    from storage.datasets.stats import windows_message

    message = windows_message((stats or {}).get("windows"))
    if not message:
        return ""
    sample = " (in the sample measured)" if (stats or {}).get("sampled") else ""
    return (f"📄 {message}{sample}, and their scores pooled: training turns this on (*Chunking*: auto) once a "
            f"fifth of the training texts are longer than the window; with chunking off they are cut at "
            f"{stats.get('max_length', '?')} tokens")


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
    if stats.get("clipped_at"):
        parts.append(f"the chart stops at p99 ({stats.get('p99')}); its last bar holds the longer examples")
    line = " · ".join(parts)
    windows = windows_line(stats)
    if windows:  # text classification reads long texts in windows (train.chunking): no need for a longer length
        return f"{line}  \n{windows}"
    offer = longer_max_length(stats)
    if offer:
        line += (f"  \n⚠ Many examples are cut: a **max length of {offer}** would keep "
                 f"{'95 % of them' if offer >= (stats.get('p95') or 0) else 'more of them'} whole "
                 "(set *Max length* above; longer inputs train slower)")
    return line


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


def is_quality_metric(name: str) -> bool:
    """An evaluation score worth plotting (``eval/accuracy``), not a timing (``eval/runtime``) or training stat."""
    lowered = name.lower()
    return lowered.startswith("eval") and not any(t in lowered for t in ("runtime", "second", "loss"))


def curves_frame(curves: Any, *, loss: bool) -> pd.DataFrame:
    """Loss curves (``loss=True``) or the evaluation-score curves of one run.

    Learning rate, gradient norm and timings are left out: on the same axis they flatten the plot.
    """
    wanted = is_loss if loss else is_quality_metric
    rows = [{"step": s, "value": v, "curve": n} for n, s, v in curve_points(curves) if wanted(n) and v == v]
    # The final evaluation of the best checkpoint is logged at the last step again: keep the last value.
    frame = _curve_frame(rows).drop_duplicates(["curve", "step"], keep="last")
    return frame.sort_values(["curve", "step"], kind="stable").reset_index(drop=True)


def overlaid_curves(curves_by_run: Mapping[str, Any], metric: str) -> pd.DataFrame:
    """One metric (e.g. ``eval/accuracy``) of several runs, coloured by run label."""
    rows = []
    for label, curves in curves_by_run.items():
        rows.extend({"step": s, "value": v, "curve": label} for n, s, v in curve_points(curves) if n == metric)
    return _curve_frame(rows)


def curve_names(curves_list: Iterable[Any]) -> list[str]:
    """The curve names present in any of the runs, eval curves first."""
    names = {n for curves in curves_list for n, _, _ in curve_points(curves) if is_loss(n) or is_quality_metric(n)}
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


# --- SVG rendering -----------------------------------------------------------------------------------------
# Gradio 6.31's native plots fix their colour domain on the first frame they get: a curve that
# appears later (``eval/loss`` after the first evaluation, a second run) is never drawn. The charts
# below are plain SVG strings for ``gr.HTML``: each update redraws everything, nothing to load.

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d", "#475569")
_W, _H, _L, _R, _T, _B = 560, 280, 58, 16, 40, 52


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _frame_svg(title: str, body: str, legend: list[tuple[str, str]], x_title: str, y_title: str) -> str:
    items, x, shown = [], float(_L), 0
    for name, colour in legend:
        label = name[:26]
        width = 22 + 6.2 * len(label)
        if x + width > _W - _R - 50:
            break
        items.append(f"<g transform='translate({x:.0f},{_T - 14})'><rect width='10' height='10' y='-9' "
                     f"fill='{colour}'/><text x='14' font-size='11'>{html.escape(label)}</text></g>")
        x, shown = x + width, shown + 1
    items = "".join(items)
    more = (f"<text x='{_W - _R}' y='{_T - 14}' font-size='11' text-anchor='end'>+{len(legend) - shown} more</text>"
            if len(legend) > shown else "")
    return (f"<svg class='wb-chart' viewBox='0 0 {_W} {_H}' width='100%' role='img' xmlns='http://www.w3.org/2000/svg'"
            f" font-family='sans-serif' fill='currentColor'><title>{html.escape(title)}</title>"
            f"<text x='{_L}' y='14' font-size='13' font-weight='600'>{html.escape(title)}</text>{items}{more}{body}"
            f"<text x='{(_L + _W - _R) / 2}' y='{_H - 6}' font-size='11' text-anchor='middle'>{html.escape(x_title)}</text>"
            f"<text transform='translate(12,{(_T + _H - _B) / 2}) rotate(-90)' font-size='11' text-anchor='middle'>"
            f"{html.escape(y_title)}</text></svg>")


def line_chart_svg(frame: pd.DataFrame, title: str, *, x_title: str = "step", y_title: str = "value",
                   empty: str = "No points yet.") -> str:
    """Curves of a ``step, value, curve`` frame as an SVG line chart (one colour per curve)."""
    if frame is None or not len(frame):
        return f"<div class='wb-chart-empty'><b>{html.escape(title)}</b><p class='wb-muted'>{html.escape(empty)}</p></div>"
    x_low, x_high = float(frame["step"].min()), float(frame["step"].max())
    y_low, y_high = float(frame["value"].min()), float(frame["value"].max())
    pad = (y_high - y_low) * 0.05 or abs(y_high) * 0.05 or 1.0
    y_low, y_high = y_low - pad, y_high + pad
    groups = list(frame.groupby("curve", sort=False))
    if any(len(group) == 1 for _, group in groups):
        # A lone point (one evaluation) drawn at the last step sat on the frame's edge, a dot under its stroke.
        x_pad = (x_high - x_low) * 0.06 or 1.0
        x_low, x_high = x_low - x_pad, x_high + x_pad
    x_span = (x_high - x_low) or 1.0
    inner_w, inner_h = _W - _L - _R, _H - _T - _B

    def sx(x: float) -> float:
        return _L + (x - x_low) / x_span * inner_w if x_high > x_low else _L + inner_w / 2

    def sy(y: float) -> float:
        return _T + inner_h - (y - y_low) / (y_high - y_low) * inner_h

    parts = [f"<rect x='{_L}' y='{_T}' width='{inner_w}' height='{inner_h}' fill='none' stroke='#cbd5e1'/>"]
    for tick in _ticks(y_low, y_high):
        parts.append(f"<line x1='{_L}' x2='{_W - _R}' y1='{sy(tick):.1f}' y2='{sy(tick):.1f}' stroke='#e2e8f0'/>"
                     f"<text x='{_L - 6}' y='{sy(tick) + 4:.1f}' font-size='10' text-anchor='end'>{_num(tick)}</text>")
    for tick in (t for t in _ticks(x_low, x_high) if t == int(t)):  # steps are whole numbers
        parts.append(f"<text x='{sx(tick):.1f}' y='{_T + inner_h + 16}' font-size='10' text-anchor='middle'>"
                     f"{_num(tick)}</text>")
    legend = []
    for index, (name, group) in enumerate(groups):
        colour = PALETTE[index % len(PALETTE)]
        legend.append((str(name), colour))
        points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(group["step"], group["value"]))
        parts.append(f"<polyline class='wb-curve' data-curve='{html.escape(str(name))}' points='{points}' "
                     f"fill='none' stroke='{colour}' stroke-width='2'/>")
        if len(group) == 1:
            parts.append(_lone_point(str(name), float(group["step"].iloc[0]), float(group["value"].iloc[0]),
                                     sx, sy, colour))
        elif len(group) <= 40:
            parts.extend(f"<circle cx='{sx(x):.1f}' cy='{sy(y):.1f}' r='2.5' fill='{colour}'><title>"
                         f"{html.escape(str(name))} @ {int(x)}: {_num(y)}</title></circle>"
                         for x, y in zip(group["step"], group["value"]))
    return _frame_svg(title, "".join(parts), legend, x_title, y_title)


def _lone_point(name: str, x: float, y: float, sx: Any, sy: Any, colour: str) -> str:
    """A series of one point (a run evaluated once): a marker large enough to see, and its value written
    above it (a polyline of one point draws nothing)."""
    cx, cy = sx(x), sy(y)
    label_y = cy - 9 if cy - _T >= 18 else cy + 17  # below the marker when above it would leave the frame
    return (f"<circle class='wb-lone-point' cx='{cx:.1f}' cy='{cy:.1f}' r='5' fill='{colour}' stroke='#fff' "
            f"stroke-width='1.5'><title>{html.escape(name)} @ {int(x)}: {_num(y)}</title></circle>"
            f"<text class='wb-point-label' x='{cx:.1f}' y='{label_y:.1f}' font-size='11' text-anchor='middle' "
            f"fill='{colour}'>{_num(y)}</text>")


def bar_chart_svg(frame: pd.DataFrame, x: str, y: str, title: str, *, colour_by: str | None = None,
                  colours: Mapping[str, str] | None = None, x_title: str = "", y_title: str = "count",
                  empty: str = "Nothing to show yet.") -> str:
    """Bars of ``frame[y]`` per ``frame[x]`` in frame order, starting at zero (so small bars stay visible)."""
    if frame is None or not len(frame):
        return f"<div class='wb-chart-empty'><b>{html.escape(title)}</b><p class='wb-muted'>{html.escape(empty)}</p></div>"
    inner_w, inner_h = _W - _L - _R, _H - _T - _B
    top = float(frame[y].max()) or 1.0
    ticks = _ticks(0.0, top * 1.05)
    scale_top = max(ticks[-1], top)
    slot = inner_w / len(frame)
    parts = [f"<rect x='{_L}' y='{_T}' width='{inner_w}' height='{inner_h}' fill='none' stroke='#cbd5e1'/>"]
    for tick in ticks:
        ty = _T + inner_h - tick / scale_top * inner_h
        parts.append(f"<line x1='{_L}' x2='{_W - _R}' y1='{ty:.1f}' y2='{ty:.1f}' stroke='#e2e8f0'/>"
                     f"<text x='{_L - 6}' y='{ty + 4:.1f}' font-size='10' text-anchor='end'>{_num(tick)}</text>")
    legend: dict[str, str] = {}
    rotate = len(frame) > 8
    for i, row in enumerate(frame.itertuples(index=False)):
        record = row._asdict()
        key = str(record[colour_by]) if colour_by else ""
        colour = (colours or {}).get(key) or PALETTE[0]
        if colour_by:
            legend.setdefault(key, colour)
        height = float(record[y]) / scale_top * inner_h
        bx = _L + i * slot + slot * 0.1
        parts.append(f"<rect class='wb-bar' x='{bx:.1f}' y='{_T + inner_h - height:.1f}' width='{slot * 0.8:.1f}' "
                     f"height='{height:.1f}' fill='{colour}'><title>{html.escape(str(record[x]))}: "
                     f"{_num(float(record[y]))}</title></rect>")
        lx, ly = _L + (i + 0.5) * slot, _T + inner_h + 14
        label = html.escape(str(record[x])[:14])
        parts.append(f"<text x='{lx:.1f}' y='{ly}' font-size='10' text-anchor='{'end' if rotate else 'middle'}'"
                     + (f" transform='rotate(-40 {lx:.1f} {ly})'" if rotate else "") + f">{label}</text>")
    return _frame_svg(title, "".join(parts), list(legend.items()), x_title, y_title)


def metric_bars_frame(scores: Mapping[str, Mapping[str, Any]], metric: str) -> pd.DataFrame:
    """One bar per run (``scores``: run label → its metrics) for ``metric``; runs without it are left out."""
    rows = [{"run": label, "value": float(values[metric])} for label, values in scores.items()
            if isinstance((values or {}).get(metric), (int, float)) and not isinstance(values[metric], bool)]
    return pd.DataFrame(rows, columns=["run", "value"])


# ---------------------------------------------------------------- calibration and thresholds (tables.json)

def _unit_square_svg(title: str, series: Sequence[tuple[str, Sequence[tuple[float, float]]]], x_title: str,
                     y_title: str, *, diagonal: bool = False, mark: tuple[str, float, float] | None = None) -> str:
    """Curves on [0, 1] x [0, 1]: one polyline with dots per series, the y = x diagonal, a marked point."""
    inner_w, inner_h = _W - _L - _R, _H - _T - _B

    def sx(x: float) -> float:
        return _L + x * inner_w

    def sy(y: float) -> float:
        return _T + inner_h - y * inner_h

    parts = [f"<rect x='{_L}' y='{_T}' width='{inner_w}' height='{inner_h}' fill='none' stroke='#cbd5e1'/>"]
    for tick in _ticks(0.0, 1.0):
        parts.append(f"<line x1='{_L}' x2='{_W - _R}' y1='{sy(tick):.1f}' y2='{sy(tick):.1f}' stroke='#e2e8f0'/>"
                     f"<text x='{_L - 6}' y='{sy(tick) + 4:.1f}' font-size='10' text-anchor='end'>{_num(tick)}</text>"
                     f"<text x='{sx(tick):.1f}' y='{_T + inner_h + 16}' font-size='10' text-anchor='middle'>"
                     f"{_num(tick)}</text>")
    if diagonal:
        parts.append(f"<line class='wb-diagonal' x1='{sx(0)}' y1='{sy(0)}' x2='{sx(1)}' y2='{sy(1)}' stroke='#94a3b8' "
                     "stroke-dasharray='4 4'/>")
    legend = []
    for index, (name, points) in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        legend.append((name, colour))
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        parts.append(f"<polyline class='wb-curve' data-curve='{html.escape(name)}' points='{line}' fill='none' "
                     f"stroke='{colour}' stroke-width='2'/>")
        parts.extend(f"<circle cx='{sx(x):.1f}' cy='{sy(y):.1f}' r='2.5' fill='{colour}'><title>"
                     f"{html.escape(name)}: {_num(x)}, {_num(y)}</title></circle>" for x, y in points[:60])
    if mark is not None:
        label, x, y = mark
        parts.append(f"<circle class='wb-mark' cx='{sx(x):.1f}' cy='{sy(y):.1f}' r='5' fill='none' stroke='#0f172a' "
                     f"stroke-width='2'><title>{html.escape(label)}</title></circle>"
                     f"<text x='{sx(x) + 8:.1f}' y='{sy(y) - 8:.1f}' font-size='11'>{html.escape(label)}</text>")
    return _frame_svg(title, "".join(parts), legend, x_title, y_title)


def reliability_svg(calibration: Mapping[str, Any] | None) -> str:
    """The reliability diagram of a classification run (``tables.json``'s ``calibration``): accuracy against
    mean confidence per bin, before and after temperature scaling, beside the diagonal of perfect calibration."""
    title = "Reliability diagram"
    if not calibration or not calibration.get("bins"):
        return f"<div class='wb-chart-empty'><b>{title}</b><p class='wb-muted'>No calibration recorded.</p></div>"

    def points(bins: Any) -> list[tuple[float, float]]:
        return [(float(b["confidence"]), float(b["accuracy"])) for b in bins or () if b.get("count")]

    series = [(f"as trained (ECE {_num(float(calibration.get('ece', 0.0)))})", points(calibration["bins"]))]
    if calibration.get("bins_calibrated"):
        temperature = _num(float(calibration.get("temperature", 1.0)))
        series.append((f"T = {temperature} (ECE {_num(float(calibration.get('ece_calibrated', 0.0)))})",
                       points(calibration["bins_calibrated"])))
    note = " — temperature applied" if calibration.get("applied") else (
        " — temperature not fitted: too few validation examples" if calibration.get("not_fitted") else "")
    return _unit_square_svg(title + note, series, "confidence", "accuracy", diagonal=True)


def pr_curve_svg(precision_recall: Mapping[str, Any] | None) -> str:
    """The positive class's precision-recall curve (``tables.json``'s ``precision_recall``), the chosen
    threshold marked."""
    title = "Precision-recall"
    if not precision_recall or not precision_recall.get("points"):
        return f"<div class='wb-chart-empty'><b>{title}</b><p class='wb-muted'>No threshold was tuned.</p></div>"
    points = [(float(p["recall"]), float(p["precision"])) for p in precision_recall["points"]]
    mark = None
    threshold = precision_recall.get("threshold")
    if threshold is not None:
        # the curve's point nearest the chosen threshold (the curve keeps at most ~100 of them)
        nearest = min(precision_recall["points"], key=lambda p: abs(float(p["threshold"]) - float(threshold)))
        mark = (f"threshold {_num(float(threshold))}", float(nearest["recall"]), float(nearest["precision"]))
    name = f"{precision_recall.get('positive', 'positive')} ({precision_recall.get('target', '')})"
    return _unit_square_svg(title, [(name, points)], "recall", "precision", mark=mark)


# ---------------------------------------------------------------- labelling: the learning curve

def learning_curve_svg(curve: Sequence[Mapping[str, Any]] | None, majority: float | None = None) -> str:
    """A labelling project's learning curve: the estimated score against the number of labels, its interval as a
    shaded band, and the majority-class baseline as a dashed line (per point where the refits recorded it, else
    ``majority`` across the chart). ``curve`` holds the service's estimate dicts (``labels``, ``estimate``,
    ``low``, ``high``, ``majority``, ``metric``); points without an estimate are left out."""
    points = [p for p in curve or () if isinstance(p.get("estimate"), (int, float))]
    metric = str((points[-1] if points else {}).get("metric") or "accuracy").replace("_", "-")
    title = f"Estimated {metric} as labels grow"
    if not points:
        return (f"<div class='wb-chart-empty' id='label-curve-empty'><b>{html.escape(title)}</b><p class='wb-muted'>"
                "The curve starts after the first refit of the model (every few labels).</p></div>")
    inner_w, inner_h = _W - _L - _R, _H - _T - _B
    xs = [float(p["labels"]) for p in points]
    x_low, x_high = (min(xs), max(xs)) if len(points) > 1 else (xs[0] - 1.0, xs[0] + 1.0)

    def sx(x: float) -> float:
        return _L + (x - x_low) / ((x_high - x_low) or 1.0) * inner_w

    def sy(y: float) -> float:
        return _T + inner_h - min(max(y, 0.0), 1.0) * inner_h

    def bound(p: Mapping[str, Any], key: str) -> float:
        value = p.get(key)
        return float(value) if isinstance(value, (int, float)) else float(p["estimate"])

    parts = [f"<rect x='{_L}' y='{_T}' width='{inner_w}' height='{inner_h}' fill='none' stroke='#cbd5e1'/>"]
    for tick in _ticks(0.0, 1.0):
        parts.append(f"<line x1='{_L}' x2='{_W - _R}' y1='{sy(tick):.1f}' y2='{sy(tick):.1f}' stroke='#e2e8f0'/>"
                     f"<text x='{_L - 6}' y='{sy(tick) + 4:.1f}' font-size='10' text-anchor='end'>{_num(tick)}</text>")
    for tick in (t for t in _ticks(x_low, x_high) if t == int(t) and t >= 0):
        parts.append(f"<text x='{sx(tick):.1f}' y='{_T + inner_h + 16}' font-size='10' text-anchor='middle'>"
                     f"{_num(tick)}</text>")
    colour, band, base = PALETTE[0], "#93c5fd", "#64748b"
    upper = [f"{sx(x):.1f},{sy(bound(p, 'high')):.1f}" for x, p in zip(xs, points)]
    lower = [f"{sx(x):.1f},{sy(bound(p, 'low')):.1f}" for x, p in zip(xs, points)]
    if len(points) > 1:
        parts.append(f"<polygon class='wb-interval' points='{' '.join(upper + lower[::-1])}' fill='{band}' "
                     "fill-opacity='0.45' stroke='none'/>")
    else:
        parts.append(f"<line class='wb-interval' x1='{sx(xs[0]):.1f}' x2='{sx(xs[0]):.1f}' "
                     f"y1='{sy(bound(points[0], 'low')):.1f}' y2='{sy(bound(points[0], 'high')):.1f}' "
                     f"stroke='{band}' stroke-width='8'/>")
    baseline = [(x, float(p["majority"])) for x, p in zip(xs, points) if isinstance(p.get("majority"), (int, float))]
    if not baseline and isinstance(majority, (int, float)):
        baseline = [(x_low, float(majority)), (x_high, float(majority))]
    if len(baseline) == 1:
        baseline = [(x_low, baseline[0][1]), (x_high, baseline[0][1])]
    legend = [(f"estimated {metric}", colour), ("interval", band)]
    if baseline:
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in baseline)
        parts.append(f"<polyline class='wb-majority' points='{line}' fill='none' stroke='{base}' stroke-width='1.5' "
                     "stroke-dasharray='5 4'/>")
        legend.append(("majority class", base))
    line = " ".join(f"{sx(x):.1f},{sy(float(p['estimate'])):.1f}" for x, p in zip(xs, points))
    parts.append(f"<polyline class='wb-curve' data-curve='estimate' points='{line}' fill='none' stroke='{colour}' "
                 "stroke-width='2'/>")
    parts.extend(f"<circle cx='{sx(x):.1f}' cy='{sy(float(p['estimate'])):.1f}' r='3' fill='{colour}'><title>"
                 f"{int(x)} labels: {_num(float(p['estimate']))} ({_num(bound(p, 'low'))} – {_num(bound(p, 'high'))})"
                 f"{' · ' + html.escape(str(p['source'])) if p.get('source') else ''}</title></circle>"
                 for x, p in zip(xs[-60:], points[-60:]))
    return _frame_svg(title, "".join(parts), legend, "labels given", metric)
