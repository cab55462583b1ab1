"""The run spec: one versioned, JSON-serialisable description of a training run.

The UI, the CLI (``workbench train`` flags or ``--config FILE.yaml``) and clones
of earlier runs all build a ``RunSpec``; the worker executes it. Unknown keys
are rejected so that a typo in a config file is an error, not a silent default, and
every field is typed and range-checked (``*_FIELDS`` below) before a spec is built:
a bad value is one error naming the field, never a run that fails later.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from jobs.specs.fields import Field, check_fields, refuse_unknown, show
from jobs.specs.hyperparameters import METHODS, PRESETS
from storage.errors import ConfigError

SPEC_VERSION = 1
# text classification: when a run's temperature scaling is applied, and the targets of a binary run's
# positive-class threshold (jobs.evaluation.calibration); kept here so that reading a spec loads no numpy
CALIBRATE_CHOICES = ("auto", "on", "off")
THRESHOLD_TARGETS = ("best_f1", "precision>=0.9", "recall>=0.9")
# text classification of documents longer than the window: read in windows and pooled (jobs.training.chunking)
CHUNKING_CHOICES = ("auto", "off", "mean", "max", "attention")
TASKS = ("text-classification", "token-classification", "question-answering", "masked-lm")
# "bert-pretraining" (MLM + NSP) is an objective of the masked-lm task, see DataSpec/TrainSpec.objective.
DEFAULT_MODEL = "all-MiniLM-L6-v2"
# The metrics each task reports first (the CLI contract's keys), main one first.
HEADLINE_METRICS = {
    "text-classification": ("accuracy", "f1_macro"),
    "token-classification": ("entity_f1", "token_accuracy"),
    "question-answering": ("f1", "exact_match"),
    "masked-lm": ("perplexity", "nsp_accuracy"),
}
# Every final metric each task's evaluation reports (jobs/tasks/*), main one first: what a sweep may optimise.
# roc_auc: binary single-label data only; f1_micro: multi-label only; nsp_accuracy: the mlm+nsp objective only.
REPORTED_METRICS = {
    "text-classification": ("accuracy", "f1_macro", "roc_auc", "f1_micro"),
    "token-classification": ("entity_f1", "token_accuracy", "entity_precision", "entity_recall"),
    "question-answering": ("f1", "exact_match"),
    "masked-lm": ("perplexity", "mlm_loss", "nsp_accuracy"),
}


@dataclasses.dataclass
class LoraSpec:
    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.1
    target_modules: Optional[list[str]] = None  # None: chosen per architecture
    merge_on_export: bool = True


@dataclasses.dataclass
class DataSpec:
    """Which data a run uses: normalized JSONL files written by the dataset store."""

    dataset_id: Optional[str] = None
    train_path: str = ""
    validation_path: Optional[str] = None
    name: str = ""
    # Records predicted after training, written with every class probability to heldout.npz: an
    # audit's held-out fold (workbench.services.audits). Never trained on, never used to pick a checkpoint.
    predict_path: Optional[str] = None


@dataclasses.dataclass
class TrainSpec:
    """Hyper-parameters. ``None`` means: the engine picks a default from task, model size and data size."""

    preset: str = "standard"  # quick | standard | thorough
    epochs: Optional[float] = None
    learning_rate: Optional[float] = None
    batch_size: Optional[int] = None
    gradient_accumulation_steps: int = 1
    max_length: Optional[int] = None
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    seed: int = 42
    early_stopping_patience: Optional[int] = None
    eval_steps: Optional[int] = None
    max_steps: Optional[int] = None
    max_train_examples: Optional[int] = None  # None: 2,000 for the quick preset (a seeded sample), else all
    class_weights: bool = False
    multi_label: Optional[bool] = None
    label_all_subtokens: bool = False
    doc_stride: int = 128
    max_answer_length: int = 30
    whole_word_masking: bool = False
    mlm_probability: float = 0.15
    objective: str = "mlm"  # mlm | mlm+nsp (masked-lm task only)
    precision: str = "auto"  # auto | fp32 | fp16 | bf16
    # Which checkpoint is kept: the best main metric, the lowest validation loss, or the last one.
    # "auto": the loss when the data is small (jobs.specs.hyperparameters), else the metric. A tie in accuracy
    # (common on a small validation split) would keep the earliest, least confident checkpoint.
    select_by: str = "auto"  # auto | metric | loss | last
    # Text classification: fine-tune the encoder with a classification head, or SetFit (contrastive
    # pairs + a logistic-regression head); "auto" picks SetFit below 25 examples per class.
    method: str = "auto"  # auto | finetune | setfit
    # Text classification: temperature scaling fitted on the validation split (jobs.evaluation.calibration) and stored
    # with the model; "auto" applies it where it lowers the validation ECE, "on" always, "off" never.
    calibrate: str = "auto"  # auto | on | off
    # Binary text classification: the positive class's decision threshold, chosen on the validation split
    # for this target; "none" keeps the most probable class.
    threshold: str = "none"  # none | best_f1 | precision>=0.9 | recall>=0.9
    # Text classification of long texts: read each text in overlapping windows of max_length tokens and pool
    # the windows' logits (jobs.training.chunking); "auto" turns mean pooling on when a meaningful share of the
    # training texts is longer than the window (jobs.specs.hyperparameters.CHUNK_SHARE), "off" truncates.
    chunking: str = "auto"  # auto | off | mean | max | attention
    chunk_stride: Optional[int] = None  # tokens two windows share; None: a quarter of the window
    max_windows: int = 16  # windows read per document at most; the rest are dropped and counted


@dataclasses.dataclass
class RunSpec:
    task: str
    data: DataSpec
    model: str = DEFAULT_MODEL
    train: TrainSpec = dataclasses.field(default_factory=TrainSpec)
    lora: LoraSpec = dataclasses.field(default_factory=LoraSpec)
    name: str = ""
    init_from_run: Optional[int] = None  # chain runs: fine-tune from an earlier run's model
    gpus: int = 1  # GPUs asked for when present; >1 launches DDP
    # Data-parallel processes on a CPU worker (gloo); None: the worker's setting (WORKBENCH_CPU_PROCS).
    # `train.batch_size` stays per process: the global batch is batch_size x processes x accumulation.
    procs: Optional[int] = None
    version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        check_run_spec(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], label: str = "run spec", path: str = "") -> "RunSpec":
        """The spec of a mapping (a config file, a stored run, a sweep's base), every field checked first.

        ``label`` and ``path`` say where the mapping sits in errors: a sweep's base reports
        ``sweep spec: base.train.learning_rate must be ...``."""
        check_run_mapping(raw, label, path)
        raw = dict(raw)
        _check_version(raw.pop("version", SPEC_VERSION), label)
        if "task" not in raw:
            raise ConfigError(f"{label}: {path}task is missing; choose one of {', '.join(TASKS)}")
        try:
            return cls(data=DataSpec(**(raw.pop("data", None) or {})),
                       train=TrainSpec(**(raw.pop("train", None) or {})),
                       lora=LoraSpec(**(raw.pop("lora", None) or {})), **raw)
        except ConfigError as exc:
            # a combination of fields, checked on the whole spec: say where this spec sits
            raise ConfigError(_relabel(str(exc), label, path)) from None


# What each field takes (jobs.specs.fields): a spec is checked against these before it is built or stored,
# whether it comes from a config file, the Train form, a clone or a sweep's trial.
_TEXT, _OPTIONAL_TEXT = Field("text"), Field("text", optional=True)
_BOOL = Field("bool")
DATA_FIELDS: dict[str, Field] = {
    "dataset_id": _OPTIONAL_TEXT, "train_path": _TEXT, "validation_path": _OPTIONAL_TEXT, "name": _TEXT,
    "predict_path": _OPTIONAL_TEXT,
}
TRAIN_FIELDS: dict[str, Field] = {
    "preset": Field("choice", choices=PRESETS),
    "epochs": Field("number", 0, 1000, above_low=True, optional=True),
    # no upper bound: a diverging rate is the engine's to report (a NaN loss), and its test sets 1e30
    "learning_rate": Field("number", 0, above_low=True, optional=True),
    "batch_size": Field("int", 1, 8192, optional=True),
    "gradient_accumulation_steps": Field("int", 1, 1024),
    "max_length": Field("int", 1, 65536, optional=True),
    "warmup_ratio": Field("number", 0, 1),
    "weight_decay": Field("number", 0, 1),
    "seed": Field("int", 0, 2**32 - 1),  # numpy's seeds
    "early_stopping_patience": Field("int", 0, 1000, optional=True),
    "eval_steps": Field("int", 1, optional=True),
    "max_steps": Field("int", 1, optional=True),
    "max_train_examples": Field("int", 1, optional=True),
    "class_weights": _BOOL,
    "multi_label": Field("bool", optional=True),
    "label_all_subtokens": _BOOL,
    "doc_stride": Field("int", 1, 65536),
    "max_answer_length": Field("int", 1, 65536),
    "whole_word_masking": _BOOL,
    "mlm_probability": Field("number", 0, 1, above_low=True, below_high=True),
    "objective": Field("choice", choices=("mlm", "mlm+nsp")),
    "precision": Field("choice", choices=("auto", "fp32", "fp16", "bf16")),
    "select_by": Field("choice", choices=("auto", "metric", "loss", "last")),
    "method": Field("choice", choices=METHODS),
    "calibrate": Field("choice", choices=CALIBRATE_CHOICES),
    "threshold": Field("choice", choices=("none", *THRESHOLD_TARGETS)),
    "chunking": Field("choice", choices=CHUNKING_CHOICES),
    "chunk_stride": Field("int", 0, 65536, optional=True),
    "max_windows": Field("int", 1, 4096),
}
LORA_FIELDS: dict[str, Field] = {
    "enabled": _BOOL,
    "r": Field("int", 1, 1024),
    "alpha": Field("int", 1, 4096),
    "dropout": Field("number", 0, 1, below_high=True),
    "target_modules": Field("texts", optional=True),
    "merge_on_export": _BOOL,
}
RUN_FIELDS: dict[str, Field] = {
    "task": Field("choice", choices=TASKS),
    "model": Field("text", nonempty=True),
    "name": _TEXT,
    "init_from_run": Field("int", 1, optional=True),
    "gpus": Field("int", 1, 64),
    "procs": Field("int", 1, 256, optional=True, what="a whole number of processes, at least 1 and at most 256"),
}
SECTIONS: dict[str, tuple[type, dict[str, Field]]] = {
    "data": (DataSpec, DATA_FIELDS), "train": (TrainSpec, TRAIN_FIELDS), "lora": (LoraSpec, LORA_FIELDS)}


def check_run_mapping(raw: Any, label: str = "run spec", path: str = "") -> None:
    """Every key of a run spec mapping known and every value present typed and in range.

    Only the keys present are checked: a config file may leave the task or the data to flags.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{label}: {path.rstrip('.') or 'the run spec'} must be a mapping "
                          f"(task, data, model, train, lora, ...), got {show(raw)}")
    refuse_unknown(label, path.rstrip("."), raw, [*RUN_FIELDS, *SECTIONS, "version"])
    check_fields(label, path, raw, RUN_FIELDS)
    for section, (_, fields) in SECTIONS.items():
        values = raw.get(section)
        if values is None and section != "data":
            continue  # "train:" left empty
        if not isinstance(values, Mapping):
            if section not in raw:
                continue
            raise ConfigError(f"{label}: {path}{section} must be a mapping of {', '.join(fields)}, got {show(values)}")
        refuse_unknown(label, f"{path}{section}", values, fields)
        check_fields(label, f"{path}{section}.", values, fields)


