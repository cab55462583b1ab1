"""How long a run will take: training plus every evaluation, calibrated on this machine's past runs.

A finished run's ``metrics`` hold the parts of its time (``jobs.engine``): optimisation
throughput (``samples_per_second``), its evaluations, checkpoints, start-up and final
evaluation. ``estimate_run`` takes the most recent succeeded runs of the same model, task
and kind of device, scales their throughput by the tokens per example of each dataset,
and adds up the new run's training, evaluations, checkpoints and fixed costs. The range
spans the fastest and the slowest of those runs (machine load varies). Without such a run
it falls back to the parameter-count heuristic of ``jobs.catalogue`` with a wide range.

No gradio here: the Train tab shows the estimate, ``submit_run`` stores it on the run,
and the run page compares it with the time the run really took.
"""
from __future__ import annotations

import functools
import logging
import math
import statistics
from typing import Any, Optional

from sqlalchemy import select

from jobs import catalogue, hyperparameters
from jobs.spec import RunSpec
from storage.context import Workbench
from storage.models import KIND_TRAIN, SUCCEEDED, Dataset, Run

log = logging.getLogger(__name__)

HISTORY_RUNS = 10  # the most recent comparable runs taken into account
LOW, HIGH = 0.9, 1.2  # margins around the fastest and the slowest past run
HEURISTIC_LOW, HEURISTIC_HIGH = 0.5, 2.0  # the uncalibrated heuristic is off by up to 2x either way
HEURISTIC_FIXED_SECONDS = 15.0  # loading the model and tokenizing, before any history exists
EVAL_COST = 1 / 3  # a forward pass costs about a third of a training step (forward + backward)
DEFAULT_MEAN_TOKENS = 32.0


def device_kind(device: Optional[str]) -> str:
    """``cuda:0,1`` and ``cuda`` → ``cuda``; anything else → ``cpu``: runs compare within a kind."""
    return "cuda" if str(device or "").startswith("cuda") else "cpu"


@functools.lru_cache(maxsize=8)
def expected_device(setting: str) -> str:
    """The kind of device a run submitted now will train on (looked up once: nvidia-smi is slow)."""
    if setting != "auto":
        return device_kind(setting)
    from jobs.worker import detect_gpus

    return "cuda" if detect_gpus("auto") else "cpu"


def _dataset_shape(wb: Workbench, dataset_id: Optional[str]) -> dict[str, Any]:
    """Training and validation records, mean tokens per example and labels of a stored dataset."""
    shape: dict[str, Any] = {"train": 0, "validation": 0, "tokens": None, "classes": 0, "multi_label": False,
                             "pairs": False}
    if not dataset_id:
        return shape
    with wb.db.session() as session:
        dataset = session.get(Dataset, dataset_id)
        if dataset is None:
            return shape
        stats = dataset.stats or {}
        tokens = (stats.get("token_stats") or {}).get("mean")
        columns = stats.get("columns") or {}
        options = stats.get("options") or {}
        return {"train": int(dataset.num_train or 0), "validation": int(dataset.num_validation or 0),
                "tokens": float(tokens) if tokens else None, "classes": len(dataset.labels or {}),
                "multi_label": bool(columns.get("label_separator")
                                    or (options.get("columns") or {}).get("label_separator")),
                "pairs": bool(columns.get("text_pair"))}


def plan_method(spec: RunSpec, n_train: int, shape: Optional[dict[str, Any]] = None) -> tuple[str, str]:
    """The method the engine will choose for ``spec`` on a dataset of this shape (see ``choose_method``)."""
    shape = shape or {}
    if spec.task != "text-classification":
        return "finetune", ""
    return hyperparameters.method_for(spec, n_train, shape.get("classes") or 2,
                                      multi_label=bool(shape.get("multi_label")), pairs=bool(shape.get("pairs")),
                                      sentence_model=bool(shape.get("sentence_model", True)))


