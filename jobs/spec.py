"""The run spec: one versioned, JSON-serialisable description of a training run.

The UI, the CLI (``workbench train`` flags or ``--config FILE.yaml``) and clones
of earlier runs all build a ``RunSpec``; the worker executes it. Unknown keys
are rejected so that a typo in a config file is an error, not a silent default.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from workbench.errors import ConfigError

SPEC_VERSION = 1
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
    # "auto": the loss when the data is small (jobs.hyperparameters), else the metric. A tie in accuracy
    # (common on a small validation split) would keep the earliest, least confident checkpoint.
    select_by: str = "auto"  # auto | metric | loss | last
    # Text classification: fine-tune the encoder with a classification head, or SetFit (contrastive
    # pairs + a logistic-regression head); "auto" picks SetFit below 25 examples per class.
    method: str = "auto"  # auto | finetune | setfit


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
        if self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        if self.train.objective not in ("mlm", "mlm+nsp"):
            raise ConfigError(f"unknown objective {self.train.objective!r}; choose mlm or mlm+nsp")
        if self.train.objective == "mlm+nsp" and self.task != "masked-lm":
            raise ConfigError("the mlm+nsp objective belongs to the masked-lm task")
        if self.train.select_by not in ("auto", "metric", "loss", "last"):
            raise ConfigError(f"unknown select_by {self.train.select_by!r}; choose auto, metric, loss or last")
        if self.train.method not in ("auto", "finetune", "setfit"):
            raise ConfigError(f"unknown method {self.train.method!r}; choose auto, finetune or setfit")
        if self.train.method == "setfit" and (self.task != "text-classification" or self.lora.enabled):
            raise ConfigError("the setfit method trains text classification without LoRA; "
                              "choose method finetune for this run")
        if self.procs is not None and (not isinstance(self.procs, int) or self.procs < 1):
            raise ConfigError(f"procs must be a whole number of processes, at least 1 (got {self.procs!r})")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "RunSpec":
        raw = dict(raw)
        version = raw.pop("version", SPEC_VERSION)
        if version != SPEC_VERSION:
            raise ConfigError(f"run spec version {version} is not supported (this workbench reads {SPEC_VERSION})")
        try:
            return cls(
                data=_build(DataSpec, raw.pop("data", {}), "data"),
                train=_build(TrainSpec, raw.pop("train", {}) or {}, "train"),
                lora=_build(LoraSpec, raw.pop("lora", {}) or {}, "lora"),
                **_checked(cls, raw, ""),
            )
        except TypeError as exc:
            raise ConfigError(f"invalid run spec: {exc}") from None


def _checked(kind: type, raw: Mapping[str, Any], section: str) -> dict[str, Any]:
    known = {f.name for f in dataclasses.fields(kind)} - {"data", "train", "lora", "version"}
    unknown = sorted(set(raw) - known)
    if unknown:
        where = f" in section '{section}'" if section else ""
        raise ConfigError(f"unknown key(s) {', '.join(unknown)}{where}; known keys: {', '.join(sorted(known))}")
    return dict(raw)


def _build(kind: type, raw: Mapping[str, Any], section: str):
    if not isinstance(raw, Mapping):
        raise ConfigError(f"section '{section}' must be a mapping")
    return kind(**_checked(kind, raw, section))
