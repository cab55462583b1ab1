"""The training engine: one call trains one run and writes every output into its folder.

    run_training(spec, output_dir, reporter) -> final metrics

``output_dir`` receives ``model/`` (weights in safetensors, tokenizer, label maps;
loadable by ``transformers.pipeline``), ``adapter/`` for LoRA runs,
``checkpoints/`` (resumed from automatically), ``metrics.json``, ``tables.json``,
``predictions.jsonl``, ``outcomes.npz`` (per-example results, ``jobs.evaluation.outcomes``), ``train.log``,
``model/calibration.json`` for text classification (``jobs.tasks.classification.calibrate``),
and ``heldout.npz`` when the spec names records to predict. Importing this module is cheap: torch and
transformers load when a run starts.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from jobs.progress import (EVALUATING, LANE_MARKER_ENV, PREPARING, SAVING_MODEL, WRITING_PREDICTIONS, Cancelled,
                           Reporter, machine_load, mean_load, report_phase)
from jobs.specs.run import RunSpec
from jobs.training.attention import attention_path
from jobs.training.chunking import describe as describe_chunking
from jobs.training.data import split_validation, subsample
from jobs.training.outputs import HELDOUT_FILE, assess_run, peak_rss_mb, write_heldout, write_outputs
from jobs.training.tokenizers import load_tokenizer
from storage.errors import TrainingError

log = logging.getLogger(__name__)


def run_training(spec: RunSpec, output_dir: Path, reporter: Reporter, *, device: str = "auto",
                 init_model_path: Optional[str] = None) -> dict:
    """Train ``spec`` into ``output_dir``; resumes from its latest checkpoint when one exists.

    Raises ``Cancelled`` after a requested stop (a checkpoint is saved first),
    ``TrainingError`` with a hint when training fails, ``ModelUnavailable`` offline.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    rank = _rank()
    # Under DDP each rank keeps its own log (train.rank1.log ...); train.log is rank 0's
    handler = logging.FileHandler(output_dir / ("train.log" if rank == 0 else f"train.rank{rank}.log"),
                                  encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # jobs.* logs at INFO (the callback logs every Trainer log line); transformers/peft keep their own levels
    handler.setLevel(logging.INFO)
    watched = [logging.getLogger(name) for name in ("jobs", "transformers", "peft")]
    previous_levels = [lg.level for lg in watched]
    for lg in watched:
        lg.addHandler(handler)
    watched[0].setLevel(logging.INFO)
    try:
        return _train(spec, output_dir, reporter, device, init_model_path)
    finally:
        for lg, level in zip(watched, previous_levels):
            lg.removeHandler(handler)
            lg.setLevel(level)
        handler.close()


def _rank() -> int:
    """This process's rank under torchrun / accelerate launch (0 when alone)."""
    import os

    return int(os.environ.get("RANK", "0"))


def last_complete_checkpoint(checkpoints: Path) -> Optional[str]:
    """The newest ``checkpoint-N`` the Trainer finished writing (it writes ``trainer_state.json`` last).

    Every rank of a run decides the same way, whether or not rank 0 has removed an interrupted
    attempt's incomplete folder yet (``jobs.process.run_job.discard_incomplete_checkpoints``)."""
    if not checkpoints.is_dir():
        return None
    done = [(int(folder.name.rsplit("-", 1)[1]), folder) for folder in checkpoints.glob("checkpoint-*")
            if folder.name.rsplit("-", 1)[1].isdigit() and (folder / "trainer_state.json").is_file()]
    return str(max(done)[1]) if done else None


def _choose_method(spec: RunSpec, records: list[dict], model_path: str) -> tuple[str, str, bool]:
    """The training method for ``spec`` on ``records`` (see ``jobs.specs.hyperparameters.choose_method``), its
    reason, and whether fine-tuning trains a sentence head (``jobs.specs.hyperparameters.sentence_head``)."""
    from jobs.specs.hyperparameters import head_for, is_sentence_model, method_for
    from jobs.training.sentence_model import pools_as_supported

    if spec.task != "text-classification":
        return "finetune", "", False
    multi = any(isinstance(r.get("label"), list) for r in records)
    classes = len({str(r.get("label")) for r in records}) if not multi else 2
    pairs, sentence_model = any(r.get("text_pair") for r in records), is_sentence_model(model_path)
    method, why = method_for(spec, len(records), classes, multi_label=multi, pairs=pairs,
                             sentence_model=sentence_model)
    return method, why, head_for(spec, len(records), classes, method, multi_label=multi, pairs=pairs,
                                 sentence_model=sentence_model and pools_as_supported(model_path))


def _count_parameters(model) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


@dataclass
class _Data:
    """What a run trains on: the records, the model it starts from and the resolved hyper-parameters."""
    info: Any  # the catalogue entry of the model to start from
    path: str  # where its weights load from
    module: Any  # the task's module (jobs.tasks)
    train: list[dict]
    validation: list[dict]
    available: int  # training records before the max_train_examples sample
    method: str  # "finetune" or "setfit"
    hp: dict


@dataclass
class _Built:
    """The model ready to train, with its tokenizer and the task's prepared datasets."""
    tokenizer: Any
    prepared: Any
    model: Any
    attention: Any  # jobs.training.attention.AttentionPath
    trainable: int
    total_params: int


@dataclass
class _Fitted:
    """What ``trainer.train()`` returned and how long it took."""
    result: Any  # the Trainer's TrainOutput
    started: float  # perf_counter() when training began: the setup ends there
    train_seconds: float
    samples_per_second: float  # of the optimisation alone


@dataclass
class _Evaluated:
    """The final evaluation on the validation split, and the held-out predictions when the spec asks."""
    evaluation: Any
    heldout: Optional[dict]
    started: float  # perf_counter() when the final evaluation began
    seconds: float  # the evaluation alone, held-out prediction excluded


def _train(spec: RunSpec, output_dir: Path, reporter: Reporter, device: str, init_model_path: Optional[str]) -> dict:
    """One run, step by step: data, model, trainer, training, evaluation, outputs."""
    from jobs.training.trainer import pick_device, world_size

    setup_started = time.perf_counter()
    load_started = machine_load()
    report_phase(reporter, PREPARING)
    data = _load_data(spec, init_model_path)
    if data.method == "setfit":
        return _train_setfit(spec, output_dir, reporter, device, data, setup_started)
    device = pick_device(device)
    built = _build_model(spec, data, device)
    checkpoints = output_dir / "checkpoints"
    trainer, callback = _build_trainer(built, data.hp, device, checkpoints, reporter)
    resume = last_complete_checkpoint(checkpoints)
    processes = world_size()
    facts = _run_facts(data, built, device, processes, resume)
    reporter.info(facts)
    log.info("run starts: %s", json.dumps(facts, default=str))
    fitted = _fit(trainer, callback, built.prepared, data.hp, device, resume, processes, checkpoints)

    # Every rank evaluates (predict() is sharded over the processes and gathered) ...
    evaluated = _evaluate(spec, data.module, trainer, built.prepared, reporter)
    if _rank() != 0:
        # ... but only rank 0 writes the model and the outputs; the others hold the same weights
        log.info("rank %d of %d: done; rank 0 writes the model and the metrics", _rank(), processes)
        return dict(evaluated.evaluation.metrics)
    report_phase(reporter, SAVING_MODEL)
    log.info("saving the model to %s", output_dir / "model")
    _export(trainer.model, built.tokenizer, output_dir, spec.lora.enabled, built.prepared.extra.get("chunking"))
    metrics = _run_metrics(data, built, trainer, fitted, evaluated, device, processes, setup_started)
    # nested: a machine's load is no score to compare runs on (workbench.services.estimates reads it)
    metrics["machine"] = {"load_per_cpu": mean_load(load_started, machine_load())}  # at its start and its end
    return _write_run(spec, output_dir, reporter, data, trainer, evaluated, metrics, setup_started,
                      built.prepared.extra.get("chunking"))


def _load_data(spec: RunSpec, init_model_path: Optional[str]) -> _Data:
    """Read the records, split off validation when none was given, choose the method and the hyper-parameters."""
    from jobs.training import catalogue
    from jobs.specs.hyperparameters import SENTENCE_HEAD_WHY, resolve_hyperparameters
    from jobs.tasks import task_module

    if init_model_path and not Path(init_model_path).is_dir():
        raise TrainingError(f"the model to start from is missing: {init_model_path}",
                            "the earlier run's model folder was deleted; run it again")
    info = catalogue.resolve_model(init_model_path or spec.model)
    path = catalogue.load_path(info)
    module = task_module(spec.task, spec.train.objective)
    train = module.read(spec.data.train_path)
    if spec.data.validation_path:
        validation = module.read(spec.data.validation_path)
    else:
        train, validation = split_validation(train, spec.train.seed)
    method, method_why, head = _choose_method(spec, train, path)
    hp = resolve_hyperparameters(spec, info, len(train), method, n_validation=len(validation))
    if method_why:
        hp["why"] += f" ({method_why})"
    if head:
        hp["head"] = "sentence"
        hp["why"] += f"; {SENTENCE_HEAD_WHY}"
    log.info("defaults: %s", hp["why"])
    available = len(train)
    train = subsample(train, hp["max_train_examples"], hp["seed"])
    if len(train) < available:
        log.info("training on a seeded sample of %d of %d examples (max_train_examples)", len(train), available)
    if spec.task == "question-answering":  # never a SetFit run: only text classification is
        hp["doc_stride"] = min(hp["doc_stride"], hp["max_length"] // 3)  # the overlap must leave room to advance
    return _Data(info, path, module, train, validation, available, method, hp)


def _train_setfit(spec: RunSpec, output_dir: Path, reporter: Reporter, device: str, data: _Data,
                  setup_started: float) -> dict:
    """Hand the run to ``jobs.training.setfit`` with the facts a Trainer run reports."""
    from jobs.training.setfit import train_setfit
    from jobs.training.trainer import pick_device

    facts = {"device": pick_device(device), "processes": 1, "model": data.info.name, "model_path": data.path,
             "train_examples": len(data.train), "train_examples_available": data.available,
             "validation_examples": len(data.validation), "hyperparameters": data.hp, "resumed_from": None}
    return train_setfit(spec, output_dir, reporter, data.hp, data.path, data.train, data.validation, facts,
                        setup_started)


def _build_model(spec: RunSpec, data: _Data, device: str) -> _Built:
    """The tokenizer, the task's prepared datasets and the model, with its attention path and LoRA adapters."""
    from transformers import AutoConfig, set_seed

    from jobs.training import lora

    from jobs.training.chunking import resolve as resolve_chunking

    set_seed(data.hp["seed"])
    config = AutoConfig.from_pretrained(data.path)
    tokenizer = load_tokenizer(data.path, config, spec.task)
    # long texts: read in windows and pooled, or truncated (train.chunking; "auto" measures the texts)
    data.hp["chunking_plan"] = resolve_chunking(data.hp, tokenizer, data.train, spec.task)
    if data.hp["chunking_plan"] is not None and data.hp.get("head") == "sentence":
        data.hp.pop("head")  # the sentence head reads one vector per text: chunked runs train the classifier
        log.info("chunking: the classifier head is trained on documents (the sentence head reads one window)")
    prepared = data.module.prepare(data.train, data.validation, tokenizer, config, data.hp)
    data.hp.pop("chunking_plan")  # the prepared task holds it; hp stays plain JSON
    model = data.module.build_model(data.path, prepared, config)
    attention = attention_path(model, config, spec.task, device, data.hp["precision"], prepared)
    if spec.lora.enabled:
        model = lora.wrap(model, spec.task, config.model_type, spec.lora.r, spec.lora.alpha, spec.lora.dropout,
                          spec.lora.target_modules)
    if hasattr(data.module, "chunked_model"):
        model = data.module.chunked_model(model, prepared)
    trainable, total_params = _count_parameters(model)
    return _Built(tokenizer, prepared, model, attention, trainable, total_params)


def _build_trainer(built: _Built, hp: dict, device: str, checkpoints: Path, reporter: Reporter):
    """The WorkbenchTrainer for ``built``, checkpointing into ``checkpoints``; returns it and its ReporterCallback."""
    from transformers import EarlyStoppingCallback

    from jobs.specs.hyperparameters import LEARNED_LOSS
    from jobs.training.trainer import (CheckpointPace, MetricThenLater, PaceCheckpoints, ReporterCallback,
                                       ShareCoresWithLane, StopWhenLearned, WorkbenchTrainer, training_arguments)

    prepared = built.prepared
    selected_by, greater = ((prepared.main_metric, prepared.greater_is_better) if hp["select_by"] != "loss"
                            else ("loss", False))
    args = training_arguments(str(checkpoints), hp, device, len(prepared.train_dataset), selected_by, greater,
                              prepared.label_names or ["labels"])
    callback = ReporterCallback(reporter)
    pace = CheckpointPace()
    callbacks = [PaceCheckpoints(pace), callback]  # pacing first: a cancel's checkpoint is always written
    if device == "cpu" and os.environ.get(LANE_MARKER_ENV):
        callbacks.append(ShareCoresWithLane())
    if selected_by != "loss":
        callbacks.append(MetricThenLater(selected_by, greater))  # before early stopping, which reads its key
    if hp["early_stopping_patience"]:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=hp["early_stopping_patience"]))
    if hp.get("stop_when_learned") and prepared.main_metric != "loss" and args.eval_strategy == "steps":
        callbacks.append(StopWhenLearned(prepared.main_metric, LEARNED_LOSS, anneal_steps=int(args.eval_steps)))
    loss_func = _class_weighted_loss(prepared)
    trainer = WorkbenchTrainer(model=built.model, args=args, data_collator=prepared.collator,
                               train_dataset=prepared.train_dataset, eval_dataset=prepared.eval_dataset,
                               processing_class=built.tokenizer, compute_metrics=prepared.compute_metrics,
                               compute_loss_func=loss_func, callbacks=callbacks, strata=prepared.strata,
                               checkpoint_pace=pace,
                               phase_listener=lambda name, done, total: report_phase(reporter, name, done, total))
    return trainer, callback