def check_run_spec(spec: RunSpec, label: str = "run spec") -> None:
    """Every field of a built spec typed and in range, and the fields fit together."""
    check_fields(label, "", {name: getattr(spec, name) for name in RUN_FIELDS}, RUN_FIELDS)
    _check_version(spec.version, label)
    for section, (kind, fields) in SECTIONS.items():
        part = getattr(spec, section)
        if not isinstance(part, kind):
            raise ConfigError(f"{label}: {section} must be a mapping of {', '.join(fields)}, got {show(part)}")
        check_fields(label, f"{section}.", {name: getattr(part, name) for name in fields}, fields)
    train = spec.train
    if train.objective == "mlm+nsp" and spec.task != "masked-lm":
        raise ConfigError(f"{label}: train.objective mlm+nsp belongs to the masked-lm task, not {spec.task}")
    if train.chunking not in ("auto", "off") and spec.task != "text-classification":
        raise ConfigError(f"{label}: train.chunking {train.chunking} reads long texts for text classification; "
                          f"choose auto or off for {spec.task}")
    if train.chunking not in ("auto", "off") and train.method == "setfit":
        raise ConfigError(f"{label}: train.chunking {train.chunking} trains a fine-tuned model on documents; "
                          "choose method finetune (or chunking off) for this run")
    if train.method == "setfit" and (spec.task != "text-classification" or spec.lora.enabled):
        raise ConfigError(f"{label}: train.method setfit trains text classification without LoRA; "
                          "choose method finetune for this run")


def _check_version(version: Any, label: str) -> None:
    if type(version) is not int or version != SPEC_VERSION:
        raise ConfigError(f"{label}: version {show(version)} is not supported (this workbench reads run spec "
                          f"version {SPEC_VERSION})")


def objective_metrics(spec: RunSpec) -> tuple[str, ...]:
    """The final metrics a run of ``spec`` reports, the ones a sweep can optimise (main one first)."""
    metrics = REPORTED_METRICS[spec.task]
    if spec.task == "masked-lm" and spec.train.objective != "mlm+nsp":
        metrics = tuple(m for m in metrics if m != "nsp_accuracy")
    return metrics


def _relabel(message: str, label: str, path: str) -> str:
    """A message of ``check_run_spec`` (``run spec: train.x ...``) as it reads for a spec at ``label``/``path``."""
    head = "run spec: "
    return f"{label}: {path}{message[len(head):]}" if message.startswith(head) else message
