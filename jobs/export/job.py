"""The export job: a finished run's model as ONNX variants, checked against PyTorch and timed.

    run_export(spec, model, run_spec, output_dir, reporter, device=...) -> report

``output_dir`` (the export job's own folder; the run's model folder is only read) receives ``onnx/``: the
variant files (``jobs.export.runtime.VARIANT_FILES``), the model's config, tokenizer, calibration and SetFit
files and a README on loading them, and, last, ``export.json``: the report, also the job's metrics. A variant
is ``ok``, ``check before use`` (int8/fp16 whose metric drops more than ``MAX_METRIC_DROP`` below PyTorch's on
the validation split) or ``failed``. fp32 must decide as PyTorch does on ``MIN_FP32_AGREEMENT`` of the rows:
below that the exporter got the model wrong, and the job fails with the figures (the report is written first,
so they can be read).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any, Optional

from jobs.export import parity as parity_check
from jobs.export import speed as speed_check
from jobs.export.onnx import convert_fp16, export_fp32, quantize_int8, whole_file
from jobs.export.runtime import ONNX_DIR, OUTPUT_NAMES, PYTORCH, VARIANT_FILES, load_onnx_model
from jobs.export.spec import ExportSpec
from jobs.predict.spec import ModelRef
from jobs.progress import PREPARING, Cancelled, report_phase
from jobs.specs.run import RunSpec
from storage.errors import ConfigError, TrainingError

log = logging.getLogger(__name__)

WRITING_PHASES = {"onnx-fp32": "exporting onnx-fp32", "onnx-int8": "quantizing onnx-int8",
                  "onnx-fp16": "converting onnx-fp16"}
REPORT_FILE = "export.json"
MIN_FP32_AGREEMENT = 0.999
MAX_METRIC_DROP = 0.01  # one point of a metric scored 0..1
OK, CHECK, FAILED = "ok", "check before use", "failed"
_ORT_CLASSES = {"text-classification": "ORTModelForSequenceClassification",
                "token-classification": "ORTModelForTokenClassification",
                "question-answering": "ORTModelForQuestionAnswering", "masked-lm": "ORTModelForMaskedLM"}


def run_export(spec: ExportSpec, model: ModelRef, run_spec: RunSpec, output_dir: Path, reporter, *,
               device: str = "auto") -> dict:
    """Export ``model`` into ``output_dir/onnx``, check each variant against PyTorch on the run's validation
    split, time them all, and write and return the report (see the module doc).

    Raises ``ConfigError`` for what cannot be exported (the task, fp16 without a GPU, an architecture the
    tracer cannot follow: ``UnsupportedArchitecture``), ``TrainingError`` for a missing model, a full disk
    or an fp32 graph that disagrees with PyTorch, ``Cancelled`` when the reporter asks to stop."""
    import torch

    from jobs.predict.infer import load_predictor
    from jobs.training.data import validation_records
    from jobs.training.sentence_model import is_setfit_model
    from jobs.training.trainer import pick_device

    started = time.perf_counter()
    report_phase(reporter, PREPARING)
    model_dir, output_dir = Path(model.model_dir), Path(output_dir)
    check_exportable(model, output_dir)
    device = pick_device(device)
    variants = wanted_variants(spec, device)
    onnx_dir = output_dir / ONNX_DIR
    onnx_dir.mkdir(parents=True, exist_ok=True)
    for stale in (REPORT_FILE, *(f"{ONNX_DIR}/{name}" for name in VARIANT_FILES.values())):
        (output_dir / stale).unlink(missing_ok=True)  # an earlier attempt's files are not this one's
    records = validation_records(run_spec)
    stages = Stages(reporter, variants)
    log.info("exporting run %s (%s, %s) as %s on %s; %d validation records", model.run_id, model.task, model_dir,
             ", ".join(variants), device, len(records))

    write_variants(model_dir, model.task, onnx_dir, variants, reporter, stages)
    copy_model_files(model_dir, onnx_dir)
    write_readme(onnx_dir, model.task, variants, setfit=is_setfit_model(model_dir))

    predictor = load_predictor(model, device)
    split = parity_check.validation_split(model.task, records, predictor.tokenizer,
                                          multi_label=predictor.multi_label, seed=run_spec.train.seed)
    threads = torch.get_num_threads()
    progress = parity_check.Progress(reporter, len(split.rows) * (1 + len(variants)))
    reference = parity_check.predict_split(predictor, split, reporter, progress)
    stages.end()
    baseline = parity_check.metric_of(split, reference)
    report: dict[str, Any] = {
        "task": model.task, "metric": split.metric, "validation_rows": len(split.rows), "device": device,
        "threads": threads, "seconds": None,
        "pytorch": {"name": PYTORCH, "metric": round(baseline.metric, 6),
                    **_speed(predictor, split, reporter, PYTORCH, stages),
                    "bytes": speed_check.weights_bytes(model_dir)},
        "variants": []}
    log.info("pytorch: %s=%.4f, %s", split.metric, baseline.metric, report["pytorch"])

    for name in variants:
        entry = check_variant(name, model_dir, onnx_dir, predictor, split, reference, baseline, reporter,
                              progress, stages, device=device, threads=threads)
        report["variants"].append(entry)
        if name == "onnx-fp32" and entry["status"] == FAILED:
            _finish(report, output_dir, started)
            raise TrainingError(f"the ONNX export of run {model.run_id} does not answer as PyTorch does: "
                                f"{entry['reason']}", "report the model's architecture; serve it with PyTorch")
    _finish(report, output_dir, started)
    stages.finish()
    log.info("export finished in %.1f s: %s", report["seconds"],
             "; ".join(f"{v['name']} {v['status']}" for v in report["variants"]))
    return report


def check_exportable(model: ModelRef, output_dir: Path) -> None:
    """Refuse a task without an ONNX graph, a run without its model folder, and an output inside the model."""
    model_dir = Path(model.model_dir)
    if model.task not in OUTPUT_NAMES:
        raise ConfigError(f"ONNX export does not handle the task {model.task!r}: it exports "
                          f"{', '.join(OUTPUT_NAMES)} runs")
    if not (model_dir / "config.json").is_file():
        raise TrainingError(f"run {model.run_id} has no saved model ({model_dir / 'config.json'} is missing)",
                            "export a run that succeeded and still has its model folder")
    if Path(os.path.realpath(output_dir)).is_relative_to(os.path.realpath(model_dir)):
        raise ConfigError(f"the export folder {output_dir} is inside the model folder {model_dir}, "
                          "which an export never writes to")


def wanted_variants(spec: ExportSpec, device: str) -> list[str]:
    """fp32 always; int8 when asked; fp16 when asked or, unasked, when the job runs on a GPU."""
    gpu = device.startswith("cuda")
    if spec.fp16 and not gpu:
        raise ConfigError("fp16 needs a GPU: on a CPU a float16 graph is slower than fp32; export without fp16, "
                          "or run the export on a GPU worker")
    variants = ["onnx-fp32"]
    if spec.int8:
        variants.append("onnx-int8")
    if spec.fp16 or (spec.fp16 is None and gpu):
        variants.append("onnx-fp16")
    return variants


class Stages:
    """The job's progress as stages done of all of them, reported the way training reports its steps
    (``reporter.progress``), so the Runs tab's bar and ``runs show`` move: each variant's file, then for
    PyTorch and each variant its parity check and its timing. The phase names the stage under way
    (``quantizing onnx-int8``, ``checking parity 24/36``, ``timing onnx-int8``)."""

    def __init__(self, reporter, variants: list[str]):
        self.reporter, self.done = reporter, 0
        self.total = len(variants) + 2 * (1 + len(variants))
        reporter.progress(self.done, self.total, 0.0)

    def end(self) -> None:
        """One stage done."""
        self.done = min(self.total, self.done + 1)
        self.reporter.progress(self.done, self.total, 0.0)

    def finish(self) -> None:
        """Every stage done, the skipped ones too (a variant that failed its check is not timed)."""
        if self.done < self.total:
            self.done = self.total
            self.reporter.progress(self.done, self.total, 0.0)


def write_variants(model_dir: Path, task: str, onnx_dir: Path, variants: list[str], reporter,
                   stages: Stages) -> None:
    """Each variant's file, fp32 first (the others are converted from it); cancel between them."""
    fp32 = onnx_dir / VARIANT_FILES["onnx-fp32"]
    for name in variants:
        if reporter.cancel_requested():
            raise Cancelled()
        report_phase(reporter, WRITING_PHASES[name])
        path = onnx_dir / VARIANT_FILES[name]
        started = time.perf_counter()
        if name == "onnx-fp32":
            export_fp32(model_dir, task, path)
        elif name == "onnx-int8":
            quantize_int8(fp32, path)
        else:
            convert_fp16(fp32, path)
        log.info("%s written in %.1f s: %s (%.1f MB)", name, time.perf_counter() - started, path,
                 path.stat().st_size / 1e6)
        stages.end()