def _class_weighted_loss(prepared):
    """A loss weighted by the task's class weights when it prepared some; None keeps the model's own loss
    (a chunked run's model weighs its document loss itself)."""
    if not prepared.extra.get("class_weights") or prepared.extra.get("chunking") is not None:
        return None
    from jobs.tasks.classification import weighted_loss

    weights = prepared.extra["class_weights"]
    return lambda outputs, labels, num_items_in_batch=None: weighted_loss(outputs.logits, labels, weights)


def _run_facts(data: _Data, built: _Built, device: str, processes: int, resume: Optional[str]) -> dict:
    """What the run starts with, for the reporter and the log."""
    from jobs.training.trainer import steps_per_epoch

    hp = data.hp
    total_steps = hp["max_steps"] or math.ceil(
        steps_per_epoch(len(built.prepared.train_dataset), hp["batch_size"], hp["gradient_accumulation_steps"],
                        processes) * hp["epochs"])
    return {"device": device, "processes": processes, "total_steps": total_steps,
            "trainable_parameters": built.trainable, "total_parameters": built.total_params,
            "model": data.info.name, "model_path": data.path,
            "train_examples": len(data.train), "train_examples_available": data.available,
            "validation_examples": len(data.validation),
            "hyperparameters": hp, "resumed_from": resume, **built.attention.as_metrics()}


