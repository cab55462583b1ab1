"""What a mirror writes about one run, read from the database: its facts, its curves and how it ended.

    load_facts(wb, run_id) -> RunFacts      name, task, model, dataset, spec, group, sweep, folder
    load_points(wb, run_id) -> [Point]      every curve point, in step order
    load_final(wb, run_id) -> Final | None  the outcome of a run that has ended

The live mirror (``jobs.tracking.mirror``) holds the same points in memory as the run logs them; a backfill
(``jobs.tracking.backfill``) reads them all from here.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import socket
from pathlib import Path
from typing import Any, NamedTuple, Optional

from sqlalchemy import select

from storage.context import Workbench
from storage.models import CANCELLED, FAILED, PRUNED, SUCCEEDED, Dataset, MetricPoint, Run

ENDED = (SUCCEEDED, FAILED, CANCELLED, PRUNED)


class Point(NamedTuple):
    name: str
    step: int
    value: float


@dataclasses.dataclass(frozen=True)
class RunFacts:
    run_id: int
    name: str
    task: str
    model: str
    spec: dict[str, Any]
    dataset: Optional[str]
    dataset_digest: Optional[str]
    seed_group: Optional[int]
    sweep_id: Optional[int]
    trial_number: Optional[int]
    output_dir: Optional[Path]
    url: str  # the run's page in the workbench
    instance: str  # which workbench (a digest of its database URL), so two workbenches never share a run

    @property
    def title(self) -> str:
        return self.name or f"run-{self.run_id}"


@dataclasses.dataclass(frozen=True)
class Final:
    status: str  # the workbench's: succeeded, failed, cancelled, pruned
    metrics: dict[str, Any]
    hyperparameters: dict[str, Any]  # as metrics.json has them; {} for a run without one


def instance_of(wb: Workbench) -> str:
    return hashlib.sha256(wb.settings.database_url.encode()).hexdigest()[:12]


def run_url(wb: Workbench, run_id: int) -> str:
    """The run's page (``?run=N``) at the address the workbench serves on."""
    host = wb.settings.host
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"http://{host}:{wb.settings.port}/?run={run_id}"


def load_facts(wb: Workbench, run_id: int) -> Optional[RunFacts]:
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        if run is None:
            return None
        dataset = session.get(Dataset, run.dataset_id) if run.dataset_id else None
        return RunFacts(run_id=run.id, name=run.name or "", task=run.task, model=run.model, spec=dict(run.spec or {}),
                        dataset=dataset.name if dataset else None,
                        dataset_digest=dataset.content_hash if dataset else None,
                        seed_group=run.seed_group, sweep_id=run.sweep_id, trial_number=run.trial_number,
                        output_dir=Path(run.output_dir) if run.output_dir else None, url=run_url(wb, run.id),
                        instance=instance_of(wb))


def load_points(wb: Workbench, run_id: int) -> list[Point]:
    with wb.db.session() as session:
        rows = session.execute(select(MetricPoint.name, MetricPoint.step, MetricPoint.value)
                               .where(MetricPoint.run_id == run_id)
                               .order_by(MetricPoint.step, MetricPoint.name, MetricPoint.id)).all()
    return [Point(name, int(step), float(value)) for name, step, value in rows]


def read_json(path: Optional[Path]) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def load_final(wb: Workbench, run_id: int) -> Optional[Final]:
    """How the run ended; None while it is queued or running."""
    with wb.db.session() as session:
        row = session.execute(select(Run.status, Run.metrics, Run.output_dir).where(Run.id == run_id)).first()
    if row is None or row.status not in ENDED:
        return None
    saved = read_json(Path(row.output_dir) / "metrics.json" if row.output_dir else None)
    return Final(row.status, dict(row.metrics or {}), dict(saved.get("hyperparameters") or {}))


@dataclasses.dataclass
class Snapshot:
    """What a mirror has to write now: the run's facts, its settled curve points (in the order they came; a point
    is settled once a later step of its curve came, or the run ended), and its outcome once it ended."""
    facts: RunFacts
    points: list[Point]
    final: Optional[Final] = None
    hyperparameters: Optional[dict[str, Any]] = None  # the resolved ones, as soon as the run reports them
