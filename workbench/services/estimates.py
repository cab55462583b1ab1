"""How long a run will take: training plus every evaluation, calibrated on this machine's past runs.

A finished run's ``metrics`` hold the parts of its time (``jobs.training.engine``): optimisation
throughput (``samples_per_second``), its evaluations, checkpoints, start-up and final
evaluation. ``estimate_run`` takes the most recent succeeded runs of the same model, task
and kind of device, scales their throughput by the tokens per example of each dataset,
and adds up the new run's training, evaluations, checkpoints and fixed costs.

Machine load varies (a shared machine ran one quick run 4× slower than the one before), so
the figures are robust to one odd run: each past run is first scaled from the load it was
measured under (``machine.load_per_cpu``, recorded by the engine) to the usual load of those runs,
the point is the median of their costs and the range is the median spread of their totals
around it (never under ±15 %, nor under ±30 % with one or two past runs), so one slow
outlier does not widen it. ``sureness`` says so in words ("based on 3 past runs; ±15 %").
Without such a run it falls back to the parameter-count heuristic of ``jobs.training.catalogue``
with a wide range. ``estimate_sweep`` adds up a sweep's trials with the expected effect of
pruning; an audit's folds are estimated in ``workbench.services.audits``.

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

from jobs.specs import hyperparameters
from jobs.specs.run import RunSpec
from jobs.training import catalogue
from storage.context import Workbench
from storage.models import KIND_TRAIN, SUCCEEDED, Dataset, Run

log = logging.getLogger(__name__)

HISTORY_RUNS = 10  # the most recent comparable runs taken into account
MIN_SPREAD = 1.15  # even past runs that agree leave ±15 % (the range is point / spread … point × spread)
ONE_RUN_SPREAD = 1.3  # one or two past runs say little about how much runs vary
PRUNED_SHARE = 0.5  # a median pruner stops about half the trials: those below the median of the ones before
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
    from jobs.queue.worker import detect_gpus

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
    if not n_validation:  # the engine holds out a tenth of the training records (at least 1) and trains on the rest
        n_validation = max(1, n_train // 10)
        n_train = max(1, n_train - n_validation)
    method, why = plan_method(spec, n_train, shape)
    hp = hyperparameters.resolve_hyperparameters(spec, info, n_train, method, n_validation=n_validation)
    if why:
        hp["why"] += f" ({why})"
    shape = shape or {}
    if spec.task == "text-classification" and hyperparameters.head_for(
            spec, n_train, shape.get("classes") or 2, method, multi_label=bool(shape.get("multi_label")),
            pairs=bool(shape.get("pairs")),
            sentence_model=bool(shape.get("sentence_head", shape.get("sentence_model", True)))):
        hp["head"] = "sentence"
        hp["why"] += f"; {hyperparameters.SENTENCE_HEAD_WHY}"
    used = hyperparameters.examples_used(n_train, hp["max_train_examples"])
    if method == "setfit":  # pairs of texts, no evaluation or checkpoint before the end
        return {"train_examples": used, "examples_seen": 2 * hp["max_steps"] * hp["batch_size"],
                "steps": hp["max_steps"], "evaluations": 0, "checkpoints": 0, "validation_examples": n_validation,
                "hp": hp, "method": method}
    per_epoch = max(1, math.ceil(math.ceil(used / hp["batch_size"]) / hp["gradient_accumulation_steps"]))
    steps = hp["max_steps"] or math.ceil(per_epoch * hp["epochs"])
    examples = min(used * hp["epochs"], steps * hp["batch_size"] * hp["gradient_accumulation_steps"])
    evaluations = hyperparameters.evaluations_during_training(hp, per_epoch)
    # a checkpoint at each evaluation (a small-data run without selection: every few); a single epoch still
    # saves one at its end. A run that learns its validation split early stops sooner than planned.
    checkpoints = steps // hp["save_steps"] if hp.get("save_steps") else evaluations
    return {"train_examples": used, "examples_seen": int(examples), "steps": steps, "evaluations": evaluations,
            "checkpoints": checkpoints or math.ceil(hp["epochs"]), "validation_examples": n_validation, "hp": hp,
            "method": method, "epochs": steps / per_epoch}


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
    load = metrics.get("_load_factor", 1.0)  # see _at_usual_load
    return {"train": train * load, "eval": per_eval * load, "checkpoint": per_checkpoint * load,
            "fixed": fixed * load}


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
    from jobs.training.sentence_model import pools_as_supported

    shape["sentence_model"] = hyperparameters.is_sentence_model(catalogue.load_path(info))
    shape["sentence_head"] = shape["sentence_model"] and pools_as_supported(catalogue.load_path(info))
    plan = run_plan(spec, info.parameters, n_train, n_validation, shape)
    kind = expected_device(spec_device(wb))
    history = _history(wb, spec.model, spec.task, kind, plan["method"])
    if history:
        rates = [_rates(m, mean_tokens) for m in _at_usual_load(history)]
        parts = _seconds(plan, {k: statistics.median(r[k] for r in rates) for k in rates[0]})
        spread = range_spread([sum(_seconds(plan, r).values()) for r in rates])
        low, high = sum(parts.values()) / spread, sum(parts.values()) * spread
        basis = f"{len(history)} past run(s) of this model and task on this {kind.upper()}"
        sureness = (f"based on {len(history)} past run{'s' if len(history) != 1 else ''}; "
                    f"±{round((spread - 1) * 100)} %")
    else:
        train = catalogue.estimate_training(info.parameters, mean_tokens or DEFAULT_MEAN_TOKENS,
                                            plan["examples_seen"], 1.0)["seconds"]
        per_example = train / max(plan["examples_seen"], 1)
        parts = {"train": train, "evaluation": plan["validation_examples"] * (plan["evaluations"] + 1)
                 * per_example * EVAL_COST, "checkpoints": 0.0, "fixed": HEURISTIC_FIXED_SECONDS}
        total = sum(parts.values())
        low, high = total * HEURISTIC_LOW, total * HEURISTIC_HIGH
        basis = "no finished run of this model and task on this machine yet: a rough guess from the model size"
        sureness = "rough guess: no past run; could be half or twice this"
    seconds = sum(parts.values())
    return {"seconds": round(seconds, 1), "low": round(min(low, seconds), 1), "high": round(max(high, seconds), 1),
            "parts": {k: round(v, 1) for k, v in parts.items()}, "basis": basis, "sureness": sureness,
            "calibrated": bool(history),
            "runs": len(history), "device": kind, "examples_seen": plan["examples_seen"],
            "train_examples": plan["train_examples"], "evaluations": plan["evaluations"] + 1,
            "validation_examples": plan["validation_examples"], "epochs": plan.get("epochs", plan["hp"]["epochs"]),
            "steps": plan["steps"], "method": plan["method"], "why": plan["hp"]["why"], "hp": plan["hp"]}


def _at_usual_load(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Past runs with their costs scaled from the load each was measured under to the median load of
    those that recorded one: a run slowed down by other work on the machine counts as a normal one.
    A load under 1 per CPU counts as 1 (an idle machine is no faster than a fully used one), and runs
    from before loads were recorded stay as they are."""
    loads = [_load(m) for m in history if _load(m) is not None]
    if not loads:
        return history
    usual = max(1.0, statistics.median(loads))
    scaled = []
    for metrics in history:
        load = _load(metrics)
        factor = usual / max(1.0, load) if load is not None else 1.0
        scaled.append({**metrics, "_load_factor": factor})
    return scaled