def _fit(trainer, callback, prepared, hp: dict, device: str, resume: Optional[str], processes: int,
         checkpoints: Path) -> _Fitted:
    """Train, from ``resume`` when it names a checkpoint; raises ``Cancelled`` after a requested stop."""
    import torch

    if prepared.extra.get("measure_perplexity_before") and resume is None:
        from jobs.tasks.mlm import perplexity

        prepared.extra["perplexity_before"] = perplexity(float(trainer.evaluate()["eval_loss"]))
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    trainer.reset_timings()  # the perplexity measured above is not part of training
    started = time.perf_counter()
    result = _train_or_explain(trainer, resume, hp)
    train_seconds = time.perf_counter() - started
    steps_done = int(trainer.state.global_step) - (int(resume.rsplit("-", 1)[-1]) if resume else 0)
    if resume or hp["max_steps"]:
        samples = steps_done * hp["batch_size"] * hp["gradient_accumulation_steps"] * processes
    else:  # the epochs done: early stopping, or a learned split, ends a run before its planned epochs
        samples = len(prepared.train_dataset) * min(hp["epochs"], float(trainer.state.epoch or hp["epochs"]))
    # throughput of the optimisation itself: evaluation and checkpoint writing inside train() excluded
    pure_seconds = max(train_seconds - trainer.overhead_seconds, 1e-9)
    if callback.cancelled:
        log.info("cancelled at step %d; checkpoint saved in %s", trainer.state.global_step, checkpoints)
        raise Cancelled(f"cancelled at step {trainer.state.global_step}")
    return _Fitted(result, started, train_seconds, samples / pure_seconds)


