"""The pictures a mirror attaches to a run: its curves, and its confusion matrix when the task has one.

    write_pictures(folder, points, tables) -> [paths]   curves.png, confusion_matrix.png
    warm_up()                                           load matplotlib ahead of time

Drawn with matplotlib's object API (no pyplot state), so that two runs in one process never share a figure.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from jobs.tracking.record import Point


def warm_up() -> None:
    """Load matplotlib's drawing code (about a second of CPU) ahead of the first picture."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401


def write_pictures(folder: Path, points: Iterable[Point], tables: Mapping[str, Any]) -> list[Path]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    curves: dict[str, list[tuple[int, float]]] = {}
    for point in points:
        curves.setdefault(point.name, []).append((point.step, point.value))
    if curves:
        names = sorted(curves)
        figure = Figure(figsize=(6, 2.2 * len(names)))
        FigureCanvasAgg(figure)
        for index, name in enumerate(names, 1):
            axes = figure.add_subplot(len(names), 1, index)
            steps, values = zip(*curves[name])
            axes.plot(steps, values, marker="." if len(steps) < 30 else None)
            axes.set_title(name, fontsize=9)
            axes.set_xlabel("step", fontsize=8)
        figure.tight_layout()
        figure.savefig(folder / "curves.png", dpi=80)
        written.append(folder / "curves.png")
    confusion = tables.get("confusion_matrix") if isinstance(tables, Mapping) else None
    if isinstance(confusion, Mapping) and confusion.get("matrix"):
        labels, matrix = [str(name) for name in confusion.get("labels") or []], confusion["matrix"]
        size = max(3.0, 0.5 * len(matrix) + 2)
        figure = Figure(figsize=(size, size))
        FigureCanvasAgg(figure)
        axes = figure.add_subplot(1, 1, 1)
        axes.imshow(matrix, cmap="Blues")
        for row, values in enumerate(matrix):
            for column, count in enumerate(values):
                axes.text(column, row, str(count), ha="center", va="center", fontsize=8)
        if len(labels) == len(matrix):
            axes.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
            axes.set_yticks(range(len(labels)), labels, fontsize=8)
        axes.set_xlabel("predicted")
        axes.set_ylabel("true")
        figure.tight_layout()
        figure.savefig(folder / "confusion_matrix.png", dpi=80)
        written.append(folder / "confusion_matrix.png")
    return written