def _load(metrics: dict[str, Any]) -> Optional[float]:
    """The machine's load per CPU while the run ran (``jobs.training.engine``), or None."""
    load = (metrics.get("machine") or {}).get("load_per_cpu")
    return float(load) if isinstance(load, (int, float)) and not isinstance(load, bool) else None


def range_spread(totals: list[float]) -> float:
    """How far (as a factor) the estimate may be off, from the past runs' totals for the new run: the
    median distance of a total from the median one, on a log scale, so one outlier cannot widen it;
    never under ``MIN_SPREAD``, nor under ``ONE_RUN_SPREAD`` with fewer than three runs."""
    positive = [t for t in totals if t > 0]
    if len(positive) < 2:
        return ONE_RUN_SPREAD
    middle = statistics.median(math.log(t) for t in positive)
    spread = math.exp(statistics.median(abs(math.log(t) - middle) for t in positive))
    return max(MIN_SPREAD if len(positive) >= 3 else ONE_RUN_SPREAD, spread)


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


def estimate_sweep(wb: Workbench, base: RunSpec, n_trials: int, parallelism: int, pruner: str,
                   workers: int = 1) -> Optional[dict[str, Any]]:
    """How long a sweep of ``n_trials`` trials of ``base`` would take; None without a trial's estimate.

    ``trial`` is one trial as estimated for the base spec (a searched epochs or model changes it);
    ``seconds`` all trials run to the end; ``pruned_seconds`` what pruning is expected to leave, assuming
    that after the pruner's start-up trials (``jobs.sweeps.driver.make_pruner``) ``PRUNED_SHARE`` of the trials
    stop at their first evaluation (none can stop early without an evaluation before the end); ``wall_seconds``
    that work spread over ``parallelism`` trials at a time, as far as ``workers`` slots allow.
    """
    trial = estimate_run(wb, base)
    if trial is None:
        return None
    full, parts = trial["seconds"], trial["parts"]
    during = trial["evaluations"] - 1  # evaluations before the final one: where a trial can be pruned
    startup = min(n_trials, max(2, parallelism))
    prunable = pruner != "none" and during >= 1
    stopped = (parts["fixed"] + (parts["train"] + parts["checkpoints"]) / during
               + parts["evaluation"] / trial["evaluations"]) if prunable else full
    pruned = (n_trials - startup) * PRUNED_SHARE if prunable else 0.0
    expected = (n_trials - pruned) * full + pruned * stopped
    at_once = max(1, min(parallelism, workers, n_trials))
    return {"trial": trial, "n_trials": n_trials, "seconds": round(n_trials * full, 1),
            "pruned_seconds": round(expected, 1), "prunable": prunable, "pruned_trials": pruned,
            "stopped_seconds": round(stopped, 1), "startup_trials": startup, "at_once": at_once,
            "wall_seconds": round(expected / at_once, 1)}