def check_variant(name: str, model_dir: Path, onnx_dir: Path, predictor, split, reference: list[dict],
                  baseline, reporter, progress, stages: Stages, *, device: str, threads: int) -> dict:
    """One variant's line of the report: parity with PyTorch, its status, then (unless failed) its speed.
    An int8/fp16 variant that cannot run is reported failed, with the reason; fp32's failure fails the job."""
    path = onnx_dir / VARIANT_FILES[name]
    entry: dict[str, Any] = {"name": name, "path": f"{ONNX_DIR}/{path.name}", "status": OK, "reason": "",
                             "agreement": None, "max_abs_diff": None, "metric": None, "metric_drop": None,
                             "p50_ms": None, "p95_ms": None, "rows_per_s": None, "bytes": path.stat().st_size}
    try:
        model = load_onnx_model(model_dir, onnx_dir, name, device=device, threads=threads)
        twin = parity_check.with_model(predictor, model)
        found = parity_check.compare(split, reference, parity_check.predict_split(twin, split, reporter, progress))
        stages.end()
    except (Cancelled, TrainingError):
        raise
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime's failures have no common type
        if name == "onnx-fp32":
            raise
        log.warning("%s could not be checked: %s", name, exc)
        return {**entry, "status": FAILED, "reason": f"it does not run: {type(exc).__name__}: {str(exc)[:300]}"}
    entry.update(agreement=round(found.agreement, 6), max_abs_diff=float(f"{found.max_abs_diff:.3g}"),
                 metric=round(found.metric, 6), metric_drop=round(baseline.metric - found.metric, 6),
                 provider=model.session.get_providers()[0])
    entry["status"], entry["reason"] = verdict(name, found, baseline.metric, split.metric)
    log.info("%s: %s (%s)", name, entry["status"], parity_check.describe(found))
    if entry["status"] != FAILED:
        entry.update(_speed(twin, split, reporter, name, stages))
    return entry


