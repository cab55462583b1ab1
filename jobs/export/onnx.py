"""Write a run's model as ONNX: fp32 from ``torch.onnx.export``, int8 and fp16 converted from it.

Exporter: ``torch.onnx.export`` on its TorchScript path (``dynamo=False``), opset 17, with dynamic batch and
sequence axes. Optimum's exporter (``optimum-onnx``) would be the usual choice, but its releases require
transformers < 4.58 and the workbench runs transformers 5; the TorchScript path traced every architecture of
the catalogue (BERT, RoBERTa, ALBERT, DistilBERT, DeBERTa-v2, ELECTRA, ModernBERT) in tests/test_export.py.
The model is loaded with eager attention for the trace (the SDPA path branches on shapes), exactly as the
folder holds it: a LoRA run's ``model/`` is already merged (``jobs.training.engine._export``), a SetFit run's body and
head export as one graph that returns the head's logits.

int8 is ONNX Runtime's dynamic quantization (weights int8 per channel, activations quantized per batch at run
time; no calibration data). Only products with a weight matrix are quantized (``MatMulConstBOnly``): the
attention's activation-by-activation products stay float. 7-bit weights (``reduce_range``, advised for CPUs
without VNNI) were tried on the AVX2-only machine of ``bench/onnx_speed.py``: no faster, and WNUT-16 entity F1
fell 2.9 points below PyTorch's instead of 1.8. fp16 is ONNX Runtime's float16 converter, made only on a GPU: on a CPU it is slower than
fp32. A variant that cannot be written whole (a full disk, a failed conversion) is removed, never left half.
"""
from __future__ import annotations

import contextlib
import errno
import inspect
import logging
import warnings
from pathlib import Path
from typing import Iterator

from jobs.export.runtime import OUTPUT_NAMES
from jobs.training import chunking as chunks
from storage.errors import ConfigError, TrainingError

log = logging.getLogger(__name__)

OPSET = 17
_MODEL_CLASSES = {"text-classification": "AutoModelForSequenceClassification",
                  "token-classification": "AutoModelForTokenClassification",
                  "question-answering": "AutoModelForQuestionAnswering", "masked-lm": "AutoModelForMaskedLM"}
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class UnsupportedArchitecture(ConfigError):
    """The exporter cannot trace this model (the message names the architecture and the reason)."""


@contextlib.contextmanager
def whole_file(path: Path) -> Iterator[Path]:
    """Yield ``path``'s temporary twin; it becomes ``path`` only when the block ends without error. A full disk
    or any failure removes what was written (and ONNX's external-data files beside it)."""
    tmp = path.with_name(path.name + ".partial")
    try:
        yield tmp
        tmp.replace(path)
    except BaseException as exc:
        for leftover in (tmp, path, *path.parent.glob(tmp.name + "*")):
            with contextlib.suppress(OSError):
                leftover.unlink()
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise TrainingError(f"the disk filled while writing {path.name}; the half-written file was removed "
                                "and the run is untouched", "free some disk space, then export again") from exc
        raise


def load_torch_model(model_dir: str | Path, task: str):
    """The run's model as the exporter traces it: eager attention, evaluation mode, on the CPU."""
    import transformers

    from jobs.training.sentence_model import is_setfit_model, load_classifier

    if task not in _MODEL_CLASSES:
        raise ConfigError(f"ONNX export does not handle the task {task!r}")
    if task == "text-classification" and is_setfit_model(model_dir):
        return load_classifier(model_dir, attn_implementation="eager").eval()
    model_class = getattr(transformers, _MODEL_CLASSES[task])
    try:
        model = model_class.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    except (ValueError, ImportError):  # an architecture without the switch computes eagerly anyway
        model = model_class.from_pretrained(str(model_dir)).eval()
    if task == "text-classification":  # an attention-pooled run's graph also scores each window
        model = chunks.scoring_model(model, chunks.load_config(model_dir))
    return model


def graph_outputs(model_dir: str | Path, task: str) -> tuple[str, ...]:
    """The graph's outputs: the task's, and a chunked run's window scores where its pooling needs them."""
    if task != "text-classification":
        return OUTPUT_NAMES[task]
    return chunks.outputs_of(chunks.load_config(model_dir))


def model_inputs(model, tokenizer) -> tuple[str, ...]:
    """The inputs the graph takes: those the tokenizer makes that the model's forward also reads."""
    accepted = set(inspect.signature(model.forward).parameters)
    made = set(getattr(tokenizer, "model_input_names", _INPUTS))
    names = tuple(n for n in _INPUTS if n in made and n in accepted)
    return names if "input_ids" in names else ("input_ids", *names)


def traceable(model, task: str, names: tuple[str, ...], outputs: tuple[str, ...] | None = None):
    """``model`` taking its inputs by position (``names`` order) and returning plain tensors in
    ``OUTPUT_NAMES`` order (no ModelOutput): the form the tracer records."""
    import torch

    class Traced(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            out = self.model(**dict(zip(names, args)))
            return tuple(getattr(out, name) for name in (outputs or OUTPUT_NAMES[task]))

    return Traced().eval()


def architecture(model) -> str:
    config = getattr(model, "config", None)
    names = getattr(config, "architectures", None) or [type(model).__name__]
    return f"{names[0]} ({getattr(config, 'model_type', '?')})"


def export_fp32(model_dir: str | Path, task: str, path: Path) -> tuple[str, ...]:
    """Trace the run's model into ``path`` (fp32); returns the graph's input names.

    Raises ``UnsupportedArchitecture`` naming the architecture when the trace fails."""
    import torch
    import transformers

    model = load_torch_model(model_dir, task)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    names = model_inputs(model, tokenizer)
    sample = tokenizer(["an example sentence for the trace", "another one"], ["a second text", "and more"]
                       if task == "question-answering" else None, padding=True, return_tensors="pt")
    args = tuple(sample[n] if n in sample else torch.zeros_like(sample["input_ids"]) for n in names)
    outputs = graph_outputs(model_dir, task)
    axes = {n: {0: "batch", 1: "sequence"} for n in (*names, *outputs)}
    if chunks.WINDOW_SCORE in outputs:  # one score per window; the logits' second axis is the classes
        axes.update({n: {0: "batch"} for n in outputs})
    with whole_file(path) as tmp:
        try:
            with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(traceable(model, task, names, outputs), args, str(tmp), input_names=list(names),
                                  output_names=list(outputs), dynamic_axes=axes, opset_version=OPSET,
                                  do_constant_folding=True, dynamo=False)
        except OSError:
            raise
        except Exception as exc:  # noqa: BLE001 - the tracer's failures have no common type
            raise UnsupportedArchitecture(
                f"the ONNX exporter cannot export {architecture(model)}: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:300]}") from exc
    return names


def quantize_int8(source: Path, path: Path) -> None:
    """Dynamic int8 quantization of ``source`` into ``path`` (ONNX Runtime; weights per channel)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    with whole_file(path) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root.setLevel(logging.ERROR)  # its "consider pre-processing" advice is for static quantization
        try:
            quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8, per_channel=True,
                             extra_options={"MatMulConstBOnly": True})
        finally:
            root.setLevel(level)


def convert_fp16(source: Path, path: Path) -> None:
    """A float16 copy of ``source`` (inputs and outputs stay int64 / float32), for GPU serving."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    with whole_file(path) as tmp:
        model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
        onnx.save(model, str(tmp))
