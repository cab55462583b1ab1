"""Baselines and the verdict on a run's metrics, for the edges to show (``jobs.evaluation.baselines`` computes
them inside a run; these read what it recorded)."""
from __future__ import annotations

from jobs.evaluation.baselines import BELOW_BASELINE, DID_NOT_LEARN, NAMES, best, status, summary, warning

__all__ = ["BELOW_BASELINE", "DID_NOT_LEARN", "NAMES", "best", "status", "summary", "warning"]
