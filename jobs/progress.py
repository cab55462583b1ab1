"""The seam between the training engine and whoever watches it.

The engine (``jobs.engine``) calls a ``Reporter``; the worker's subprocess
passes one that writes to the database, tests pass ``RecordingReporter``.
"""
from __future__ import annotations

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


class Cancelled(Exception):
    """Raised by the engine after it stopped at a step boundary and saved a checkpoint."""


class RecordingReporter:
    """Keeps everything in memory; for tests and in-process runs."""

    def __init__(self, cancel_after_step: Optional[int] = None):
        self.cancel_after_step = cancel_after_step
        self.steps: list[tuple[int, int, float]] = []
        self.points: list[tuple[int, Optional[float], dict]] = []
        self.facts: dict[str, object] = {}

    def progress(self, step, total_steps, epoch):
        self.steps.append((step, total_steps, epoch))

    def metrics(self, step, epoch, values):
        self.points.append((step, epoch, dict(values)))

    def cancel_requested(self):
        return self.cancel_after_step is not None and bool(self.steps) and self.steps[-1][0] >= self.cancel_after_step

    def info(self, values):
        self.facts.update(values)
