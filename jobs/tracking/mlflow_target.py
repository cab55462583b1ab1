"""One workbench run as one MLflow run, written through ``MlflowClient`` with its explicit run id.

``MlflowTarget.sync(snapshot)`` writes what the MLflow run lacks and returns True once the run is complete there:
params (the spec, then the resolved hyper-parameters), tags, every curve point with its step, then the final
metrics with their intervals, the artifacts (``metrics.json``, the pictures, the model folder when asked) and the
end state. Calling it again after a failure, or from another process (a resumed attempt, a backfill), continues
the same MLflow run, whose id is kept on the workbench run: a point is sent only for a step MLflow does not have
for its curve, so no step is written twice, and the run's end fills in any step a killed attempt left unsent. A sweep is a parent run whose trials are its children.
"""
from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import func, select, update

from jobs.tracking import params as P
from jobs.tracking.pictures import warm_up, write_pictures
from jobs.tracking.record import ENDED, Snapshot, read_json
from storage.context import Workbench
from storage.models import CANCELLED, FAILED, PRUNED, SUCCEEDED, Run, Sweep

log = logging.getLogger(__name__)

END_STATES = {SUCCEEDED: "FINISHED", FAILED: "FAILED", CANCELLED: "KILLED", PRUNED: "KILLED"}