def _train_or_explain(trainer, resume: Optional[str], hp: dict):
    """``trainer.train()``; a NaN loss or running out of memory becomes a ``TrainingError`` with a hint."""
    import torch

    from jobs.training.trainer import NonFiniteLoss

    try:
        return trainer.train(resume_from_checkpoint=resume)
    except NonFiniteLoss as exc:
        raise TrainingError(f"loss became NaN at step {exc.step} — lower the learning rate",
                            f"try a learning rate below {hp['learning_rate']:g}") from None
    except torch.cuda.OutOfMemoryError:
        bs = hp["batch_size"]
        raise TrainingError(f"CUDA out of memory at batch size {bs} — try {max(1, bs // 2)} or enable LoRA",
                            "lower the batch size or the max length, or enable LoRA") from None
    except (MemoryError, RuntimeError) as exc:
        if not isinstance(exc, MemoryError) and "can't allocate memory" not in str(exc):
            raise
        bs = hp["batch_size"]
        raise TrainingError(f"out of memory at batch size {bs} — try {max(1, bs // 2)} or enable LoRA",
                            "lower the batch size or the max length, or choose a smaller model") from None


def _evaluate(spec: RunSpec, module, trainer, prepared, reporter: Reporter) -> _Evaluated:
    """The best model on the validation split, then on the held-out records when the spec names some."""
    started = time.perf_counter()
    n_eval = len(prepared.eval_dataset)
    log.info("training done at step %d; evaluating the best model on %d validation examples",
             trainer.state.global_step, n_eval)
    if spec.task == "text-classification":  # the final evaluation fits what model/calibration.json holds
        prepared.extra.update(calibrate=spec.train.calibrate, threshold=spec.train.threshold)
    if hasattr(module, "evaluate_model"):
        report_phase(reporter, EVALUATING, 0, n_eval)  # a task's own loop may not go through predict()
        evaluation = module.evaluate_model(trainer, prepared)
    else:
        evaluation = module.evaluate(prepared, trainer.predict(prepared.eval_dataset))
    seconds = time.perf_counter() - started
    heldout = _predict_heldout(module, spec, trainer, prepared) if spec.data.predict_path else None
    return _Evaluated(evaluation, heldout, started, seconds)


