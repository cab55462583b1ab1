"""An exported ONNX variant in place of the torch model: same call, same named outputs.

The predictors (``jobs.predict.infer.TorchPredictor``, ``workbench.playground.predictors.Predictor``) call
their model as ``model(input_ids=..., attention_mask=..., token_type_ids=...)`` and read ``out.logits``
(``start_logits``/``end_logits`` for QA) as tensors. ``OnnxModel`` answers that call from an ONNX Runtime
session, so every task's tokenization, windows and post-processing stay the code PyTorch runs: a variant
can differ from PyTorch only by its numbers, which is what the export's parity check measures.

Runtimes a playground or a prediction job can name: ``pytorch`` (the run's model folder) and one per
exported variant, ``onnx-fp32``, ``onnx-int8`` and ``onnx-fp16`` (GPU only). A variant's file lives in the
export's ``onnx/`` folder under the name Optimum's ``ORTModel`` classes look for.
"""
from __future__ import annotations

import logging
import os
import types
from pathlib import Path
from typing import Any, Optional

from storage.errors import ConfigError

log = logging.getLogger(__name__)

PYTORCH = "pytorch"
VARIANT_FILES = {"onnx-fp32": "model.onnx", "onnx-int8": "model_quantized.onnx", "onnx-fp16": "model_fp16.onnx"}
RUNTIMES = (PYTORCH, *VARIANT_FILES)
ONNX_DIR = "onnx"  # in an export job's output folder (and in the model zip)
# what each task's graph returns, in the torch model's output names
OUTPUT_NAMES = {"text-classification": ("logits",), "token-classification": ("logits",),
                "question-answering": ("start_logits", "end_logits"), "masked-lm": ("logits",)}


def check_runtime(runtime: Optional[str]) -> str:
    """``runtime`` when it is one of ``RUNTIMES`` (None: ``pytorch``); a ConfigError naming the choices else."""
    value = (runtime or PYTORCH).strip().lower()
    if value not in RUNTIMES:
        raise ConfigError(f"unknown runtime {runtime!r}: choose one of {', '.join(RUNTIMES)}")
    return value


def variant_path(onnx_dir: str | Path, runtime: str) -> Path:
    """The file of ``runtime``'s variant in an export's ``onnx/`` folder (which may not hold it)."""
    if runtime not in VARIANT_FILES:
        raise ConfigError(f"{runtime!r} is not an ONNX variant: choose one of {', '.join(VARIANT_FILES)}")
    return Path(onnx_dir) / VARIANT_FILES[runtime]


def session_options(threads: Optional[int] = None):
    """ONNX Runtime session options: every graph optimisation, ``threads`` intra-op threads (None: the CPUs
    this process may use)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    options.intra_op_num_threads = int(threads or available)
    return options


def run_options():
    """Options of every ``session.run``: the CPU memory arena gives back what a run grew it by once the run ends.

    ONNX Runtime's arena keeps the largest it ever grew to: concurrent maximum-size playground
    requests left a served variant at its peak for good (bench/onnx_memory.py).
    """
    import onnxruntime as ort

    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def providers(device: str = "cpu") -> list[str]:
    """CUDA first on a GPU when this onnxruntime build has it, the CPU otherwise."""
    import onnxruntime as ort

    if device.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


class OnnxModel:
    """An ONNX Runtime session with the calling convention of a transformers model (see the module doc).

    ``config`` is the run's ``PretrainedConfig`` (labels, vocabulary, limits: what the predictors read).
    A session's ``run`` is safe to call from several threads at once, as the playground does.
    """

    def __init__(self, path: str | Path, config: Any, *, device: str = "cpu", threads: Optional[int] = None):
        import onnxruntime as ort

        self.path = Path(path)
        if not self.path.is_file():
            raise ConfigError(f"the ONNX file {self.path} is missing: export the run again")
        self.config = config
        self.device = device
        self.session = ort.InferenceSession(str(self.path), session_options(threads), providers=providers(device))
        self.input_names = tuple(i.name for i in self.session.get_inputs())
        self.output_names = tuple(o.name for o in self.session.get_outputs())
        self.fp16 = any("float16" in (i.type or "") for i in self.session.get_outputs())

    @property
    def nbytes(self) -> int:
        """The file's size: what the variant holds in memory, near enough, for a cache's bound."""
        return self.path.stat().st_size

    def __call__(self, **inputs: Any) -> types.SimpleNamespace:
        import numpy as np
        import torch

        feed = {}
        for name in self.input_names:
            value = inputs.get(name)
            if value is None and name == "token_type_ids":  # a tokenizer without segment ids: all zeros
                value = torch.zeros_like(inputs["input_ids"])
            if value is None:
                raise ConfigError(f"the ONNX model needs the input {name!r}")
            array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
            feed[name] = array.astype(np.int64, copy=False)
        outputs = self.session.run(list(self.output_names), feed, run_options())
        return types.SimpleNamespace(**{name: torch.from_numpy(np.ascontiguousarray(out)).float()
                                        for name, out in zip(self.output_names, outputs)})

    # the torch model's methods the predictors call on their model
    def to(self, *_args: Any, **_kwargs: Any) -> "OnnxModel":
        return self

    def eval(self) -> "OnnxModel":
        return self

    def parameters(self):
        return iter(())

    def buffers(self):
        return iter(())


def latest_onnx_dir(db, run_id: int) -> Optional[Path]:
    """The ``onnx/`` folder of the run's newest succeeded export that still exists; None when it has none."""
    from sqlalchemy import select

    from storage.models import KIND_EXPORT, SUCCEEDED, Run

    with db.session() as session:
        folders = session.scalars(select(Run.output_dir).where(
            Run.parent_run_id == run_id, Run.kind == KIND_EXPORT, Run.status == SUCCEEDED).order_by(Run.id.desc()))
        for folder in folders:
            if folder and (Path(folder) / ONNX_DIR / VARIANT_FILES["onnx-fp32"]).is_file():
                return Path(folder) / ONNX_DIR
    return None


def load_onnx_model(model_dir: str | Path, onnx_dir: str | Path, runtime: str, *, device: str = "cpu",
                    threads: Optional[int] = None) -> OnnxModel:
    """The ``runtime`` variant of an export (``onnx_dir``) with the config of the run's model folder."""
    path = variant_path(onnx_dir, runtime)
    if not path.is_file():
        raise ConfigError(f"this run has no {runtime} variant ({path} is missing): export the run "
                          "(with int8 for onnx-int8) or use the pytorch runtime")
    return OnnxModel(path, model_config(model_dir), device=device, threads=threads)


def model_config(model_dir: str | Path):
    """The run's ``PretrainedConfig``; a SetFit run's labels live in ``setfit.json``, not in its encoder's config,
    and are put there as ``jobs.training.sentence_model.load_classifier`` puts them."""
    import json

    from transformers import AutoConfig

    from jobs.training.sentence_model import is_setfit_model
    from jobs.training.sentence_model import CONFIG_FILE

    config = AutoConfig.from_pretrained(str(model_dir))
    if is_setfit_model(model_dir):
        labels = json.loads((Path(model_dir) / CONFIG_FILE).read_text(encoding="utf-8"))["labels"]
        config.id2label = dict(enumerate(labels))
        config.label2id = {name: i for i, name in enumerate(labels)}
        config.problem_type = "single_label_classification"
    return config
