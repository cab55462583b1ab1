"""The Hugging Face Trainer as the engine uses it: arguments, the reporter callback, loss checks.

Kept apart from ``jobs.training.engine`` so the orchestration reads top-down and this
module holds everything that knows Trainer internals.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from typing import Callable, Optional

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from jobs.progress import EVALUATING, PREPARING, SAVING_CHECKPOINT, TRAINING, Reporter
from jobs.specs.hyperparameters import CHECKPOINT_PACE, evaluations_during_training, selects_checkpoint
from jobs.training.sampling import BucketedSampler

log = logging.getLogger(__name__)


class NonFiniteLoss(Exception):
    def __init__(self, step: int):
        super().__init__(f"loss became NaN/inf at step {step}")
        self.step = step


class WorkbenchTrainer(Trainer):
    """Trainer with bucketed, class-mixed training batches, unshuffled evaluation and a per-step loss check.

    ``strata`` (the class id of each training example, for single-label
    classification) keeps every class spread over the batches; see ``jobs.training.sampling``.

    transformers 5.x applies length grouping to ``evaluate()``/``predict()`` as well,
    which reorders predictions against the validation records; predictions here
    must line up with records (QA windows, error-analysis rows), so eval is sequential.
    """

    def __init__(self, *args, strata: Optional[list[int]] = None,
                 phase_listener: Optional[Callable[[str, Optional[int], Optional[int]], None]] = None,
                 checkpoint_pace: Optional["CheckpointPace"] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.strata = strata
        self.phase_listener = phase_listener
        self.checkpoint_pace = checkpoint_pace
        self.reset_timings()
        self._in_train = False
        self._eval_done = self._eval_total = 0

    def reset_timings(self) -> None:
        """Evaluations and checkpoints inside train(), timed apart from the optimisation (samples/s, estimates)."""
        self.evaluation_seconds, self.evaluations = 0.0, 0
        self.checkpoint_seconds, self.checkpoints = 0.0, 0

    @property
    def overhead_seconds(self) -> float:
        return self.evaluation_seconds + self.checkpoint_seconds

    def _phase(self, name: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
        if self.phase_listener is not None:
            self.phase_listener(name, done, total)

    def _after_phase(self) -> None:
        self._phase(TRAINING if self._in_train else PREPARING)

    @contextlib.contextmanager
    def _evaluating(self, dataset):
        self._eval_done, self._eval_total = 0, len(dataset) if dataset is not None else 0
        self._phase(EVALUATING, 0, self._eval_total)
        started = time.perf_counter()
        try:
            yield
        finally:
            log.info("evaluated %d examples in %.1f s", self._eval_total, time.perf_counter() - started)
            if self._in_train:
                self.evaluation_seconds += time.perf_counter() - started
                self.evaluations += 1
            self._after_phase()

    @contextlib.contextmanager
    def _padded(self):
        """Evaluation maps logits back to records row by row: a padding-free collator pads meanwhile."""
        padded = getattr(self.data_collator, "padded", None)
        with padded() if padded else contextlib.nullcontext():
            yield

    def train(self, *args, **kwargs):
        self._in_train = True
        self._phase(TRAINING)
        try:
            return super().train(*args, **kwargs)
        finally:
            self._in_train = False

    def evaluate(self, eval_dataset=None, *args, **kwargs):
        with self._evaluating(eval_dataset if eval_dataset is not None else self.eval_dataset), self._padded():
            return super().evaluate(eval_dataset, *args, **kwargs)

    def predict(self, test_dataset, *args, **kwargs):
        with self._evaluating(test_dataset), self._padded():
            return super().predict(test_dataset, *args, **kwargs)

    def prediction_step(self, model, inputs, *args, **kwargs):
        output = super().prediction_step(model, inputs, *args, **kwargs)
        self._eval_done = min(self._eval_total, self._eval_done + _batch_length(inputs))
        self._phase(EVALUATING, self._eval_done, self._eval_total)
        return output

    def _save_checkpoint(self, *args, **kwargs):
        self._phase(SAVING_CHECKPOINT)
        started = time.perf_counter()
        try:
            return super()._save_checkpoint(*args, **kwargs)
        finally:
            took = time.perf_counter() - started
            self.checkpoint_seconds += took
            self.checkpoints += 1
            if self.checkpoint_pace is not None:
                self.checkpoint_pace.saved(took)
            self._after_phase()

    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        name = self.processing_class.model_input_names[0] if self.processing_class is not None else "input_ids"
        columns = getattr(dataset, "column_names", None) or []
        if self.args.train_sampling_strategy != "group_by_length" or name not in columns:
            return super()._get_train_sampler(train_dataset)
        lengths = [len(ids) for ids in dataset[name]]
        seed = (self.args.data_seed if self.args.data_seed is not None else self.args.seed) \
            if self.args.world_size > 1 else None  # one order shared by the ranks; see BucketedSampler
        return BucketedSampler(lengths, self.args.train_batch_size * self.args.gradient_accumulation_steps,
                               self.strata, seed=seed)

    def _get_eval_sampler(self, eval_dataset):
        return torch.utils.data.SequentialSampler(eval_dataset) if eval_dataset is not None else None

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if not torch.isfinite(loss.detach()).all():
            raise NonFiniteLoss(self.state.global_step + 1)
        return loss


def _batch_length(inputs) -> int:
    """Examples in one evaluation batch (the first tensor's first dimension)."""
    for value in (inputs or {}).values():
        shape = getattr(value, "shape", None)
        if shape:
            return int(shape[0])
    return 0


class CheckpointPace:
    """When the last checkpoint was written and how long it took (``WorkbenchTrainer`` tells it); ``due()`` says
    whether the next one is worth its time. The first one always is."""

    def __init__(self, ratio: Optional[float] = None, clock: Callable[[], float] = time.monotonic):
        self.ratio, self.clock = CHECKPOINT_PACE if ratio is None else ratio, clock
        self.last_took: Optional[float] = None
        self.last_end: Optional[float] = None
        self.skipped = 0

    def saved(self, took: float) -> None:
        self.last_took, self.last_end = took, self.clock()

    def due(self) -> bool:
        return self.last_end is None or self.clock() - self.last_end >= self.ratio * (self.last_took or 0.0)


class PaceCheckpoints(TrainerCallback):
    """Skips a checkpoint the schedule asks for when it only serves a resume and is not due (``CheckpointPace``).
    Runs before ``ReporterCallback``: the checkpoint of a cancel is always written. A checkpoint that selection may
    pick (``load_best_model_at_end``) is always written. Every rank follows the same decision."""

    def __init__(self, pace: CheckpointPace):
        self.pace = pace

    def _pace(self, args, state, control):
        if not control.should_save or args.load_best_model_at_end:
            return control
        due = self.pace.due()
        if args.world_size > 1:
            due = any_rank(due, args.device)
        if not due:
            control.should_save = False
            self.pace.skipped += 1
            if self.pace.skipped == 1:
                log.info("checkpoints paced: writing one took %.1f s, so the next comes after %.0f s of training",
                         self.pace.last_took or 0.0, self.pace.ratio * (self.pace.last_took or 0.0))
        return control

    def on_step_end(self, args, state, control, **kwargs):
        return self._pace(args, state, control)

    def on_epoch_end(self, args, state, control, **kwargs):
        return self._pace(args, state, control)


class ReporterCallback(TrainerCallback):
    """Forwards progress, losses and eval metrics to the reporter; turns a cancel request into save + stop."""

    TRAIN_KEYS = {"loss": "train/loss", "learning_rate": "train/learning_rate", "grad_norm": "train/grad_norm"}

    def __init__(self, reporter: Reporter):
        self.reporter = reporter
        self.cancelled = False

    def _stop_requested(self, args) -> bool:
        """Whether to stop here (a cancel, or a sweep's pruner); marks the run cancelled when so.

        Rank 0 reads the flag and every rank follows it at the same point: a rank that stopped
        alone would leave the others waiting in the next gradient all-reduce.
        """
        stop = self.reporter.cancel_requested() if args.process_index == 0 else False
        if args.world_size > 1:
            stop = any_rank(stop, args.device)
        if stop:
            self.cancelled = True
        return stop

    def on_step_end(self, args, state, control, **kwargs):
        self.reporter.progress(state.global_step, state.max_steps, float(state.epoch or 0.0))
        if self._stop_requested(args):
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        log.info("step %d: %s", state.global_step, logs)
        values = {name: float(logs[key]) for key, name in self.TRAIN_KEYS.items()
                  if logs and key in logs and isinstance(logs[key], (int, float))}
        if values:
            self.reporter.metrics(state.global_step, state.epoch, values)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        values = {"eval/" + k[5:]: float(v) for k, v in (metrics or {}).items()
                  if k.startswith("eval_") and isinstance(v, (int, float)) and not k.endswith(("_runtime", "_per_second"))}
        if values:
            self.reporter.metrics(state.global_step, state.epoch, values)
        # A sweep's pruner answers right after an evaluation: stop now rather than after one more step
        # (each rank evaluates, so each gets here and follows rank 0).
        if self._stop_requested(args):
            control.should_training_stop = True
        return control


SELECTION_KEY = "selection"  # the evaluation key checkpoints are ranked by when the task metric ranks them
_TIE_WEIGHT = 1e-6  # far below one example's share of any metric on a split worth ranking by it


class ShareCoresWithLane(TrainerCallback):
    """A CPU run gives the short-job lane its cores while a lane job runs (``jobs.progress.LaneShare``)."""

    def __init__(self, share=None):
        from jobs.progress import LaneShare

        self.share = share or LaneShare()

    def on_step_begin(self, args, state, control, **kwargs):
        self.share()


class MetricThenLater(TrainerCallback):
    """Ranks checkpoints by the task metric, equal scores going to the later checkpoint.

    The Trainer keeps the first of equal scores: on a few hundred validation examples accuracy often
    ties, and the first checkpoint of a tie is the earliest and least trained. This callback adds
    ``eval_selection`` (the metric, nudged by a millionth of the share of the run's steps done) before
    the Trainer and early stopping read it; it must come before ``EarlyStoppingCallback`` in the callback
    list. So a tie keeps the run going and is won by the more trained model. Breaking ties by the lower
    validation loss instead picked early checkpoints: the loss of a small validation split rises (the model
    grows surer) while its accuracy holds, and SMS spam, 1,000 messages, stopped at step 230 of 452 with
    test accuracy 0.978 where three plain epochs reach 0.987.
    """

    def __init__(self, main_metric: str, greater_is_better: bool):
        self.key, self.sign = f"eval_{main_metric}", (1.0 if greater_is_better else -1.0)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics is not None and self.key in metrics:
            done = state.global_step / state.max_steps if state is not None and state.max_steps else 0.0
            metrics[f"eval_{SELECTION_KEY}"] = self.sign * metrics[self.key] + _TIE_WEIGHT * done


class StopWhenLearned(TrainerCallback):
    """Ends a small-data run soon after its validation split is learned, with its rate annealed to 0.

    The step floor (``jobs.specs.hyperparameters.MIN_STEPS``) is for sets that are slow to learn; an easy set
    gets every validation example right in a fraction of it and then only grows surer. At an evaluation
    where the task metric is at its best value (1.0) and the mean validation loss is below ``loss_below``,
    the rate falls linearly from where the schedule is to 0 over ``anneal_steps`` more steps, and the run
    stops there, evaluated and checkpointed when a checkpoint is picked. Stopping at once would keep a model
    caught mid-schedule, which swings: SMS spam, 300 messages, seed 1, test accuracy 0.991, 0.989, 0.975
    at three evaluations 17 steps apart, all with every validation message right.

    The shortened schedule is not part of a checkpoint: a run resumed after a crash follows its first
    schedule until its next evaluation finds the split learned again. Every rank gets the same gathered
    metrics, so every rank stops at the same step.
    """

    def __init__(self, main_metric: str, loss_below: float, anneal_steps: int, best_value: float = 1.0):
        self.key, self.loss_below, self.best_value = f"eval_{main_metric}", loss_below, best_value
        self.anneal_steps = max(1, anneal_steps)
        self.learned_at: Optional[int] = None
        self.stop_at: Optional[int] = None

    def on_evaluate(self, args, state, control, metrics=None, lr_scheduler=None, **kwargs):
        if self.learned_at is not None or not metrics:
            return control
        value, loss = metrics.get(self.key), metrics.get("eval_loss")
        if value is None or loss is None or value < self.best_value - 1e-9 or loss >= self.loss_below:
            return control
        self.learned_at = state.global_step
        self.stop_at = min(state.max_steps, state.global_step + self.anneal_steps)
        annealed = anneal_schedule(lr_scheduler, state.global_step, self.stop_at)
        log.info("validation learned at step %d (%s %.4f, loss %.4f): %s, stopping at step %d",
                 state.global_step, self.key[5:], value, loss,
                 "rate annealed to 0" if annealed else "schedule unchanged", self.stop_at)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop_at is not None and state.global_step >= self.stop_at:
            control.should_training_stop = True
            if args.load_best_model_at_end:  # the annealed model is a candidate like any checkpoint
                control.should_evaluate = control.should_save = True
        return control


def anneal_schedule(scheduler, start: int, stop: int) -> bool:
    """Make ``scheduler`` (a LambdaLR, as every Trainer schedule is) fall linearly from its factor at step
    ``start`` to 0 at ``stop``; False (nothing changed) for any other scheduler."""
    lambdas = getattr(scheduler, "lr_lambdas", None)
    if not lambdas or stop <= start:
        return False

    def shortened(factor: Callable[[int], float]) -> Callable[[int], float]:
        at_start = factor(start)
        return lambda step: factor(step) if step < start else at_start * max(0.0, (stop - step) / (stop - start))

    scheduler.lr_lambdas = [shortened(factor) for factor in lambdas]
    return True


def world_size() -> int:
    """Training processes of this run (torchrun / accelerate launch set WORLD_SIZE in each)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def any_rank(flag: bool, device) -> bool:
    """True on every rank when ``flag`` is true on any of them (one tiny all-reduce)."""
    import torch.distributed as dist

    value = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def distributed_flags(device: str, processes: int) -> dict:
    """The TrainingArguments that make N processes one data-parallel run."""
    return {
        # Several CPU processes: without gloo (and use_cpu) each rank would silently train a copy of its own
        "ddp_backend": "gloo" if device == "cpu" and processes > 1 else None,
        # With it, the Trainer multiplies each rank's loss by the process count, expecting the model to
        # divide a summed loss by the global label count; BERT's classification heads return a mean, so
        # the gradients and the logged losses came out N times too large (measured: 2x with 2 ranks).
        # Without it, DDP averages the ranks' mean losses: the loss of the global batch.
        "average_tokens_across_devices": False,
    }


def pick_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        from storage.errors import TrainingError

        raise TrainingError("a GPU was asked for but none is available", "run on the CPU (device auto)")
    return device


def precision_flags(device: str, precision: str) -> dict:
    """bf16 where the GPU supports it, else fp16 on GPU; always fp32 on CPU."""
    if not device.startswith("cuda") or precision == "fp32":
        return {"bf16": False, "fp16": False}
    if precision == "auto":
        precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return {"bf16": precision == "bf16", "fp16": precision == "fp16"}


def steps_per_epoch(n_examples: int, batch_size: int, accumulation: int, processes: int = 1) -> int:
    """Optimizer steps per epoch: the batches are dealt out to the processes (the last ones padded to a
    full round, as accelerate does), then ``accumulation`` batches make a step."""
    batches = math.ceil(math.ceil(n_examples / batch_size) / processes)
    return max(1, math.ceil(batches / accumulation))


def training_arguments(output_dir: str, hp: dict, device: str, n_train: int, main_metric: str,
                       greater_is_better: bool, label_names: Optional[list[str]]) -> TrainingArguments:
    """Dynamic padding lives in the collators; here: length bucketing, schedule, evaluation and checkpoints."""
    processes = world_size()
    per_epoch = steps_per_epoch(n_train, hp["batch_size"], hp["gradient_accumulation_steps"], processes)
    total = hp["max_steps"] or math.ceil(per_epoch * hp["epochs"])
    by_steps = bool(hp["max_steps"] or hp["eval_steps"])
    eval_steps = hp["eval_steps"] or (min(per_epoch, total) if by_steps else None)
    strategy = "steps" if by_steps else "epoch"
    evaluating = evaluations_during_training(hp, per_epoch) > 0  # see there: a single epoch is evaluated once
    selecting = selects_checkpoint(hp, per_epoch)
    return TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=hp["batch_size"],
        per_device_eval_batch_size=hp["batch_size"] * 2,
        gradient_accumulation_steps=hp["gradient_accumulation_steps"],
        learning_rate=hp["learning_rate"],
        weight_decay=hp["weight_decay"],
        warmup_steps=math.ceil(hp["warmup_ratio"] * total),
        lr_scheduler_type="linear",
        num_train_epochs=hp["epochs"],
        max_steps=hp["max_steps"] or -1,
        # WorkbenchTrainer answers "group_by_length" with jobs.training.sampling's class-mixed, shuffled buckets
        train_sampling_strategy="group_by_length" if hp.get("group_by_length", True) else "random",
        eval_strategy=strategy if evaluating else "no",
        save_strategy=strategy,
        eval_steps=eval_steps,
        # without selection a checkpoint is only for a resume; with it, every evaluated step must be saved
        save_steps=eval_steps if selecting else (hp.get("save_steps") or eval_steps),
        save_total_limit=2,  # with load_best_model_at_end the Trainer keeps the best and the latest
        load_best_model_at_end=selecting,
        # "loss" ranks by itself; any task metric through MetricThenLater's key, where higher is better
        metric_for_best_model=(main_metric if main_metric == "loss" else SELECTION_KEY) if selecting else None,
        greater_is_better=(main_metric != "loss") if selecting else None,
        logging_strategy="steps",
        logging_steps=max(1, min(25, total // 20)),
        seed=hp["seed"],
        data_seed=hp["seed"],
        use_cpu=device == "cpu",
        **distributed_flags(device, processes),
        remove_unused_columns=False,  # the task modules keep exactly the model's inputs
        label_names=label_names,
        report_to=[],
        dataloader_num_workers=0,
        disable_tqdm=True,
        **precision_flags(device, hp["precision"]),
    )
