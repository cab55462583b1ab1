"""The model catalogue as the edges see it: the models offered, resolving a name, whether the workbench is
offline, and a model's training-memory estimate (``jobs.training.catalogue`` is the one definition)."""
from __future__ import annotations

from jobs.training.catalogue import estimate_training, list_models, offline, resolve_model

__all__ = ["estimate_training", "list_models", "offline", "resolve_model"]