def artifact_root(uri: str) -> Optional[str]:
    """Where a ``sqlite:///`` store keeps artifacts: ``mlartifacts/`` beside its file (MLflow's default would be
    ``./mlruns`` in whatever folder the worker started in). None for a server, which decides itself."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri[len("sqlite:///"):]).expanduser().resolve().parent / "mlartifacts").as_uri()


class MlflowTarget:
    label = "MLflow"

    def __init__(self, wb: Workbench, uri: str, experiment: str, log_model: bool = False):
        self.wb, self.uri, self.experiment, self.log_model = wb, uri, experiment, log_model
        self.client: Any = None
        self.run_id: Optional[str] = None
        self.experiment_id: Optional[str] = None
        self._steps: dict[str, set[int]] = {}  # per metric key, the steps the MLflow run has
        self._params: set[str] = set()
        self._sent = 0  # points of the snapshot already handled
        self._ended = False

    def where(self) -> str:
        return self.uri

    def reset(self) -> None:
        """After a failure nothing is assumed: the next sync reads back what MLflow has."""
        self.run_id, self._sent, self._steps, self._params = None, 0, {}, set()

    def sync(self, snap: Snapshot) -> bool:
        if self._ended:
            return True
        if self.run_id is None:
            self._attach(snap)
            warm_up()  # matplotlib loads now, while the run trains, rather than in the wait at its end
        self._log_params(snap)
        # while the run trains, the points that came since the last write; at its end, every point it has (the
        # database's, which also holds what a killed attempt logged and never got to send)
        points = snap.points if snap.final is not None else snap.points[self._sent:]
        self._sent = len(snap.points)
        self._log_points([(P.metric_key(p.name), p.step, p.value) for p in points])
        if snap.final is None:
            return False
        last = max((p.step for p in snap.points), default=0)
        self._log_points([(key, last, value) for key, value in P.final_metrics(snap.final.metrics).items()])
        folder = snap.facts.output_dir
        if folder is not None and (folder / "metrics.json").is_file():
            self.client.log_artifact(self.run_id, str(folder / "metrics.json"))
        self.client.set_terminated(self.run_id, END_STATES.get(snap.final.status, "FINISHED"))
        self._end_sweep(snap)
        self._log_pictures_and_model(snap)  # last: what takes longest comes after the run's numbers and state
        self._ended = True
        return True

    # -- the run -----------------------------------------------------------------------------
    def _connect(self) -> None:
        if self.client is None:
            from mlflow.tracking import MlflowClient

            self.client = MlflowClient(tracking_uri=self.uri)
        if self.experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                try:
                    self.experiment_id = self.client.create_experiment(self.experiment,
                                                                       artifact_location=artifact_root(self.uri))
                except Exception:  # noqa: BLE001 - another run made it meanwhile
                    found = self.client.get_experiment_by_name(self.experiment)
                    if found is None:
                        raise
            if found is not None:
                self.experiment_id = found.experiment_id

    def _existing(self, run_id: Optional[str]) -> Any:
        if not run_id:
            return None
        try:
            run = self.client.get_run(run_id)
        except Exception as exc:  # noqa: BLE001
            if "RESOURCE_DOES_NOT_EXIST" in str(getattr(exc, "error_code", "")) or "not found" in str(exc).lower():
                return None
            raise
        return run if run.info.lifecycle_stage == "active" else None

    def _attach(self, snap: Snapshot) -> None:
        """Reattach to the run's MLflow run (a resume, a retry, a backfill) or make it."""
        self._connect()
        facts = snap.facts
        with self.wb.db.session() as session:
            stored = session.scalar(select(Run.mlflow_run_id).where(Run.id == facts.run_id))
        run = self._existing(stored)
        if run is None:
            tags = self._tags(snap)
            if facts.sweep_id is not None:
                tags["mlflow.parentRunId"] = self._sweep_parent(facts.sweep_id)
            run = self.client.create_run(self.experiment_id, run_name=facts.title, tags=tags)
            with self.wb.db.session() as session:
                session.execute(update(Run).where(Run.id == facts.run_id).values(mlflow_run_id=run.info.run_id)
                                .execution_options(synchronize_session=False))
            log.info("run %s is MLflow run %s (%s)", facts.run_id, run.info.run_id, self.uri)
        elif snap.final is None and run.info.status != "RUNNING":
            self.client.update_run(run.info.run_id, status="RUNNING")  # a resumed attempt
        self.run_id = run.info.run_id
        self._params = set(run.data.params)
        self._steps = {key: {m.step for m in self.client.get_metric_history(self.run_id, key)}
                       for key in run.data.metrics}
        self._sent = 0

    def _tags(self, snap: Snapshot) -> dict[str, str]:
        facts = snap.facts
        tags = {"workbench.run_id": str(facts.run_id), "workbench.url": facts.url, "workbench.task": facts.task,
                "workbench.model": facts.model, "workbench.instance": facts.instance}
        if facts.dataset is not None:  # a stored dataset (a run may name its files instead)
            tags.update({"workbench.dataset": facts.dataset, "workbench.dataset_digest": facts.dataset_digest or ""})
        if facts.seed_group is not None:
            tags["workbench.seed_group"] = str(facts.seed_group)
        if facts.sweep_id is not None:
            tags["workbench.sweep_id"] = str(facts.sweep_id)
            tags["workbench.trial"] = str(facts.trial_number)
        return {key: P.clip(value, P.MAX_TAG_VALUE) for key, value in tags.items()}

    def _log_params(self, snap: Snapshot) -> None:
        from mlflow.entities import Param

        hp = snap.hyperparameters or (snap.final.hyperparameters if snap.final else None) or {}
        wanted = P.run_params(snap.facts.spec, hp)
        fresh = [Param(key, value) for key, value in wanted.items() if key not in self._params]
        for batch in P.chunks(fresh, P.PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=batch, synchronous=True)
            self._params.update(param.key for param in batch)

    def _log_points(self, points: list[tuple[str, int, float]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        fresh = [Metric(key, value, now, step) for key, step, value in points if step not in self._steps.get(key, ())]
        for batch in P.chunks(fresh, P.METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=batch, synchronous=True)
            for metric in batch:
                self._steps.setdefault(metric.key, set()).add(metric.step)

    def _log_pictures_and_model(self, snap: Snapshot) -> None:
        folder = snap.facts.output_dir
        if folder is None:
            return
        with tempfile.TemporaryDirectory(prefix="wb-pictures-") as tmp:
            if write_pictures(Path(tmp), snap.points, read_json(folder / "tables.json")):
                self.client.log_artifacts(self.run_id, tmp, "pictures")
        if self.log_model and (folder / "model").is_dir():
            self.client.log_artifacts(self.run_id, str(folder / "model"), "model")

    # -- sweeps ------------------------------------------------------------------------------
    def _sweep_parent(self, sweep_id: int) -> str:
        """The sweep's parent run: made by whichever trial comes first; a trial that loses the race drops its own."""
        with self.wb.db.session() as session:
            sweep = session.get(Sweep, sweep_id)
            stored, name, spec = sweep.mlflow_run_id, sweep.name, dict(sweep.spec or {})
        if self._existing(stored) is not None:
            return stored
        from mlflow.entities import Param

        run = self.client.create_run(self.experiment_id, run_name=name or f"sweep-{sweep_id}",
                                     tags={"workbench.sweep_id": str(sweep_id), "workbench.kind": "sweep"})
        params = [Param(k, v) for k, v in P.clip_params(P.flatten(spec, "sweep")).items()]
        for batch in P.chunks(params, P.PARAMS_PER_BATCH):
            self.client.log_batch(run.info.run_id, params=batch, synchronous=True)
        with self.wb.db.session() as session:
            won = session.execute(update(Sweep).where(Sweep.id == sweep_id,
                                                      (Sweep.mlflow_run_id.is_(None)) | (Sweep.mlflow_run_id == stored))
                                  .values(mlflow_run_id=run.info.run_id)
                                  .execution_options(synchronize_session=False)).rowcount == 1
            if not won:
                stored = session.scalar(select(Sweep.mlflow_run_id).where(Sweep.id == sweep_id))
        if not won:
            self.client.delete_run(run.info.run_id)
            return stored
        return run.info.run_id

    def _end_sweep(self, snap: Snapshot) -> None:
        """A sweep's parent run ends with the sweep: once the sweep is finished, or each of its trials has ended
        (checked as each trial ends; the trial that ends last finds them all)."""
        if snap.facts.sweep_id is None:
            return
        with self.wb.db.session() as session:
            row = session.execute(select(Sweep.mlflow_run_id, Sweep.finished_at, Sweep.n_trials)
                                  .where(Sweep.id == snap.facts.sweep_id)).first()
            ended = session.scalar(select(func.count(func.distinct(Run.trial_number)))
                                   .where(Run.sweep_id == snap.facts.sweep_id, Run.status.in_(ENDED)))
        if row is not None and row.mlflow_run_id and (row.finished_at is not None or ended >= row.n_trials):
            self.client.set_terminated(row.mlflow_run_id, "FINISHED")
