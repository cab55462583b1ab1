"""Run mirrors for the edges: catch up MLflow and TensorBoard with runs (``workbench runs mirror``), and the
address of a run's page in the MLflow UI.

    mirror_runs(wb, ids, to) -> [outcome dict]    every training run when ``ids`` is empty
    mlflow_link(wb, run) -> str | None             when WORKBENCH_MLFLOW_UI_URL is set and the run is mirrored
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from sqlalchemy import select

from jobs.tracking.backfill import TRACKERS, mirror_run
from storage.context import Workbench
from storage.errors import ConfigError
from storage.models import KIND_TRAIN, Run


def enabled_trackers(wb: Workbench) -> list[str]:
    return [name for name, on in (("mlflow", wb.settings.mlflow_uri), ("tensorboard", wb.settings.tensorboard_dir))
            if on]


def mirror_runs(wb: Workbench, ids: Sequence[int] = (), to: Optional[str] = None) -> list[dict[str, Any]]:
    """Write runs ``ids`` (default: every training run) to tracker ``to`` (default: every one that is set)."""
    if to is not None and to not in TRACKERS:
        raise ConfigError(f"unknown tracker {to!r}", f"use one of: {', '.join(TRACKERS)}")
    wanted = [to] if to else enabled_trackers(wb)
    missing = [name for name in wanted if name not in enabled_trackers(wb)]
    if not wanted or missing:
        raise ConfigError(f"no {' or '.join(missing or TRACKERS)} to mirror to",
                          "set WORKBENCH_MLFLOW_URI or WORKBENCH_TENSORBOARD_DIR (docs/tracking.md)")
    if not ids:
        with wb.db.session() as session:
            ids = list(session.scalars(select(Run.id).where(Run.kind == KIND_TRAIN).order_by(Run.id)))
    outcomes = []
    for run_id in ids:
        outcome = mirror_run(wb, int(run_id), set(wanted))
        outcomes.append({"run_id": outcome.run_id, "written": list(outcome.written), "behind": list(outcome.behind),
                         "mlflow_run_id": outcome.mlflow_run_id, "ok": outcome.ok})
    return outcomes


def mlflow_link(wb: Workbench, run: Mapping[str, Any]) -> Optional[str]:
    """The run's page in the MLflow UI (``#/runs/<id>``, which the UI opens in its experiment)."""
    ui, mirrored = wb.settings.mlflow_ui_url.rstrip("/"), run.get("mlflow_run_id")
    if not ui or not mirrored:
        return None
    return f"{ui}/#/runs/{mirrored}"
