"""How long a run will take: training plus every evaluation, calibrated on this machine's past runs.

A finished run's ``metrics`` hold the parts of its time (``jobs.training.engine``): its optimisation steps,
its evaluations, checkpoints, start-up and final evaluation. ``estimate_run`` takes the most recent
succeeded runs of the same model, task and kind of device and fits the time of one optimisation step
as a fixed cost plus a cost per token read (``fit_step_seconds``: least squares over the past runs'
measured step times against their tokens per step). A text costs what training reads of it,
``min(length, max_length)`` (``tokens_per_example``), not its whole length: 560-token e-mails cut at
128 tokens cost 128. On a small model on a CPU the fixed part dominates (3.7 s a step for 30-token
sentences, 3.8 s for 128-token e-mails); with past runs of one text length only, the cost per token
comes from the model's size and the rest of the measured step is the fixed part.

Machine load varies (the machine is shared): each past run's times are brought to an unloaded machine
by the load it ran under (``machine.load_per_cpu``, recorded by the engine) and the new run's to the
load now (``current_load``), both through ``slowdown``: with ``L`` runnable processes per CPU, itself
included, a CPU-bound run gets ``1 / L`` of the time it would get alone (never faster than alone).
Both loads are weighted by the priority of what runs: ten test processes at ``nice 10`` slow a
normal-priority run down about as much as one at normal priority. The
range is honest rather than fixed: the fit's residuals over the past runs (one outlier among five or
more left out) and the load's own variation over the last 15 minutes (the 1-, 5- and 15-minute load
averages) widen it; ``sureness`` says so in words. Without a past run it falls back to the
parameter-count heuristic of ``jobs.training.catalogue`` at the load now, with a range of half to twice that.
``estimate_sweep`` adds up a sweep's trials with the expected effect of pruning; an audit's folds are
estimated in ``workbench.services.audits``.

No gradio here: the Train tab shows the estimate, ``submit_run`` stores it on the run,
and the run page compares it with the time the run really took.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import statistics
from collections.abc import Mapping
from typing import Any, Optional

from sqlalchemy import select

from jobs.progress import nice_mix
from jobs.specs import hyperparameters
from jobs.specs.run import RunSpec
from jobs.training import catalogue
from storage.context import Workbench
from storage.datasets.split import validation_size
from storage.models import KIND_TRAIN, SUCCEEDED, Dataset, Run

log = logging.getLogger(__name__)

HISTORY_RUNS = 10  # the most recent comparable runs taken into account
MIN_SPREAD = 1.1  # the fit of three or more past runs that agree still leaves ±10 % (point / spread … × spread)
# One or two past runs set the point but say nothing of how much runs vary: until a third, the range stays
# the rough guess's half to twice (bench/estimates.py: a run calibrated on two took 0.53x its point).
ONE_RUN_SPREAD = 2.0
# Until this many past runs recorded how far the load moved between submit and run, the range also holds
# the load's slowdown halving or doubling: a shared machine's load can do either within minutes
# (bench/estimates.py: 7.7 per CPU at a submit, 3.4 during the run, where three runs before had moved 0.8-1.2x).
FEW_LOAD_CHANGES = 5
LOAD_CHANGE_PRIOR = (0.5, 2.0)
SPLIT_SPREAD = 1.5  # tokens per step must differ by half between past runs to tell fixed from per-token cost
OWN_LOAD = 1.0  # a training run keeps every CPU busy (torch's threads default to the cores): 1 per CPU
PRUNED_SHARE = 0.5  # a median pruner stops about half the trials: those below the median of the ones before
HEURISTIC_LOW, HEURISTIC_HIGH = 0.5, 2.0  # the uncalibrated heuristic is off by up to 2x either way
HEURISTIC_FIXED_SECONDS = 20.0  # loading the model, the baselines, writing the outputs
# A step costs more than its tokens: the optimiser's update of every weight and the embedding matrix's
# dense gradient. Measured with MiniLM (22.7M parameters) on this 2-CPU machine with nothing else running
# (2026-12-04, 300 SMS messages, batch 8): 406 steps in 126 s of training and 129 s in all, where the
# tokens' cost (parameters x tokens / 1.7e10, jobs.training.catalogue) comes to 103 s: the rest is 0.06 s a
# step. An earlier figure of 1.5e-7 had been fitted on runs of 3-7 steps, whose time was nearly all fixed
# cost, and put a 400-step first run at 23 minutes.
HEURISTIC_STEP_SECONDS_PER_PARAMETER = 2.5e-9
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
    shape: dict[str, Any] = {"train": 0, "validation": 0, "tokens": None, "token_stats": None, "classes": 0,
                             "multi_label": False, "pairs": False}
    if not dataset_id:
        return shape
    with wb.db.session() as session:
        dataset = session.get(Dataset, dataset_id)
        if dataset is None:
            return shape
        stats = dataset.stats or {}
        tokens = (stats.get("token_stats") or {}).get("mean")
        token_stats = stats.get("token_stats") or None
        columns = stats.get("columns") or {}
        options = stats.get("options") or {}
        return {"train": int(dataset.num_train or 0), "validation": int(dataset.num_validation or 0),
                "tokens": float(tokens) if tokens else None, "token_stats": token_stats,
                "classes": len(dataset.labels or {}),
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
    if not n_validation:  # the engine holds out its validation split (jobs.training.data) and trains on the rest
        n_validation = validation_size(n_train, 0.1)
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
    if spec.task == "text-classification":  # long texts read in windows: the form says so where "auto" turns it on
        hp["chunking"], chunk_why = hyperparameters.chunking_choice(
            spec.task, spec.train.chunking, long_share(shape.get("token_stats"), hp["max_length"]), hp["max_length"],
            method)
        if chunk_why:
            hp["why"] += f"; {chunk_why}"
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
    # Checkpoints that only serve a resume are paced (jobs.specs.hyperparameters.CHECKPOINT_PACE): how many are
    # written depends on the training time, known only with the estimate (``_parts``).
    checkpoints = steps // hp["save_steps"] if hp.get("save_steps") else evaluations
    return {"train_examples": used, "examples_seen": int(examples), "steps": steps, "evaluations": evaluations,
            "checkpoints": checkpoints or math.ceil(hp["epochs"]), "validation_examples": n_validation, "hp": hp,
            "method": method, "epochs": steps / per_epoch,
            "paced": not hyperparameters.selects_checkpoint(hp, per_epoch)}


CHUNK_OVERLAP = 4 / 3  # windows sharing a quarter of a window (the default stride) read a long text 4/3 times


def long_share(token_stats: Optional[dict[str, Any]], max_length: int) -> Optional[float]:
    """The share of the dataset's texts longer than ``max_length`` tokens: exact where the import measured it at
    this length, else from the length histogram (each bin spread evenly); None without statistics."""
    stats = token_stats or {}
    if stats.get("truncated_share") is not None and stats.get("max_length") == max_length:
        return float(stats["truncated_share"])
    histogram = stats.get("histogram") or {}
    counts, edges = histogram.get("counts") or [], histogram.get("edges") or []
    if not counts or len(edges) != len(counts) + 1 or not sum(counts):
        return None
    longer = sum(c * min(1.0, max(0.0, (hi - max_length) / max(hi - lo, 1)))
                 for c, lo, hi in zip(counts, edges, edges[1:]))
    return longer / sum(counts)


def tokens_per_example(token_stats: Optional[dict[str, Any]], max_length: int,
                       chunked: bool = False) -> Optional[float]:
    """Mean tokens training reads of a text of the dataset: ``min(length, max_length)`` per text, as the
    tokenizer cuts it (and ``group_by_length`` batches texts of about one length, so little padding is added).

    Exact where the import measured it at this ``max_length`` (``truncated_mean``); otherwise from the
    length histogram, each bin spread evenly and cut at ``max_length``; the mean itself, cut at
    ``max_length``, where there is no histogram. A run that reads long texts in windows (``chunked``) reads
    every token, and the windows' overlap twice: the mean length x 4/3 (exact for long texts, above it for
    texts of one window). None without statistics."""
    stats = token_stats or {}
    if chunked and stats.get("mean"):  # every token read, a quarter of each further window again (the overlap)
        return float(stats["mean"]) * CHUNK_OVERLAP
    if stats.get("truncated_mean") is not None and stats.get("max_length") == max_length:
        return float(stats["truncated_mean"])
    histogram = stats.get("histogram") or {}
    counts, edges = histogram.get("counts") or [], histogram.get("edges") or []
    mean = stats.get("mean")
    if counts and len(edges) == len(counts) + 1 and sum(counts):
        cut = sum(c * _mean_cut(lo, hi, max_length) for c, lo, hi in zip(counts, edges, edges[1:]))
        return cut / sum(counts)
    return min(float(mean), float(max_length)) if mean else None


def _mean_cut(low: float, high: float, cut: float) -> float:
    """The mean of ``min(x, cut)`` for ``x`` spread evenly over ``low`` … ``high``."""
    if high <= cut:
        return (low + high) / 2
    if low >= cut:
        return cut
    below = (cut - low) / (high - low)
    return below * (low + cut) / 2 + (1 - below) * cut


def current_load() -> Optional[dict[str, float]]:
    """The machine's load per CPU now (the 1-minute average) and over the last 15 minutes (the lowest and
    highest of the 1-, 5- and 15-minute averages), each weighted by the priority of what runs now
    (``jobs.progress.nice_mix``: niced work hardly slows a run down): what the next run will most likely
    share the CPUs with, and how much that has varied. None where the system keeps no load average."""
    try:
        averages = os.getloadavg()
    except (AttributeError, OSError):
        return None
    per_cpu = nice_mix() / (os.cpu_count() or 1)
    return {"now": averages[0] * per_cpu, "low": min(averages) * per_cpu, "high": max(averages) * per_cpu}


def slowdown(load_per_cpu: Optional[float]) -> float:
    """How many times slower a CPU-bound run is than on an idle machine with ``load_per_cpu`` runnable
    processes per CPU, itself included: it gets ``1 / load`` of the CPUs, never more than all of them."""
    return max(1.0, float(load_per_cpu)) if load_per_cpu is not None else 1.0


def _history(wb: Workbench, model: str, task: str, kind: str, method: str = "finetune") -> list[dict[str, Any]]:
    """Metrics (with the dataset's tokens per example as training read them) of the latest succeeded runs of
    ``model``/``task`` on ``kind`` trained with ``method`` (a SetFit run's time says nothing about
    fine-tuning's, and a prediction or evaluation job of the same model says nothing about training)."""
    stmt = (select(Run.metrics, Dataset.stats, Run.started_at, Run.finished_at, Run.spec)
            .outerjoin(Dataset, Run.dataset_id == Dataset.id)
            .where(Run.status == SUCCEEDED, Run.kind == KIND_TRAIN, Run.model == model, Run.task == task)
            .order_by(Run.finished_at.desc(), Run.id.desc()).limit(HISTORY_RUNS * 3))
    found = []
    with wb.db.session() as session:
        for metrics, stats, started, finished, spec in session.execute(stmt):
            metrics = metrics or {}
            if device_kind(metrics.get("device")) != kind or not metrics.get("samples_per_second"):
                continue
            if metrics.get("method", "finetune") != method:
                continue
            if metrics.get("final_eval_seconds") is None:
                continue  # trained before runs recorded the parts of their time
            max_length = ((spec or {}).get("train") or {}).get("max_length") or hyperparameters.max_length_for(task)
            tokens = tokens_per_example((stats or {}).get("token_stats"), int(max_length),
                                        chunked=bool(metrics.get("chunking")))
            # the training process's own start (interpreter, torch) happens before the engine's clock starts
            process = actual_seconds({"started_at": started, "finished_at": finished})
            outside = max(0.0, process - metrics["wall_seconds"]) if process and metrics.get("wall_seconds") else 0.0
            found.append({**metrics, "_tokens": tokens, "_outside": outside})
            if len(found) >= HISTORY_RUNS:
                break
    return found


def _load(metrics: dict[str, Any]) -> Optional[float]:
    """The machine's load per CPU while the run ran (``jobs.training.engine``), or None."""
    load = (metrics.get("machine") or {}).get("load_per_cpu")
    return float(load) if isinstance(load, (int, float)) and not isinstance(load, bool) else None


def _run_load(metrics: dict[str, Any]) -> Optional[float]:
    """The load per CPU a past run shared the machine with, itself included. The engine averages a sample
    taken as the run starts (its own work not yet in the 1-minute average) and one as it ends (all of it
    in): half its own load is already counted."""
    load = _load(metrics)
    return load + OWN_LOAD / 2 if load is not None else None


def _step(metrics: dict[str, Any], examples_per_step: float) -> tuple[float, float]:
    """(seconds, examples) of one optimisation step of a past run: measured where it recorded its steps
    and training time, else its throughput over the new run's examples per step."""
    steps = metrics.get("steps")
    pure = (metrics.get("train_seconds") or 0.0) - (metrics.get("eval_and_checkpoint_seconds") or 0.0)
    if steps and pure > 0:
        seconds = pure / steps
        return seconds, seconds * float(metrics["samples_per_second"])
    return examples_per_step / float(metrics["samples_per_second"]), examples_per_step


def fit_step_seconds(points: list[tuple[float, float]], prior_per_token: float = 0.0) -> dict[str, Any]:
    """Seconds of one optimisation step as ``fixed + per_token × tokens``, fitted by least squares to past
    runs' ``(tokens per step, seconds per step)`` at no load.

    Where the past runs' tokens per step differ by less than ``SPLIT_SPREAD`` the split cannot be told
    from them: the cost per token is taken from the model's size (``prior_per_token``, the heuristic of
    ``jobs.training.catalogue``, itself off by up to 2× either way: ``prior`` keeps the range of costs per token
    that ``predict_step`` spans) and the fixed part is what is left of the measured steps. ``spread`` is
    the factor the fit is off by on the past runs (the largest on a log scale; the second largest from
    five runs on, so that one odd run does not widen it), never under ``MIN_SPREAD``, nor under
    ``ONE_RUN_SPREAD`` with fewer than three."""
    points = [(x, y) for x, y in points if x and x > 0 and y > 0]
    if not points:
        return {"fixed": 0.0, "per_token": 0.0, "prior": None, "spread": ONE_RUN_SPREAD, "runs": 0, "points": []}
    xs, ys = [x for x, _ in points], [y for _, y in points]
    fit: dict[str, Any] = {"prior": None, "runs": len(points), "points": points}
    if len(points) >= 2 and max(xs) / min(xs) >= SPLIT_SPREAD:
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        slope = (sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x in xs))
        fixed = mean_y - slope * mean_x
        if slope < 0:  # more tokens cannot cost less: all fixed
            slope, fixed = 0.0, statistics.median(ys)
        elif fixed < 0:  # nor can a step cost less than nothing: all per token, through the origin
            slope, fixed = sum(x * y for x, y in points) / sum(x * x for x in xs), 0.0
        fit.update(fixed=fixed, per_token=slope)
    else:  # a step cannot cost more per token than all of it: the prior stops at "all per token"
        most = statistics.median(y / x for x, y in points)
        per_token = min(prior_per_token, most)
        fit.update(fixed=_fixed_part(points, per_token), per_token=per_token,
                   prior=(min(prior_per_token * HEURISTIC_LOW, most), min(prior_per_token * HEURISTIC_HIGH, most)))
    residuals = sorted(abs(math.log(y / max(fit["fixed"] + fit["per_token"] * x, 1e-9))) for x, y in points)
    largest = residuals[-2] if len(residuals) >= 5 else residuals[-1]
    fit["spread"] = max(MIN_SPREAD if len(points) >= 3 else ONE_RUN_SPREAD, math.exp(largest))
    return fit


def _fixed_part(points: list[tuple[float, float]], per_token: float) -> float:
    """The median of what the measured steps leave once ``per_token`` is paid for their tokens (never < 0)."""
    return max(0.0, statistics.median(y - per_token * x for x, y in points))


def predict_step(fit: dict[str, Any], tokens: float) -> tuple[float, float, float]:
    """(point, low, high) seconds of one step reading ``tokens`` at no load, the fit's spread left out: with
    the cost per token taken from the model's size, at both ends of its range."""
    point = fit["fixed"] + fit["per_token"] * tokens
    if fit.get("prior") is None:
        return point, point, point
    ends = sorted(_fixed_part(fit["points"], b) + b * tokens for b in fit["prior"])
    return point, min(ends[0], point), max(ends[1], point)


def _other_rates(metrics: dict[str, Any], eval_scale: float) -> dict[str, float]:
    """One past run's costs besides its steps at no load: seconds per evaluated example (times
    ``eval_scale``, the new run's cost per token read against its own), per checkpoint, and fixed seconds
    (start-up, saving the model, the process's own start)."""
    evaluated = (metrics.get("validation_records") or metrics.get("validation_examples") or 0) * (
        (metrics.get("evaluations") or 0) + 1)
    eval_seconds = (metrics.get("evaluation_seconds") or 0.0) + (metrics.get("final_eval_seconds") or 0.0)
    checkpoints = metrics.get("checkpoints") or 0
    unloaded = 1.0 / slowdown(_run_load(metrics))
    return {"eval": eval_seconds / evaluated * eval_scale * unloaded if evaluated else 0.0,
            "checkpoint": (metrics.get("checkpoint_seconds") or 0.0) / checkpoints * unloaded if checkpoints else 0.0,
            "fixed": ((metrics.get("setup_seconds") or 0.0) + (metrics.get("finish_seconds") or 0.0)
                      + metrics.get("_outside", 0.0)) * unloaded}


def load_changes(wb: Workbench, kind: str = "cpu") -> list[float]:
    """How much the load moved between a submit and its run, for the latest succeeded runs on ``kind`` that
    recorded both: the run's ``slowdown`` at the load it ran under over the one estimated at its submit. A
    shared machine's load can double within minutes; these bound the range, as the machine has behaved."""
    stmt = (select(Run.metrics, Run.estimate).where(Run.status == SUCCEEDED, Run.kind == KIND_TRAIN)
            .order_by(Run.finished_at.desc(), Run.id.desc()).limit(HISTORY_RUNS * 3))
    changes = []
    with wb.db.session() as session:
        for metrics, estimate in session.execute(stmt):
            change = _load_change(estimate, metrics)
            if change is None or device_kind((metrics or {}).get("device")) != kind:
                continue
            changes.append(change)
            if len(changes) >= HISTORY_RUNS:
                break
    return changes


def _load_change(estimate: Optional[Mapping[str, Any]], metrics: Optional[Mapping[str, Any]]) -> Optional[float]:
    """How many times more the load a run ran under slowed it than the load its estimate was made at (its
    submit's): the run's ``slowdown`` at each. None where either load was not recorded."""
    submitted = ((estimate or {}).get("load") or {}).get("now")
    ran = _run_load(metrics or {})
    if submitted is None or ran is None:
        return None
    return slowdown(ran) / slowdown(float(submitted) + OWN_LOAD)


# A run that took longer than its estimate says why when the load it ran under slowed it at least this many times
# more than the load at its submit (the estimate's): a new user's 300 tweets took 5.8x the estimate when three
# other jobs started a minute after it.
LOAD_RISE = 1.5


def load_rise(run: Mapping[str, Any]) -> Optional[tuple[float, float]]:
    """(load per CPU at the submit, while the run ran) when the second slowed the run ``LOAD_RISE`` times or more
    than the first (``_load_change``, as ``load_changes`` counts it); else None (or where either was not recorded)."""
    estimate, metrics = run.get("estimate") or {}, run.get("metrics") or {}
    change = _load_change(estimate, metrics)
    if change is None or change < LOAD_RISE:
        return None
    return float(estimate["load"]["now"]), float(_load(metrics))


def _checkpoints(plan: dict[str, Any], train_seconds: float, checkpoint_seconds: float) -> int:
    """The checkpoints the run will write: all it plans when one is selected at the end, else as paced."""
    if not plan.get("paced"):
        return plan["checkpoints"]
    return hyperparameters.paced_checkpoints(plan["checkpoints"], train_seconds, checkpoint_seconds)


def _calibrated(plan: dict[str, Any], history: list[dict[str, Any]], tokens: Optional[float],
                prior_per_token: float) -> dict[str, Any]:
    """The run's parts at no load, from the past runs: (point, low, high) of its training, and the
    median of the past runs' other costs."""
    per_step = plan["examples_seen"] / max(plan["steps"], 1)
    points, steps = [], []
    for metrics in history:
        seconds, examples = _step(metrics, per_step)
        past_tokens = metrics.get("_tokens") or tokens or DEFAULT_MEAN_TOKENS
        steps.append((seconds, examples, past_tokens))
        points.append((examples * past_tokens, seconds / slowdown(_run_load(metrics))))
    fit = fit_step_seconds(points, prior_per_token)
    new_tokens = per_step * (tokens or statistics.median(t for _, _, t in steps))
    point, low, high = predict_step(fit, new_tokens)
    rates = []
    for (_, examples, past_tokens), metrics in zip(steps, history):
        # an evaluated example costs what a step's example costs, new length against the past run's
        scale = (point / per_step) / max(predict_step(fit, examples * past_tokens)[0] / examples, 1e-12)
        rates.append(_other_rates(metrics, scale))
    other = {k: statistics.median(r[k] for r in rates) for k in rates[0]}
    return {"train": (plan["steps"] * point, plan["steps"] * low, plan["steps"] * high),
            "evaluation": plan["validation_examples"] * (plan["evaluations"] + 1) * other["eval"],
            "checkpoints": _checkpoints(plan, plan["steps"] * point, other["checkpoint"]) * other["checkpoint"],
            "fixed": other["fixed"], "fit": fit}


def estimate_run(wb: Workbench, spec: RunSpec, *, n_train: Optional[int] = None,
                 n_validation: Optional[int] = None, mean_tokens: Optional[float] = None,
                 load: Optional[dict[str, float]] = None) -> Optional[dict[str, Any]]:
    """Seconds (point, low, high) and their parts for ``spec`` on this machine at its load now (``load``:
    ``current_load``'s figures, read when not given); None when the size of the data or of the model is
    unknown. ``basis`` says whether past runs calibrated it, ``sureness`` how far off it may be and why."""
    shape = _dataset_shape(wb, spec.data.dataset_id)
    n_train, n_validation = n_train or shape["train"], n_validation or shape["validation"]
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
    tokens = mean_tokens or tokens_per_example(shape["token_stats"], int(plan["hp"]["max_length"]),
                                               chunked=plan["hp"].get("chunking", "off") != "off")
    kind = expected_device(spec_device(wb))
    load = load if load is not None else (current_load() or {})
    factor, changes = _load_factors(wb, kind, load)
    history = _history(wb, spec.model, spec.task, kind, plan["method"])
    # A run read in windows is calibrated on past runs read in windows where there are any, and the other way
    # round: its documents' windows are padded to a whole window and a batch to its longest document, so its
    # steps are not priced like short texts' per token. (bench/estimates.py does not show a gain yet: a batch of
    # 16 long reviews calibrated on one batch of 8 still took 2.8x its point, either way.)
    chunked = plan["hp"].get("chunking", "off") != "off"
    history = [h for h in history if bool(h.get("chunking")) == chunked] or history
    if history:
        # the model-size heuristic's cost of one token, for when past runs cannot tell it
        per_token = info.parameters / catalogue.CPU_PARAM_TOKENS_PER_SECOND
        unloaded = _calibrated(plan, history, tokens, per_token)
        fit = unloaded.pop("fit")
        train_point, train_low, train_high = unloaded["train"]
        other = unloaded["evaluation"] + unloaded["checkpoints"] + unloaded["fixed"]
        parts = {**unloaded, "train": train_point}
        low = (train_low + other) / fit["spread"] * factor["low"]
        high = (train_high + other) * fit["spread"] * factor["high"]
        basis = f"{len(history)} past run(s) of this model and task on this {kind.upper()}"
        sureness = f"based on {len(history)} past run{'s' if len(history) != 1 else ''}"
    else:
        train = (catalogue.estimate_training(info.parameters, tokens or DEFAULT_MEAN_TOKENS,
                                             plan["examples_seen"], 1.0)["seconds"]
                 + plan["steps"] * info.parameters * HEURISTIC_STEP_SECONDS_PER_PARAMETER)
        per_example = train / max(plan["examples_seen"], 1)
        parts = {"train": train, "evaluation": plan["validation_examples"] * (plan["evaluations"] + 1)
                 * per_example * EVAL_COST, "checkpoints": 0.0, "fixed": HEURISTIC_FIXED_SECONDS}
        total = sum(parts.values())
        low, high = total * HEURISTIC_LOW * factor["low"], total * HEURISTIC_HIGH * factor["high"]
        basis = "no finished run of this model and task on this machine yet: a rough guess from the model size"
        sureness = "rough guess: no past run; could be half or twice this"
    parts = {k: v * factor["now"] for k, v in parts.items()}
    seconds = sum(parts.values())
    low, high = min(low, seconds), max(high, seconds)
    if history:
        sureness += f"; −{round((1 - low / seconds) * 100)} % / +{round((high / seconds - 1) * 100)} %"
    sureness += _load_words(load, factor, changes)
    return {"seconds": round(seconds, 1), "low": round(low, 1), "high": round(high, 1),
            "parts": {k: round(v, 1) for k, v in parts.items()}, "basis": basis, "sureness": sureness,
            "calibrated": bool(history), "load": {k: round(v, 2) for k, v in load.items()},
            "runs": len(history), "device": kind, "examples_seen": plan["examples_seen"],
            "tokens_per_example": round(tokens, 1) if tokens else None,
            "train_examples": plan["train_examples"], "evaluations": plan["evaluations"] + 1,
            "validation_examples": plan["validation_examples"], "epochs": plan.get("epochs", plan["hp"]["epochs"]),
            "steps": plan["steps"], "method": plan["method"], "why": plan["hp"]["why"], "hp": plan["hp"]}


def _load_factors(wb: Workbench, kind: str, load: dict[str, float]) -> tuple[dict[str, float], list[float]]:
    """The slowdowns (``now``, ``low``, ``high``) a run submitted now can expect on ``kind``, and the past
    runs' load changes that widened them. The run shares the CPUs with what runs now, plus itself; a GPU
    run hardly feels the load."""
    if kind != "cpu" or not load:
        return {"now": 1.0, "low": 1.0, "high": 1.0}, []
    factor = {k: slowdown(load[k] + OWN_LOAD) for k in ("now", "low", "high")}
    changes = load_changes(wb)
    if changes:  # the load moves between submit and run as it did for the runs before: typically by their
        # median (the 1-minute average at a submit still holds the run that just ended), at most by their ends
        now = factor["now"]
        ends = [min(changes), max(changes)]
        if len(changes) < FEW_LOAD_CHANGES:  # too few to bound it: it may also halve or double
            ends = [min(ends[0], LOAD_CHANGE_PRIOR[0]), max(ends[1], LOAD_CHANGE_PRIOR[1])]
        factor["now"] = now * statistics.median(changes)
        factor["low"] = min(factor["low"], now * ends[0])
        factor["high"] = max(factor["high"], now * ends[1])
    return factor, changes


def _load_words(load: dict[str, float], factor: dict[str, float], changes: list[float]) -> str:
    """``; machine load 2.0 per CPU now (…): 3.0× an idle machine's time; the load moved …``, or "" when
    the load changes nothing."""
    if factor["high"] <= 1.0:
        return ""
    words = (f"; machine load {load['now']:.1f} per CPU now ({load['low']:.1f}–{load['high']:.1f} over "
             f"15 min): {factor['now']:.1f}× an idle machine's time")
    if changes:
        words += (f"; the load moved {min(changes):.1f}–{max(changes):.1f}× between submit and run for the "
                  f"last {len(changes)} run{'s' if len(changes) != 1 else ''}")
        if len(changes) < FEW_LOAD_CHANGES:
            words += " (too few to bound it: the range lets it halve or double)"
    return words


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
