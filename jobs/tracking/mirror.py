"""The live mirror of one training run: a reporter that passes everything on and queues the curves for the
trackers, and one background thread per run that writes them.

    mirror = open_mirror(wb, run_id)            a NullMirror when no tracker is set (or on a rank other than 0)
    reporter = mirror.watch(reporter)          the run's reporter, unchanged, with the points copied
    mirror.close(status)                        waits at most WORKBENCH_TRACKING_TIMEOUT_SECONDS

No training step waits on a tracker: the reporter only appends to a list. The thread writes every second; a
tracker that fails is retried with a growing pause, and the first failure leaves one warning in the run's log and
``runs.mirror_warning`` (a badge on its page). ``close`` gives the thread one last try within the timeout; a
mirror still behind then keeps its warning until ``workbench runs mirror`` (or the worker's retry,
``jobs.tracking.backfill.retry_pending``) completes it. A point is settled, and sent, once a later step of its
curve came or the run ended: the engine logs the final evaluation again at the last step, and the trackers must
get the last value only. At the end the trackers get every point the database has for the run, which fills in
what a killed attempt logged but never sent.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Mapping, Optional

from sqlalchemy import update

from jobs.tracking.record import Final, Point, RunFacts, Snapshot, load_facts, load_final, load_points
from storage.context import Workbench
from storage.models import Run

log = logging.getLogger(__name__)

SYNC_INTERVAL_S = 1.0
RETRY_MAX_S = 30.0


def targets_for(wb: Workbench, facts: RunFacts, *, to: Optional[set[str]] = None, fresh: bool = False) -> list:
    """The trackers the settings turn on (``to`` narrows them: {"mlflow", "tensorboard"})."""
    found: list[Any] = []
    settings = wb.settings
    # TensorBoard first: its files are local and quick, and a slow tracking server must not hold them back
    if settings.tensorboard_dir and (to is None or "tensorboard" in to):
        from jobs.tracking.tensorboard_target import TensorBoardTarget

        found.append(TensorBoardTarget(settings.tensorboard_dir, facts.run_id, facts.title, fresh=fresh))
    if settings.mlflow_uri and (to is None or "mlflow" in to):
        from jobs.tracking.mlflow_target import MlflowTarget

        limit_requests(settings.tracking_timeout_seconds)
        found.append(MlflowTarget(wb, settings.mlflow_uri, settings.mlflow_experiment, settings.mlflow_log_model))
    return found


def limit_requests(timeout: float) -> None:
    """Each request to a tracking server gives up after ``timeout`` seconds and is not retried by MLflow itself
    (its default: 7 retries with back-off, minutes against a server that is down); the mirror retries instead.
    And MLflow prints no "View run at" lines on stdout, where `runs mirror --json` writes its answer."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, round(timeout))))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def set_warning(wb: Workbench, run_id: int, warning: Optional[str]) -> None:
    with wb.db.session() as session:
        session.execute(update(Run).where(Run.id == run_id).values(mirror_warning=warning)
                        .execution_options(synchronize_session=False))