def _run_metrics(data: _Data, built: _Built, trainer, fitted: _Fitted, evaluated: _Evaluated, device: str,
                 processes: int, setup_started: float) -> dict:
    """The evaluation's scores, then what the run did and what it cost (measured after the model's export)."""
    import torch

    from jobs.training.trainer import StopWhenLearned

    metrics = dict(evaluated.evaluation.metrics)
    metrics.update({
        "train_loss": float(fitted.result.training_loss),
        "steps": int(trainer.state.global_step),
        "trainable_parameters": built.trainable, "total_parameters": built.total_params,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "peak_gpu_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1) if device.startswith("cuda") else 0.0,
        "train_seconds": round(fitted.train_seconds, 2),
        "samples_per_second": round(fitted.samples_per_second, 3),
        "eval_and_checkpoint_seconds": round(trainer.overhead_seconds, 2),
        # The parts of a run's time, for calibrated estimates of later runs (workbench.services.estimates)
        # examples as the model sees them (QA: windows) and as records of the dataset
        "train_examples": len(built.prepared.train_dataset), "train_records": len(data.train),
        "validation_examples": len(built.prepared.eval_dataset), "validation_records": len(data.validation),
        "setup_seconds": round(fitted.started - setup_started, 2),
        "evaluations": trainer.evaluations, "evaluation_seconds": round(trainer.evaluation_seconds, 2),
        "checkpoints": trainer.checkpoints, "checkpoint_seconds": round(trainer.checkpoint_seconds, 2),
        "final_eval_seconds": round(evaluated.seconds, 2),
        "device": device,
        "processes": processes,
        **built.attention.as_metrics(),
        **describe_chunking(built.prepared.extra.get("chunking")),
    })
    if built.prepared.extra.get("chunking") is not None:
        metrics["windows_dropped"] = int(built.prepared.extra.get("windows_dropped", 0))
    learned = next((c for c in trainer.callback_handler.callbacks if isinstance(c, StopWhenLearned)), None)
    if learned is not None and learned.learned_at is not None:  # the step floor's extra epochs were cut short
        metrics["learned_at_step"] = learned.learned_at
    return metrics


