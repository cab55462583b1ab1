"""A run's settings as MLflow params and tags: flattened, stringified and cut to MLflow's limits.

    flatten(value, prefix)   {"train.learning_rate": "5e-05", ...}, None left out
    clip_params(params)      keys and values within MLflow's lengths
    metric_key(name)         a metric name MLflow accepts
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterator, Mapping

# mlflow.utils.validation: MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH,
# MAX_PARAMS_TAGS_PER_BATCH, MAX_METRICS_PER_BATCH (copied, so that this module needs no mlflow)
MAX_KEY = 250
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
CUT = " …(cut)"

_NOT_IN_KEY = re.compile(r"[^\w./\- ]")


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """Nested mappings as dotted keys; lists and other leaves as their JSON text; None values left out
    (a setting left unset is shown by its resolved default)."""
    return dict(_leaves(value, prefix))


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _leaves(inner, f"{prefix}.{key}" if prefix else str(key))
    elif value is not None and prefix:
        yield prefix, value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying it was cut."""
    return text if len(text) <= limit else text[: limit - len(CUT)] + CUT


def metric_key(name: str) -> str:
    """MLflow accepts letters, digits, ``_ - . / `` and spaces in names; anything else becomes ``_``."""
    return _NOT_IN_KEY.sub("_", name)[:MAX_KEY]


def clip_params(params: Mapping[str, str]) -> dict[str, str]:
    """Keys made valid and at most 250 characters, values at most 6,000 (both MLflow's limits)."""
    return {metric_key(key): clip(value, MAX_PARAM_VALUE) for key, value in params.items()}


def run_params(spec: Mapping[str, Any], hyperparameters: Mapping[str, Any]) -> dict[str, str]:
    """What the user chose (the spec, ``spec.`` keys) and what the run resolved (``hp.``: the defaults chosen)."""
    return clip_params({**flatten(spec, "spec"), **flatten(hyperparameters, "hp")})


def final_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The run's final numbers: each top-level number of its metrics, and each interval as ``<name>_ci_low`` and
    ``<name>_ci_high``; nested records (baselines, verdicts, the machine) stay in ``metrics.json``."""
    found = {metric_key(k): float(v) for k, v in metrics.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for name, interval in (metrics.get("metrics_ci") or {}).items():
        if isinstance(interval, Mapping):
            for side in ("low", "high"):
                if isinstance(interval.get(side), (int, float)):
                    found[metric_key(f"{name}_ci_{side}")] = float(interval[side])
    return found


def chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