def verdict(name: str, found, reference_metric: float, metric: str) -> tuple[str, str]:
    """(status, reason): fp32 fails below ``MIN_FP32_AGREEMENT``; a variant whose metric drops more than
    ``MAX_METRIC_DROP`` is to be checked before use."""
    if name == "onnx-fp32" and found.agreement < MIN_FP32_AGREEMENT:
        return FAILED, (f"it decides as PyTorch does on {found.agreement:.2%} of the validation rows (at least "
                        f"{MIN_FP32_AGREEMENT:.1%} needed); max score difference {found.max_abs_diff:.3g}, "
                        f"{metric} {found.metric:.4f} against PyTorch's {reference_metric:.4f}")
    drop = reference_metric - found.metric
    if drop > MAX_METRIC_DROP:
        return CHECK, (f"its {metric} is {100 * drop:.1f} points below PyTorch's ({found.metric:.4f} against "
                       f"{reference_metric:.4f}) on the validation split")
    return OK, ""


def _speed(predictor, split, reporter, name: str, stages: Stages) -> dict:
    found = speed_check.measure(predictor, split.rows, reporter, phase=f"timing {name}")
    stages.end()
    return {"p50_ms": found.p50_ms, "p95_ms": found.p95_ms, "rows_per_s": found.rows_per_s}