def _write_run(spec: RunSpec, output_dir: Path, reporter: Reporter, data: _Data, trainer, evaluated: _Evaluated,
               metrics: dict, setup_started: float, chunking=None) -> dict:
    """Report the final scores, add the baselines (the frozen embeddings read each text as the run did: cut at
    its ``max_length``, or in its ``chunking`` windows), and write metrics, tables, predictions and held-out
    outputs."""
    from jobs.evaluation.calibration import FITTED_METRICS

    evaluation = evaluated.evaluation
    reporter.metrics(int(trainer.state.global_step), float(trainer.state.epoch or 0.0),
                     {f"eval/{k}": v for k, v in evaluation.metrics.items()
                      if isinstance(v, (int, float)) and k not in FITTED_METRICS})
    report_phase(reporter, WRITING_PREDICTIONS, 0, len(evaluation.predictions))
    log.info("writing %d predictions and the per-class tables", len(evaluation.predictions))
    metrics.update(assess_run(spec, data.train, data.validation, evaluation, model_path=data.path,
                              device=metrics.get("device", "cpu"), max_length=data.hp.get("max_length"),
                              chunking=chunking))
    metrics["finish_seconds"] = round(time.perf_counter() - evaluated.started - evaluated.seconds, 2)
    metrics["wall_seconds"] = round(time.perf_counter() - setup_started, 2)
    write_outputs(output_dir, metrics, data.hp, evaluation)
    if evaluated.heldout is not None:
        write_heldout(output_dir / HELDOUT_FILE, evaluated.heldout)
    log.info("run finished: %s", json.dumps(evaluation.metrics))
    return metrics


def _predict_heldout(module, spec: RunSpec, trainer, prepared) -> dict:
    """Every class probability for the records of ``spec.data.predict_path`` (all ranks take part)."""
    if not hasattr(module, "predict_heldout"):
        raise TrainingError(f"held-out prediction is not available for {spec.task}",
                            "audit a text-classification or token-classification dataset")
    records = module.read(spec.data.predict_path)
    log.info("predicting the %d held-out records of %s", len(records), spec.data.predict_path)
    return module.predict_heldout(trainer, prepared, records)


def _export(model, tokenizer, output_dir: Path, is_lora: bool, chunking=None) -> None:
    """Save the trained (best) model for pipelines; LoRA runs also keep the adapter alone. A chunked run saves
    its windows classifier and ``chunking.json`` (window, stride, pooling and the attention pooling's weights)."""
    from jobs.training.chunking import save_config

    model_dir = output_dir / "model"
    if chunking is not None:
        chunking = model.chunking(chunking.window, chunking.stride, chunking.max_windows)
        model = model.model
    if is_lora:
        model.save_pretrained(output_dir / "adapter")
        model = model.merge_and_unload()
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    if chunking is not None:
        save_config(model_dir, chunking)


