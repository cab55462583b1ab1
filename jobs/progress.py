"""The seam between the training engine and whoever watches it.

The engine (``jobs.training.engine``) calls a ``Reporter``; the worker's subprocess
passes one that writes to the database, tests pass ``RecordingReporter``.
"""
from __future__ import annotations

import glob
import os
import time
from typing import Mapping, Optional, Protocol


class Reporter(Protocol):
    def progress(self, step: int, total_steps: int, epoch: float) -> None:
        """Called after every optimizer step (implementations throttle their own writes)."""

    def metrics(self, step: int, epoch: Optional[float], values: Mapping[str, float]) -> None:
        """One point per curve: ``{"train/loss": 0.41}`` or ``{"eval/accuracy": 0.93, "eval/loss": 0.2}``."""

    def cancel_requested(self) -> bool:
        """True when the user asked to cancel; the engine then saves a checkpoint and stops."""

    def info(self, values: Mapping[str, object]) -> None:
        """Facts about the run known once it starts: device, trainable parameters, total steps..."""

    def phase(self, name: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
        """What the run is doing now (one of ``PHASES``), with ``done`` of ``total`` examples where it counts."""


# What a run is doing, in the order a run goes through them. "evaluating" counts validation examples.
PREPARING, TRAINING, EVALUATING, SAVING_CHECKPOINT, SAVING_MODEL, WRITING_PREDICTIONS = (
    "preparing", "training", "evaluating", "saving checkpoint", "saving model", "writing predictions")
PHASES = (PREPARING, TRAINING, EVALUATING, SAVING_CHECKPOINT, SAVING_MODEL, WRITING_PREDICTIONS)


def report_phase(reporter, name: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
    """Tell ``reporter`` the phase; reporters written before phases existed simply do not hear it."""
    method = getattr(reporter, "phase", None)
    if callable(method):
        method(name, done, total)


def machine_load() -> Optional[float]:
    """The machine's 1-minute load average per CPU, weighted by the priority of what runs (``nice_mix``),
    or None where the system keeps none. A run records it (``metrics["machine"]["load_per_cpu"]``) so
    that a run measured on a busy machine calibrates later estimates fairly."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1) * nice_mix()
    except (AttributeError, OSError):
        return None


def nice_mix(samples: int = 2, proc: str = "/proc") -> float:
    """How much the runnable threads weigh against as many at normal priority: 1.0 when none is niced.

    The load average counts a thread at ``nice 10`` (a test suite run with ``nice``) like one at 0, but
    the scheduler gives it a tenth of the weight (each nice step is a factor 1.25): beside ten niced
    busy processes a normal run keeps most of a CPU. The mean weight of the threads that are runnable
    (state R) in a few quick looks at ``/proc``; 1.0 where there is no ``/proc`` or nothing runs."""
    weights = []
    for look in range(samples):
        if look:
            time.sleep(0.01)
        for stat in glob.glob(f"{proc}/[0-9]*/task/[0-9]*/stat"):
            try:
                with open(stat, encoding="ascii", errors="replace") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # the thread ended while we looked
            if len(fields) > 16 and fields[0] == "R":
                weights.append(1.25 ** -int(fields[16]))
    return sum(weights) / len(weights) if weights else 1.0


def mean_load(*samples: Optional[float]) -> Optional[float]:
    """The mean of the load samples taken (None when none could be)."""
    taken = [s for s in samples if s is not None]
    return round(sum(taken) / len(taken), 2) if taken else None


class Cancelled(Exception):
    """Raised by the engine after it stopped at a step boundary and saved a checkpoint."""


class RecordingReporter:
    """Keeps everything in memory; for tests and in-process runs."""

    def __init__(self, cancel_after_step: Optional[int] = None):
        self.cancel_after_step = cancel_after_step
        self.steps: list[tuple[int, int, float]] = []
        self.points: list[tuple[int, Optional[float], dict]] = []
        self.facts: dict[str, object] = {}
        self.phases: list[tuple[str, Optional[int], Optional[int]]] = []

    def progress(self, step, total_steps, epoch):
        self.steps.append((step, total_steps, epoch))

    def metrics(self, step, epoch, values):
        self.points.append((step, epoch, dict(values)))

    def cancel_requested(self):
        return self.cancel_after_step is not None and bool(self.steps) and self.steps[-1][0] >= self.cancel_after_step

    def info(self, values):
        self.facts.update(values)

    def phase(self, name, done=None, total=None):
        self.phases.append((name, done, total))


# The short-job lane on a CPU (jobs.queue.worker): while a lane job runs, the worker keeps this file, named to
# its training processes in this environment variable, and a training run gives the lane's cores back for
# as long as it is there (``LaneShare``). Two processes each with threads on every core take turns on the
# cores and spin waiting for each other: a prediction beside a training run on 2 cores left the training 13 %
# of its speed (bench/short_lane_share.py).
LANE_MARKER_ENV = "WORKBENCH_LANE_MARKER"


def lane_threads(cores: Optional[int] = None) -> int:
    """CPU threads of a job in the short-job lane: a quarter of the cores, at least one."""
    return max(1, (cores or os.cpu_count() or 1) // 4)


class LaneShare:
    """Called before each training step: sets torch's threads to the cores less the lane's while the lane's
    marker file exists, and back to what they were once it is gone (one ``stat`` a step)."""

    def __init__(self, marker: Optional[str] = None):
        import torch

        self.marker = marker if marker is not None else os.environ.get(LANE_MARKER_ENV)
        self.full = torch.get_num_threads()
        self.shared = max(1, self.full - lane_threads())
        self.current = self.full

    def __call__(self) -> int:
        if not self.marker:
            return self.current
        wanted = self.shared if os.path.exists(self.marker) else self.full
        if wanted != self.current:
            import torch

            torch.set_num_threads(wanted)
            self.current = wanted
        return self.current
