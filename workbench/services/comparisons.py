"""Paired comparison of runs evaluated on the same examples, from their saved per-example outcomes.

    compare_runs(wb, a, b, metric=None) -> {"metric", "a", "b", "difference", "ci", "p_value", "verdict", ...}
    rank_runs(wb, run_ids, metric=None) -> one row per run, marked when not distinguishable from the best

Runs are paired by example id (``jobs.evaluation.outcomes``: a digest of each example's input and gold answer),
never by position; the same bootstrap resamples score both runs (``jobs.evaluation.stats.paired_bootstrap``).
Nothing is re-run: ``outcomes.npz`` was written by the run's final evaluation, or by an evaluation job.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from jobs.evaluation import outcomes as outcomes_io
from jobs.evaluation import stats
from jobs.specs.run import HEADLINE_METRICS
from storage.context import Workbench
from storage.models import KIND_PREDICT, KIND_TRAIN, SUCCEEDED
from workbench.errors import ConfigError, InvalidState
from workbench.services import runs as runs_service


def compare_runs(wb: Workbench, a: int, b: int, metric: Optional[str] = None) -> dict[str, Any]:
    """B against A on ``metric`` (the task's headline metric by default): the difference B − A with its
    paired-bootstrap 95 % interval and p-value, McNemar's exact test for an accuracy, and a verdict sentence.

    Raises ``ConfigError`` when ``a`` and ``b`` are the same run or for a metric the runs do not report,
    ``InvalidState`` when a run has no per-example outcomes or the two were not evaluated on the same examples.
    """
    _require_distinct([a, b])
    first, second = _load(wb, a), _load(wb, b)
    order = _pairing(first, second)
    name, statistic, columns_a = _metric(first, metric)
    columns_b = _columns(second, name)[order]
    result = stats.paired_bootstrap(columns_a, columns_b, statistic)
    scale = 1.0 if name in outcomes_io.PERCENT_METRICS or name in stats.LOWER_IS_BETTER else 100.0
    found = {"metric": name, "a": _summary(a, columns_a, statistic), "b": _summary(b, columns_b, statistic),
             "difference": result["difference"], "ci": [result["low"], result["high"]],
             "p_value": result["p_value"], "verdict": stats.verdict(name, f"run {a}", f"run {b}", result, scale),
             "examples": len(order), "resamples": result["resamples"], "level": result["level"]}
    correct_a = outcomes_io.correct_per_unit(first["outcomes"])
    if name == "accuracy" and correct_a is not None:
        only_a, only_b = stats.discordant(correct_a, outcomes_io.correct_per_unit(second["outcomes"])[order])
        found["mcnemar"] = {"only_a": only_a, "only_b": only_b, "p_value": stats.mcnemar_exact(only_a, only_b)}
    return found


def rank_runs(wb: Workbench, run_ids: Sequence[int], metric: Optional[str] = None) -> list[dict[str, Any]]:
    """Each run's score with its interval, best first; ``with_best`` is True for the best run and for every
    run whose paired difference from it has an interval that holds 0 (not distinguishable from the best);
    ``p_value`` is that difference's (None for the best run)."""
    if len(run_ids) < 2:
        raise ConfigError("ranking needs at least two runs; name two or more run ids")
    _require_distinct(run_ids)
    loaded = [_load(wb, run_id) for run_id in run_ids]
    orders = [_pairing(loaded[0], other) for other in loaded]
    name, statistic, _ = _metric(loaded[0], metric)
    columns = [_columns(item, name)[order] for item, order in zip(loaded, orders)]
    lower = name in stats.LOWER_IS_BETTER
    _, against = stats.against_best(columns, statistic, lower_is_better=lower)
    rows = [{**_summary(run_id, cols, statistic),
             "with_best": paired is None or paired["low"] <= 0 <= paired["high"],
             "p_value": None if paired is None else paired["p_value"]}
            for run_id, cols, paired in zip(run_ids, columns, against)]
    return sorted(rows, key=lambda row: row["value"] if lower else -row["value"])


def _columns(loaded: dict, name: str) -> np.ndarray:
    """The per-unit columns of metric ``name`` of one loaded run; ``ConfigError`` when it has none."""
    available = outcomes_io.metric_columns(loaded["outcomes"])
    if name not in available:
        raise ConfigError(f"run {loaded['run']['id']} has no per-example {name!r}; "
                          f"choose one of {', '.join(available)}")
    return available[name][1]


def _summary(run_id: int, columns: np.ndarray, statistic) -> dict[str, Any]:
    result = stats.bootstrap_ci(columns, statistic)
    return {"run": run_id, "value": result["value"], "ci": [result["low"], result["high"]]}


def _require_distinct(run_ids: Sequence[int]) -> None:
    """``ConfigError`` when a run is named twice: a run against itself is "no detectable difference" by
    construction, which reads like a finding when it is a typo."""
    seen: set[int] = set()
    for run_id in run_ids:
        if run_id in seen:
            raise ConfigError(f"run {run_id} is named twice: a run cannot be compared with itself; "
                              "name different runs")
        seen.add(run_id)


def _load(wb: Workbench, run_id: int) -> dict[str, Any]:
    """The run and its outcomes; ``InvalidState`` when it has none to compare."""
    run = runs_service.get_run(wb, run_id)
    what = "run" if run["kind"] == KIND_TRAIN else f"{run['kind']} job"
    if run["status"] != SUCCEEDED:
        raise InvalidState(f"{what} {run_id} is {run['status']}; only a finished run can be compared")
    path = Path(run["output_dir"] or "") / outcomes_io.OUTCOMES_FILE
    if not run["output_dir"] or not path.is_file():
        if run["kind"] == KIND_PREDICT:
            raise InvalidState(f"{what} {run_id} predicted unlabelled data: it has no scores to compare; "
                               "compare training runs or evaluation jobs")
        if run["task"] == "masked-lm":
            raise InvalidState(f"{what} {run_id} is a masked-LM run: its evaluation keeps no per-example results "
                               "to compare")
        verb = "trained" if run["kind"] == KIND_TRAIN else "run"
        raise InvalidState(f"{what} {run_id} was {verb} before per-example results were saved; retry it")
    return {"run": run, "outcomes": outcomes_io.read_outcomes(path)}


def _pairing(first: dict, second: dict) -> np.ndarray:
    """For each of ``first``'s examples, the row of the same example in ``second``; ``InvalidState`` unless
    both runs were evaluated on exactly the same examples."""
    a, b = first["run"], second["run"]
    if a["task"] != b["task"]:
        raise InvalidState(f"runs {a['id']} and {b['id']} are different tasks ({a['task']}, {b['task']}); "
                           "compare runs of one task")
    ids_a, ids_b = first["outcomes"]["ids"], second["outcomes"]["ids"]
    row_of = {unit: row for row, unit in enumerate(ids_b.tolist())}
    common = sum(unit in row_of for unit in ids_a.tolist())
    if common != len(ids_a) or len(ids_a) != len(ids_b):
        raise InvalidState(
            f"runs {a['id']} and {b['id']} were not evaluated on the same examples ({_evaluated_on(a)}: "
            f"{len(ids_a)} examples; {_evaluated_on(b)}: {len(ids_b)}; {common} in common); compare runs "
            "validated on the same validation file, or evaluate both on one test set")
    return np.asarray([row_of[unit] for unit in ids_a.tolist()], dtype=np.int64)


def _evaluated_on(run: dict) -> str:
    """What a run was scored on, in words: its validation file, or an evaluation job's test set."""
    spec = run.get("spec") or {}
    if run["kind"] != KIND_TRAIN:
        return f"test set {run.get('dataset') or run.get('dataset_id') or spec.get('dataset_id')}"
    data = spec.get("data") or {}
    if data.get("validation_path"):
        return f"validation file {data['validation_path']}"
    return f"a split of {run.get('dataset') or data.get('train_path')}"


def _metric(loaded: dict, metric: Optional[str]):
    """The metric's name, its ``jobs.evaluation.stats`` statistic and the first run's per-unit columns."""
    available = outcomes_io.metric_columns(loaded["outcomes"])
    if not available:
        raise InvalidState(f"run {loaded['run']['id']} saved no per-example scores to compare")
    if metric is None:
        metric = next(m for m in (*HEADLINE_METRICS.get(loaded["run"]["task"], ()), *available) if m in available)
    if metric not in available:
        raise ConfigError(f"run {loaded['run']['id']} has no per-example {metric!r}; "
                          f"choose one of {', '.join(available)}")
    statistic, columns = available[metric]
    return metric, stats.STATISTICS[statistic], columns
