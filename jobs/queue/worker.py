"""The worker: claims runs from the queue and supervises one subprocess per run.

Besides its ``max_jobs`` slots a worker has a short-job lane (``short_jobs`` slots, WORKBENCH_SHORT_JOBS):
prediction, evaluation and export jobs claimed there run beside a training run instead of waiting hours
behind it. A lane job is an ordinary run to everything else here (heartbeat, cancel, lease, resume).

``Worker.loop_once(now)`` is exactly one iteration — reap finished children,
heartbeat, enforce the cancel timeout, take over expired leases, claim up to
the free slots, launch — so tests drive it without sleeping. ``run_forever``
repeats it with a back-off while the queue is empty. Each phase has its own
catch-all: a database hiccup or a crashing child is logged and recorded on the
run, never fatal to the worker.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from sqlalchemy import select

from jobs.progress import LANE_MARKER_ENV, lane_threads
from jobs.queue import table as queue
from jobs.queue.failures import describe_exit, log_tail
from jobs.queue.runner import PROCESS_LOG, Handle, Launch, Runner, SubprocessRunner
from jobs.specs.run import RunSpec
from jobs.sweeps.driver import SweepDriver
from jobs.queue.states import ACTIVE
from storage.context import Workbench
from storage.models import CANCELLED, CANCELLING, FAILED, KIND_TRAIN, QUEUED, SHORT_KINDS, Run, utcnow

log = logging.getLogger(__name__)

BUSY_POLL_S = 0.5
IDLE_BACKOFF_MAX_S = 2.0
MIRROR_RETRY_S = 60.0  # how often a worker tries again the runs whose mirror (MLflow) fell behind


@dataclasses.dataclass
class Slot:
    job: Launch
    handle: Handle
    cancel_seen_at: Optional[dt.datetime] = None
    short: bool = False  # claimed into the short-job lane, not one of the max_jobs slots


def detect_gpus(device: str = "auto") -> list[int]:
    """The GPUs this worker may hand out: from the device setting, CUDA_VISIBLE_DEVICES, or nvidia-smi
    (which is fast and does not load torch into a worker that never trains itself)."""
    if device == "cpu":
        return []
    if device.startswith("cuda:"):
        return [int(device.split(":", 1)[1])]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [int(g) for g in visible.split(",") if g.strip().isdigit()]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [i for i, line in enumerate(line for line in out.splitlines() if line.startswith("GPU "))]


class Worker:
    def __init__(self, wb: Workbench, runner: Optional[Runner] = None, max_jobs: Optional[int] = None,
                 gpus: Optional[Sequence[int]] = None, *, worker_id: Optional[str] = None,
                 max_attempts: Optional[int] = None, only_runs: Optional[Sequence[int]] = None,
                 procs: Optional[int] = None, short_jobs: Optional[int] = None):
        self.wb = wb
        self.runner = runner or SubprocessRunner(preload=wb.settings.preload_jobs,
                                                 log_dir=Path(wb.settings.home) / "workers")
        self.max_jobs = max_jobs or wb.settings.max_jobs
        self.short_jobs = wb.settings.short_jobs if short_jobs is None else short_jobs
        self.gpus = list(detect_gpus(wb.settings.device) if gpus is None else gpus)
        self.worker_id = worker_id or queue.new_worker_id()
        self.max_attempts = max_attempts or wb.settings.max_attempts
        # Data-parallel processes per CPU run when its spec does not say (`workbench worker --procs N`).
        self.procs = procs or wb.settings.cpu_procs
        # `train --wait` without a live worker runs just its own run in-process, not the whole queue.
        self.only_runs = list(only_runs) if only_runs is not None else None
        self.slots: dict[int, Slot] = {}
        self._last_heartbeat: Optional[dt.datetime] = None
        self._registered = False
        # Sweeps are topped up by whichever worker gets to them first; `train --wait`'s worker runs one run only.
        self.sweeps = SweepDriver(wb, self.worker_id) if self.only_runs is None else None
        self._mirror_retry: Optional[threading.Thread] = None
        self._mirror_retried_at: Optional[dt.datetime] = None

    # -- one iteration -------------------------------------------------------------------------
    def loop_once(self, now: Optional[dt.datetime] = None) -> int:
        """One pass over every duty; returns how many runs were launched."""
        now = now or utcnow()
        for phase in (self._reap, self._heartbeat, self._enforce_cancel, self._reclaim, self._advance_sweeps,
                      self._retry_mirrors):
            self._guarded(phase, now)
        launched = self._guarded(self._claim_and_launch, now)
        return launched or 0

    def _guarded(self, phase: Callable[[dt.datetime], Optional[int]], now: dt.datetime) -> Optional[int]:
        try:
            return phase(now)
        except Exception:  # noqa: BLE001 - the worker outlives any one failure
            log.exception("worker %s: %s failed; continuing", self.worker_id, phase.__name__)
            return None

    def _reap(self, now: dt.datetime) -> None:
        for run_id, slot in list(self.slots.items()):
            code = slot.handle.poll()
            if code is None:
                continue
            del self.slots[run_id]
            self._mark_lane()
            self._settle(slot, code, now)

    def _settle(self, slot: Slot, code: int, now: dt.datetime) -> None:
        """The child exited. It normally recorded its own outcome; if it could not (signal, crash
        before reporting) record one from the exit code and the log."""
        job = slot.job
        with self.wb.db.session() as session:
            row = session.execute(select(Run.status, Run.attempts, Run.cancel_requested)
                                  .where(Run.id == job.run_id)).first()
        if row is None or row.attempts != job.attempt or row.status not in ACTIVE:
            log.info("run %s attempt %s: process exited with %s", job.run_id, job.attempt, code)
            return
        tail = log_tail(job.output_dir / PROCESS_LOG)
        if row.status == CANCELLING:
            queue.finish(self.wb.db, job.run_id, job.attempt, CANCELLED, finished_at=now, eta_seconds=None)
            return
        message = describe_exit(code, tail, cancel_requested=row.cancel_requested)
        log.warning("run %s attempt %s: %s", job.run_id, job.attempt, message)
        queue.finish(self.wb.db, job.run_id, job.attempt, FAILED, finished_at=now, error=message,
                     error_detail=tail, eta_seconds=None)

    def _heartbeat(self, now: dt.datetime) -> None:
        interval = dt.timedelta(seconds=self.wb.settings.heartbeat_seconds)
        if self._last_heartbeat is not None and now - self._last_heartbeat < interval:
            return
        if not self._registered:
            queue.register_worker(self.wb.db, self.worker_id, self.max_jobs, ",".join(map(str, self.gpus)), now,
                                  short_jobs=self.short_jobs)
            self._registered = True
        else:
            queue.worker_heartbeat(self.wb.db, self.worker_id, now)
        queue.heartbeat(self.wb.db, self.worker_id, self.slots, now)
        self._last_heartbeat = now

    def _enforce_cancel(self, now: dt.datetime) -> None:
        if not self.slots:
            return
        with self.wb.db.session() as session:
            cancelling = set(session.scalars(select(Run.id).where(Run.id.in_(list(self.slots)),
                                                                  Run.status == CANCELLING)))
        timeout = dt.timedelta(seconds=self.wb.settings.cancel_timeout_seconds)
        for run_id in cancelling:
            slot = self.slots[run_id]
            slot.cancel_seen_at = slot.cancel_seen_at or now
            if now - slot.cancel_seen_at >= timeout:
                log.warning("run %s did not stop within %.0f s of its cancel; killing it", run_id, timeout.seconds)
                slot.handle.kill()

    def _reclaim(self, now: dt.datetime) -> None:
        queue.reclaim_expired(self.wb.db, self.wb.settings.lease_seconds, now, self.max_attempts)

    def _advance_sweeps(self, now: dt.datetime) -> None:
        """Tell Optuna about trials that ended (here or on any worker) and queue the next ones, before claiming."""
        if self.sweeps is not None:
            self.sweeps.advance_all(now)

    def _retry_mirrors(self, now: dt.datetime) -> None:
        """Now and then, catch up the mirrors that fell behind (``jobs.tracking.backfill.retry_pending``), on a
        thread of its own: a tracking server that is down must not hold the queue up."""
        if not self.wb.settings.mlflow_uri or self.only_runs is not None:
            return
        if self._mirror_retry is not None and self._mirror_retry.is_alive():
            return
        if self._mirror_retried_at is not None and (now - self._mirror_retried_at).total_seconds() < MIRROR_RETRY_S:
            return
        self._mirror_retried_at = now
        self._mirror_retry = threading.Thread(target=self._guarded, args=(self._catch_up_mirrors, now),
                                              name="mirror-retry", daemon=True)
        self._mirror_retry.start()

    def _catch_up_mirrors(self, now: dt.datetime) -> None:
        from jobs.tracking.backfill import retry_pending  # MLflow loads only where a mirror is behind

        retry_pending(self.wb)

    def _free_gpus(self) -> list[int]:
        busy = {g for slot in self.slots.values() for g in slot.job.gpus}
        return [g for g in self.gpus if g not in busy]

    def _in_lane(self, short: bool) -> int:
        return sum(1 for slot in self.slots.values() if slot.short == short)

    def _claim_and_launch(self, now: dt.datetime) -> int:
        launched = 0
        # Each claim takes the time it is made at (a launch takes a moment, and a claim's lease starts then):
        # the pass's time plus what has passed since.
        started = time.monotonic()

        def at() -> dt.datetime:
            return now + dt.timedelta(seconds=time.monotonic() - started)

        # The lane first: a short job that finds it free leaves the main slots to training runs. Each claim is
        # queue.claim's one conditional UPDATE; the lane's claim only narrows it to the short kinds.
        while self._in_lane(True) < self.short_jobs:
            claimed = queue.claim(self.wb.db, self.worker_id, at(), self.only_runs, kinds=SHORT_KINDS)
            if claimed is None:
                break
            self._launch(claimed, at(), short=True)
            launched += 1
        while self._in_lane(False) < self.max_jobs and (not self.gpus or self._free_gpus()):
            claimed = queue.claim(self.wb.db, self.worker_id, at(), self.only_runs)
            if claimed is None:
                break
            self._launch(claimed, at())
            launched += 1
        return launched

    def _launch(self, claimed: queue.ClaimedRun, now: dt.datetime, short: bool = False) -> None:
        free = self._free_gpus()
        # A prediction or evaluation job is one process on one device: it has no data-parallel variant.
        wanted = max(1, int(claimed.spec.get("gpus") or 1)) if claimed.kind == KIND_TRAIN else 1
        # A run gets the GPUs it asked for when free; fewer when others are busy (documented in docs/runs-and-queue.md,
        # "GPUs"); a lane job finding none free runs on the CPU.
        try:
            gpus = tuple(free[:wanted])
            job = Launch(claimed.id, claimed.attempt, Path(claimed.output_dir), gpus,
                         procs=1 if gpus else self._cpu_procs(claimed),
                         threads=lane_threads() if short and not gpus and self._on_cpu(short=False) else None)
            env = {**os.environ, **self.wb.settings.as_env(), LANE_MARKER_ENV: str(self.lane_marker)}
            handle = self.runner.launch(job, env)
        except Exception as exc:  # noqa: BLE001 - a run that cannot start fails; the worker goes on
            log.exception("run %s: could not start", claimed.id)
            queue.finish(self.wb.db, claimed.id, claimed.attempt, FAILED, finished_at=now,
                         error=f"the training process could not start: {exc}")
            return
        self.slots[claimed.id] = Slot(job, handle, short=short)
        self._mark_lane()
        queue.set_launched(self.wb.db, claimed.id, claimed.attempt, handle.pid, job.device)

    def _on_cpu(self, short: bool) -> bool:
        """Whether a job runs on the CPU in the lane (``short``) or in a main slot. A lane job started beside a
        CPU training run takes a quarter of the cores (``jobs.progress.lane_threads``) and the training leaves
        them to it; alone it takes them all."""
        return any(slot.short == short and not slot.job.gpus for slot in self.slots.values())

    @property
    def lane_marker(self) -> Path:
        """The file this worker keeps while a lane job runs on the CPU: its CPU training runs then leave the lane
        its threads' cores (``jobs.progress.LaneShare``)."""
        return Path(self.wb.settings.home) / "workers" / f"{self.worker_id}.lane"

    def _mark_lane(self) -> None:
        try:
            if self._on_cpu(short=True):
                self.lane_marker.parent.mkdir(parents=True, exist_ok=True)
                self.lane_marker.touch()
            else:
                self.lane_marker.unlink(missing_ok=True)
        except OSError:  # a read-only home: the runs keep every core, as before the lane shared them
            log.warning("worker %s: cannot keep %s", self.worker_id, self.lane_marker)

    def _cpu_procs(self, claimed: queue.ClaimedRun) -> int:
        """Processes of a CPU run: the spec's ``procs``, else the worker's; one for any other kind of job."""
        if claimed.kind != KIND_TRAIN:
            return 1
        return RunSpec.from_dict(claimed.spec).procs or self.procs

    # -- lifetime ------------------------------------------------------------------------------
    def run_forever(self, stop: Optional[threading.Event] = None) -> None:
        """Loop until ``stop`` is set, sleeping longer while the queue stays empty."""
        stop = stop or threading.Event()
        idle_sleep = BUSY_POLL_S
        log.info("worker %s: up to %d job(s) at once and %d short job(s) beside them, GPUs: %s", self.worker_id,
                 self.max_jobs, self.short_jobs,
                 ",".join(map(str, self.gpus)) or f"none (CPU, {self.procs} process(es) per run)")
        try:
            while not stop.is_set():
                try:
                    launched = self.loop_once()
                except Exception:  # noqa: BLE001
                    log.exception("worker %s: iteration failed", self.worker_id)
                    launched = 0
                idle_sleep = BUSY_POLL_S if (launched or self.slots) else min(IDLE_BACKOFF_MAX_S, idle_sleep * 1.5)
                stop.wait(idle_sleep)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Stop this worker's children and hand their runs back at once, rather than after a lease:
        the next worker resumes them from their last checkpoint."""
        for run_id, slot in list(self.slots.items()):
            slot.handle.kill()
            try:
                with self.wb.db.session() as session:
                    status = session.scalar(select(Run.status).where(Run.id == run_id,
                                                                    Run.attempts == slot.job.attempt))
                if status in ACTIVE:
                    target = CANCELLED if status == CANCELLING else QUEUED
                    queue.release(self.wb.db, run_id, slot.job.attempt, status, target)
            except Exception:  # noqa: BLE001
                log.exception("run %s: could not hand back; its lease will expire instead", run_id)
        self.slots.clear()
        try:
            queue.unregister_worker(self.wb.db, self.worker_id)
        except Exception:  # noqa: BLE001
            log.exception("worker %s: could not unregister", self.worker_id)


class EmbeddedWorker:
    """A worker on a daemon thread of another process (``workbench serve``, ``train --wait``)."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self._stop = threading.Event()
        self.thread = threading.Thread(target=worker.run_forever, args=(self._stop,), name="workbench-worker",
                                       daemon=True)

    def start(self) -> "EmbeddedWorker":
        self.thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self.thread.join(timeout)


def start_embedded_worker(wb: Workbench, runner: Optional[Runner] = None, max_jobs: Optional[int] = None,
                          gpus: Optional[Sequence[int]] = None,
                          only_runs: Optional[Sequence[int]] = None) -> EmbeddedWorker:
    """Start a worker thread; call ``.stop()`` on the handle at shutdown."""
    return EmbeddedWorker(Worker(wb, runner, max_jobs, gpus, only_runs=only_runs)).start()