def describe(target, exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{target.label} at {target.where()}: {type(exc).__name__}: {text[:200]}"


class NullMirror:
    """No tracker: the reporter is handed back as it is."""

    def watch(self, reporter):
        return reporter

    def close(self, status: Optional[str] = None) -> bool:
        return True


class MirroredReporter:
    """The run's reporter, passing every call on; curve points and the resolved hyper-parameters are copied."""

    def __init__(self, inner, mirror: "RunMirror"):
        self._inner, self._mirror = inner, mirror

    def metrics(self, step: int, epoch: Optional[float], values: Mapping[str, float]) -> None:
        self._inner.metrics(step, epoch, values)
        self._mirror.add(step, values)

    def info(self, values: Mapping[str, object]) -> None:
        self._inner.info(values)
        hp = values.get("hyperparameters")
        if isinstance(hp, Mapping):
            self._mirror.hyperparameters = dict(hp)

    def __getattr__(self, name: str):  # progress, cancel_requested, phase, flush, orphaned, pruned...
        return getattr(self._inner, name)


class RunMirror:
    def __init__(self, wb: Workbench, facts: RunFacts, targets: list, timeout: float):
        self.wb, self.facts, self.targets, self.timeout = wb, facts, targets, timeout
        self.hyperparameters: Optional[dict[str, Any]] = None
        self._lock = threading.Lock()
        self._settled: list[Point] = []
        self._latest: dict[str, Point] = {}  # per curve, the point that may still be replaced
        self._final: Optional[Final] = None
        self._recorded: list[Point] = []  # at the end: every point of the run, from the database
        self._done = {id(t): False for t in targets}
        self._failed: dict[int, str] = {}
        self._warned = False
        # what the mirror cost: CPU time of its thread, its syncs, the wait at the run's end (bench/tracking_overhead.py)
        self.stats = {"sync_cpu_seconds": 0.0, "syncs": 0, "close_wait_seconds": 0.0}
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"mirror-run-{facts.run_id}", daemon=True)
        self._thread.start()

    def watch(self, reporter):
        return MirroredReporter(reporter, self)

    def add(self, step: int, values: Mapping[str, float]) -> None:
        with self._lock:
            for name, value in values.items():
                held = self._latest.get(name)
                if held is not None and step > held.step:
                    self._settled.append(held)
                self._latest[name] = Point(name, int(step), float(value))

    def _snapshot(self) -> Snapshot:
        with self._lock:
            if self._final is not None:
                return Snapshot(self.facts, list(self._recorded), self._final, self.hyperparameters)
            return Snapshot(self.facts, list(self._settled), None, self.hyperparameters)

    def _sync_all(self) -> None:
        snap = self._snapshot()
        for target in self.targets:
            if self._done[id(target)]:
                continue
            try:
                self._done[id(target)] = target.sync(snap)
                self._failed.pop(id(target), None)
            except Exception as exc:  # noqa: BLE001 - a tracker never fails the run
                target.reset()
                self._failed[id(target)] = describe(target, exc)
                self._warn_once(self._failed[id(target)])

    def _warn_once(self, message: str) -> None:
        """The run's one warning line, and its badge (``runs.mirror_warning``)."""
        with self._lock:
            warned, self._warned = self._warned, True
        if not warned:
            log.warning("run %s: the mirror is behind (%s); the run goes on, and `workbench runs mirror %s` "
                        "completes it later", self.facts.run_id, message, self.facts.run_id)
        self._record_warning(message)

    def _record_warning(self, message: str) -> None:
        try:
            set_warning(self.wb, self.facts.run_id, message)
        except Exception:  # noqa: BLE001
            log.exception("run %s: could not record the mirror's warning", self.facts.run_id)

    def _loop(self) -> None:
        pause = SYNC_INTERVAL_S
        while True:
            self._wake.wait(pause)
            self._wake.clear()
            closing = self._closing.is_set()
            started = time.thread_time()
            self._sync_all()
            self.stats["sync_cpu_seconds"] += time.thread_time() - started
            self.stats["syncs"] += 1
            if closing or all(self._done.values()):
                return
            pause = min(RETRY_MAX_S, pause * 2) if self._failed else SYNC_INTERVAL_S

    def close(self, status: Optional[str] = None) -> bool:
        """The run ended (``status`` None: it was handed over and goes on elsewhere). Waits at most the timeout
        for the trackers; True when every one is complete. A mirror left behind keeps its warning."""
        try:
            return self._close(status)
        except Exception:  # noqa: BLE001 - the run's outcome is recorded already; its mirror never changes it
            log.exception("run %s: the mirror could not be closed", self.facts.run_id)
            return False

    def _close(self, status: Optional[str]) -> bool:
        if status is not None:
            final = load_final(self.wb, self.facts.run_id)
            recorded = load_points(self.wb, self.facts.run_id)  # this attempt's, and what a killed one logged
            with self._lock:
                self._final = final or Final(status, {}, {})
                self._recorded = recorded
        self._closing.set()
        self._wake.set()
        started = time.perf_counter()
        self._thread.join(self.timeout)
        self.stats["close_wait_seconds"] = time.perf_counter() - started
        log.info("run %s: mirrored in %d writes, %.2f s of CPU, %.2f s waited at the end", self.facts.run_id,
                 self.stats["syncs"], self.stats["sync_cpu_seconds"], self.stats["close_wait_seconds"])
        if status is None:
            return True
        complete = not self._thread.is_alive() and all(self._done.values())
        if complete and self._warned:
            set_warning(self.wb, self.facts.run_id, None)  # caught up before the end
        elif not complete:
            slow = next(t for t in self.targets if not self._done[id(t)])
            self._warn_once(next(iter(self._failed.values()), f"{slow.label} at {slow.where()}: no answer within "
                                                                f"{self.timeout:g} s"))
        return complete


def open_mirror(wb: Workbench, run_id: int, enabled: bool = True):
    """The run's mirror to every tracker the settings turn on; a ``NullMirror`` when none is, or when anything
    goes wrong opening it (the run goes on unmirrored, with a warning)."""
    if not enabled or not (wb.settings.mlflow_uri or wb.settings.tensorboard_dir):
        return NullMirror()
    try:
        facts = load_facts(wb, run_id)
        targets = targets_for(wb, facts) if facts else []
        if not targets:
            return NullMirror()
        return RunMirror(wb, facts, targets, wb.settings.tracking_timeout_seconds)
    except Exception as exc:  # noqa: BLE001 - never fail a run for its mirror
        log.warning("run %s: not mirrored (%s: %s)", run_id, type(exc).__name__, exc)
        return NullMirror()