def _finish(report: dict, output_dir: Path, started: float) -> None:
    """Stamp the time and write ``export.json`` whole (a temporary twin renamed over it)."""
    report["seconds"] = round(time.perf_counter() - started, 2)
    with whole_file(output_dir / REPORT_FILE) as tmp:
        tmp.write_text(json.dumps(report, indent=2), encoding="utf-8")


# ------------------------------------------------------------ the folder around the graphs

def copy_model_files(model_dir: Path, onnx_dir: Path) -> None:
    """Everything of the model folder but its weights (config, tokenizer, calibration, SetFit's files), so the
    ``onnx/`` folder loads on its own."""
    for source in sorted(Path(model_dir).rglob("*")):
        relative = source.relative_to(model_dir)
        if not source.is_file() or source.suffix in speed_check.WEIGHT_SUFFIXES or relative == Path("README.md"):
            continue
        target = onnx_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with whole_file(target) as tmp:
            shutil.copyfile(source, tmp)


def write_readme(onnx_dir: Path, task: str, variants: list[str], *, setfit: bool = False) -> None:
    """How to load the graphs with onnxruntime (and Optimum), and which runtime each file is."""
    outputs = ", ".join(OUTPUT_NAMES[task])
    cpu_file = VARIANT_FILES["onnx-int8" if "onnx-int8" in variants else "onnx-fp32"]
    files = "\n".join(f"- `{VARIANT_FILES[name]}`: `{name}`{_VARIANT_NOTES[name]}" for name in variants)
    head = ("\nThis is a sentence encoder with a linear head (a SetFit run, or a sentence-transformers model "
            "fine-tuned on few examples a class): the graph holds the encoder, its pooling and the "
            "head, and returns the head's logits (softmax them for the class probabilities; `setfit.json` holds "
            "the class names). Optimum's classes do not load it.\n") if setfit else ""
    text = f"""# ONNX export ({task})

Exported by BERT Workbench from the run's model folder (opset 17, dynamic batch and sequence axes).
{files}

Beside them: the model's `config.json` (labels in `id2label`), its tokenizer files, and its calibration
(temperature, thresholds) when the run has one.
{head}
## With onnxruntime

```python
import numpy as np
import onnxruntime as ort
from transformers import AutoTokenizer

folder = "onnx"  # this folder
tokenizer = AutoTokenizer.from_pretrained(folder)
session = ort.InferenceSession(f"{{folder}}/{cpu_file}", providers=["CPUExecutionProvider"])
wanted = [i.name for i in session.get_inputs()]
enc = tokenizer({_EXAMPLES[task]}, padding=True, truncation=True, return_tensors="np")
feed = {{name: enc[name].astype(np.int64) if name in enc else np.zeros_like(enc["input_ids"])
        for name in wanted}}
outputs = session.run(None, feed)  # {outputs}
print(outputs[0].argmax(-1))  # {_READS[task]}
```

## With Optimum

```python
from optimum.onnxruntime import {_ORT_CLASSES[task]}

model = {_ORT_CLASSES[task]}.from_pretrained("onnx", file_name="{cpu_file}")
```
"""
    with whole_file(onnx_dir / "README.md") as tmp:
        tmp.write_text(text, encoding="utf-8")


_VARIANT_NOTES = {"onnx-fp32": " (float32, the reference: decides as PyTorch does)",
                  "onnx-int8": " (dynamic int8 quantization: about 4x smaller, faster on a CPU; read its parity "
                               "in export.json)",
                  "onnx-fp16": " (float16, for a GPU with the CUDA execution provider)"}
_READS = {"text-classification": "each text's class id (config.json's id2label names it)",
          "token-classification": "each token's tag id (config.json's id2label names it)",
          "question-answering": "the answer's first token (argmax of end_logits: its last)",
          "masked-lm": "the likeliest token id at each position"}
_EXAMPLES = {"text-classification": '["a text to classify"]',
             "token-classification": '["Ada Lovelace lived in London"]',
             "question-answering": '["Who wrote it?"], ["Ada Lovelace wrote it."]',
             "masked-lm": '[f"Paris is the {tokenizer.mask_token} of France."]'}


def report_path(output_dir: Path) -> Optional[Path]:
    """The export's report, when the job finished writing one."""
    path = Path(output_dir) / REPORT_FILE
    return path if path.is_file() else None
