"""Baselines, the verdict and the calibration facts of a run's metrics, for the edges to show
(``jobs.evaluation.baselines`` and ``jobs.evaluation.calibration`` compute them inside a run; these read what
it recorded)."""
from __future__ import annotations

from jobs.evaluation.baselines import (BELOW_BASELINE, DID_NOT_LEARN, LEVEL_WITH_BASELINE, NAMES, WARNED, best, status,
                                       summary, verdict_cell, warning)
from jobs.evaluation.calibration import too_few_to_calibrate

__all__ = ["BELOW_BASELINE", "DID_NOT_LEARN", "LEVEL_WITH_BASELINE", "NAMES", "WARNED", "best", "status", "summary",
           "too_few_to_calibrate", "verdict_cell", "warning"]