def run_plan(spec: RunSpec, parameters: int, n_train: int, n_validation: int,
             shape: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """What the run will do: examples seen in training, evaluations, checkpoints, validation examples."""
    info = catalogue.ModelInfo("x", "x", "x", 0, 0, 0, parameters)
    method, why = plan_method(spec, n_train, shape)
    hp = hyperparameters.resolve_hyperparameters(spec, info, n_train, method, n_validation=n_validation or None)
    if why:
        hp["why"] += f" ({why})"
    used = hyperparameters.examples_used(n_train, hp["max_train_examples"])
    if not n_validation:  # the engine holds out 10% when the dataset has no validation split
        n_validation = max(1, used // 10)
    if method == "setfit":  # pairs of texts, no evaluation or checkpoint before the end
        return {"train_examples": used, "examples_seen": 2 * hp["max_steps"] * hp["batch_size"],
                "steps": hp["max_steps"], "evaluations": 0, "checkpoints": 0, "validation_examples": n_validation,
                "hp": hp, "method": method}
    per_epoch = max(1, math.ceil(math.ceil(used / hp["batch_size"]) / hp["gradient_accumulation_steps"]))
    steps = hp["max_steps"] or math.ceil(per_epoch * hp["epochs"])
    examples = min(used * hp["epochs"], steps * hp["batch_size"] * hp["gradient_accumulation_steps"])
    evaluations = hyperparameters.evaluations_during_training(hp, per_epoch)
    return {"train_examples": used, "examples_seen": int(examples), "steps": steps, "evaluations": evaluations,
            # a checkpoint at each evaluation; a single epoch still saves one at its end
            "checkpoints": evaluations or math.ceil(hp["epochs"]), "validation_examples": n_validation, "hp": hp,
            "method": method}


def _history(wb: Workbench, model: str, task: str, kind: str, method: str = "finetune") -> list[dict[str, Any]]:
    """Metrics (with the dataset's mean tokens) of the latest succeeded runs of ``model``/``task`` on ``kind``
    trained with ``method`` (a SetFit run's time says nothing about fine-tuning's, and a prediction or
    evaluation job of the same model says nothing about training)."""
    stmt = (select(Run.metrics, Dataset.stats, Run.started_at, Run.finished_at)
            .outerjoin(Dataset, Run.dataset_id == Dataset.id)
            .where(Run.status == SUCCEEDED, Run.kind == KIND_TRAIN, Run.model == model, Run.task == task)
            .order_by(Run.finished_at.desc(), Run.id.desc()).limit(HISTORY_RUNS * 3))
    found = []
    with wb.db.session() as session:
        for metrics, stats, started, finished in session.execute(stmt):
            metrics = metrics or {}
            if device_kind(metrics.get("device")) != kind or not metrics.get("samples_per_second"):
                continue
            if metrics.get("method", "finetune") != method:
                continue
            if metrics.get("final_eval_seconds") is None:
                continue  # trained before runs recorded the parts of their time
            tokens = ((stats or {}).get("token_stats") or {}).get("mean")
            # the training process's own start (interpreter, torch) happens before the engine's clock starts
            process = actual_seconds({"started_at": started, "finished_at": finished})
            outside = max(0.0, process - metrics["wall_seconds"]) if process and metrics.get("wall_seconds") else 0.0
            found.append({**metrics, "_mean_tokens": float(tokens) if tokens else None, "_outside": outside})
            if len(found) >= HISTORY_RUNS:
                break
    return found


def _rates(metrics: dict[str, Any], mean_tokens: Optional[float]) -> dict[str, float]:
    """One past run as costs: seconds per training and per evaluated example (scaled to ``mean_tokens``),
    seconds per checkpoint, and fixed seconds (start-up, saving the model)."""
    scale = 1.0
    if mean_tokens and metrics.get("_mean_tokens"):
        scale = mean_tokens / metrics["_mean_tokens"]  # dynamic padding: cost follows the tokens
    records = metrics.get("train_records") or metrics.get("train_examples") or 1
    windows = metrics.get("train_examples") or records  # QA trains on windows, the plan counts records
    train = windows / records / float(metrics["samples_per_second"]) * scale
    evaluated = (metrics.get("validation_records") or metrics.get("validation_examples") or 0) * (
        (metrics.get("evaluations") or 0) + 1)
    eval_seconds = (metrics.get("evaluation_seconds") or 0.0) + (metrics.get("final_eval_seconds") or 0.0)
    per_eval = eval_seconds / evaluated * scale if evaluated else train * EVAL_COST
    checkpoints = metrics.get("checkpoints") or 0
    per_checkpoint = (metrics.get("checkpoint_seconds") or 0.0) / checkpoints if checkpoints else 0.0
    fixed = ((metrics.get("setup_seconds") or 0.0) + (metrics.get("finish_seconds") or 0.0)
             + metrics.get("_outside", 0.0))
    return {"train": train, "eval": per_eval, "checkpoint": per_checkpoint, "fixed": fixed}


def _seconds(plan: dict[str, Any], rates: dict[str, float]) -> dict[str, float]:
    return {"train": plan["examples_seen"] * rates["train"],
            "evaluation": plan["validation_examples"] * (plan["evaluations"] + 1) * rates["eval"],
            "checkpoints": plan["checkpoints"] * rates["checkpoint"], "fixed": rates["fixed"]}


def estimate_run(wb: Workbench, spec: RunSpec, *, n_train: Optional[int] = None,
                 n_validation: Optional[int] = None, mean_tokens: Optional[float] = None) -> Optional[dict[str, Any]]:
    """Seconds (point, low, high) and their parts for ``spec`` on this machine; None when the size of the
    data or of the model is unknown. ``basis`` says whether past runs calibrated it."""
    shape = _dataset_shape(wb, spec.data.dataset_id)
    n_train, n_validation = n_train or shape["train"], n_validation or shape["validation"]
    mean_tokens = mean_tokens or shape["tokens"]
    if not n_train:
        return None
    try:
        info = catalogue.resolve_model(spec.model)
    except Exception:  # noqa: BLE001 - an unavailable model has no estimate; submitting says why
        return None
    if not info.parameters:
        return None
    shape["sentence_model"] = hyperparameters.is_sentence_model(catalogue.load_path(info))
    plan = run_plan(spec, info.parameters, n_train, n_validation, shape)
    kind = expected_device(spec_device(wb))
    history = _history(wb, spec.model, spec.task, kind, plan["method"])
    if history:
        rates = [_rates(m, mean_tokens) for m in history]
        parts = _seconds(plan, {k: statistics.median(r[k] for r in rates) for k in rates[0]})
        totals = [sum(_seconds(plan, r).values()) for r in rates]
        low, high = min(totals) * LOW, max(totals) * HIGH
        basis = f"{len(history)} past run(s) of this model and task on this {kind.upper()}"
    else:
        train = catalogue.estimate_training(info.parameters, mean_tokens or DEFAULT_MEAN_TOKENS,
                                            plan["examples_seen"], 1.0)["seconds"]
        per_example = train / max(plan["examples_seen"], 1)
        parts = {"train": train, "evaluation": plan["validation_examples"] * (plan["evaluations"] + 1)
                 * per_example * EVAL_COST, "checkpoints": 0.0, "fixed": HEURISTIC_FIXED_SECONDS}
        total = sum(parts.values())
        low, high = total * HEURISTIC_LOW, total * HEURISTIC_HIGH
        basis = "no finished run of this model and task on this machine yet: a rough guess from the model size"
    seconds = sum(parts.values())
    return {"seconds": round(seconds, 1), "low": round(min(low, seconds), 1), "high": round(max(high, seconds), 1),
            "parts": {k: round(v, 1) for k, v in parts.items()}, "basis": basis, "calibrated": bool(history),
            "runs": len(history), "device": kind, "examples_seen": plan["examples_seen"],
            "train_examples": plan["train_examples"], "evaluations": plan["evaluations"] + 1,
            "validation_examples": plan["validation_examples"], "epochs": plan["hp"]["epochs"],
            "steps": plan["steps"], "method": plan["method"], "why": plan["hp"]["why"], "hp": plan["hp"]}


def spec_device(wb: Workbench) -> str:
    return str(getattr(wb.settings, "device", "auto") or "auto")


def actual_seconds(run: dict[str, Any]) -> Optional[float]:
    """How long a finished run took from its start to its end, or None."""
    import datetime as dt

    started, finished = run.get("started_at"), run.get("finished_at")
    if not started or not finished:
        return None
    parse = lambda v: v if isinstance(v, dt.datetime) else dt.datetime.fromisoformat(str(v).rstrip("Z"))  # noqa: E731
    return max(0.0, (parse(finished) - parse(started)).total_seconds())

