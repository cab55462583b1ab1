"""Mirroring after the fact, from the database: runs whose mirror fell behind, and runs made before a tracker
was switched on.

    mirror_run(wb, run_id, to={"mlflow"}) -> MirrorOutcome   (``workbench runs mirror``)
    retry_pending(wb)                                         the ended runs whose mirror is behind

A run's MLflow record is continued where it stopped (its MLflow run id is kept on the run; steps MLflow has are
not sent again); its TensorBoard folder is written anew. Each request waits at most
WORKBENCH_TRACKING_TIMEOUT_SECONDS.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from sqlalchemy import select

from jobs.tracking.mirror import describe, set_warning, targets_for
from jobs.tracking.record import ENDED, Snapshot, load_facts, load_final, load_points
from storage.context import Workbench
from storage.errors import NotFound
from storage.models import KIND_TRAIN, Run

log = logging.getLogger(__name__)

TRACKERS = ("mlflow", "tensorboard")


@dataclasses.dataclass(frozen=True)
class MirrorOutcome:
    run_id: int
    written: tuple[str, ...]  # the trackers now complete ("MLflow", "TensorBoard")
    behind: tuple[str, ...]  # why the others are not
    mlflow_run_id: Optional[str] = None

    @property
    def ok(self) -> bool:
        return not self.behind


def mirror_run(wb: Workbench, run_id: int, to: Optional[set[str]] = None) -> MirrorOutcome:
    """Write run ``run_id`` to the trackers ``to`` (default: every one the settings turn on). A run still
    running is written as far as it got; its own process completes it."""
    facts = load_facts(wb, run_id)
    if facts is None:
        raise NotFound(f"run {run_id} does not exist")
    targets = targets_for(wb, facts, to=to, fresh=True)
    final = load_final(wb, run_id)
    snap = Snapshot(facts, load_points(wb, run_id), final, final.hyperparameters if final else None)
    written, behind = [], []
    for target in targets:
        try:
            target.sync(snap)
            written.append(target.label)
        except Exception as exc:  # noqa: BLE001 - reported per run, the next one is tried
            target.reset()
            behind.append(describe(target, exc))
    if final is not None:
        set_warning(wb, run_id, "; ".join(behind) or None)
    mlflow_id = next((t.run_id for t in targets if getattr(t, "run_id", None)), None)
    return MirrorOutcome(run_id, tuple(written), tuple(behind), mlflow_id)


def retry_pending(wb: Workbench, limit: int = 20) -> list[MirrorOutcome]:
    """Try again the ended training runs whose mirror is behind, oldest first."""
    with wb.db.session() as session:
        ids = list(session.scalars(select(Run.id).where(Run.mirror_warning.is_not(None), Run.status.in_(ENDED),
                                                        Run.kind == KIND_TRAIN).order_by(Run.id).limit(limit)))
    outcomes = []
    for run_id in ids:
        outcome = mirror_run(wb, run_id, to={"mlflow"})  # TensorBoard's files are written by the run itself
        log.info("run %s: mirror %s", run_id, "caught up" if outcome.ok else "still behind: " + "; ".join(outcome.behind))
        outcomes.append(outcome)
        if not outcome.ok:
            break  # the tracker is still down: the rest waits for the next try
    return outcomes
