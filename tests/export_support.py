"""A tiny finished run of each task, as the export job (and the tests of its queue, CLI and serving) take one.

``tiny_run(folder, kind)`` writes ``folder/run``: ``model/`` (a config-built BERT, hidden 32, 2 layers, with
the packaged MiniLM tokenizer, trained a few steps by ``tests.playground_support.train_tiny``, or a SetFit
folder with a random head), ``metrics.json`` with the hyper-parameters an engine run records, and
``validation.jsonl``; it returns the ``ModelRef`` and the ``RunSpec`` that ``jobs.export.job.run_export`` is
handed, and a fresh ``output_dir`` for the export.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from jobs.predict.spec import ModelRef
from jobs.specs.run import DataSpec, RunSpec
from tests import tiny_models
from tests.playground_support import train_tiny

KINDS = ("text-classification", "text-pair-classification", "multi-label-classification", "token-classification",
         "question-answering", "masked-lm", "setfit")
_TASKS = {"text-pair-classification": "text-classification", "multi-label-classification": "text-classification",
          "setfit": "text-classification"}
_PAIRS = [("a man is playing a guitar", "someone plays music", "entailment"),
          ("a man is playing a guitar", "the room is silent", "contradiction"),
          ("a woman reads a book", "someone is reading", "entailment"),
          ("a child sleeps", "the child runs in the park", "contradiction")]


@dataclasses.dataclass
class TinyRun:
    model: ModelRef  # as jobs.process.run_job.resolve_model builds it
    run_spec: RunSpec  # the run's spec, data paths resolved
    output_dir: Path  # an empty folder for the export job
    run_dir: Path  # the run's folder: model/, metrics.json, validation.jsonl


def validation(kind: str, rows: int = 12) -> list[dict]:
    """Validation records of ``kind`` in the task module's shape, with labels the tiny model knows."""
    if kind in ("text-classification", "setfit"):
        return tiny_models.classification_records(rows, seed=1)
    if kind == "multi-label-classification":
        return tiny_models.classification_records(rows, seed=1, multi_label=True)
    if kind == "text-pair-classification":
        return [{"text": a, "text_pair": b, "label": label} for a, b, label in (_PAIRS * rows)[:rows]]
    if kind == "token-classification":
        return tiny_models.ner_records(rows, seed=1)
    if kind == "question-answering":
        return tiny_models.qa_records(rows, seed=1)
    if kind == "masked-lm":
        return tiny_models.documents(rows, seed=1)
    raise ValueError(kind)


def build_model(kind: str, folder: Path) -> Path:
    """The tiny model of ``kind`` saved in ``folder`` (the run's ``model/``)."""
    if kind == "setfit":
        return _setfit_model(folder)
    base = "text-classification" if kind == "multi-label-classification" else kind
    train_tiny(base, folder)
    if kind == "multi-label-classification":  # the same head read with sigmoids: one decision per class
        config = json.loads((folder / "config.json").read_text())
        config["problem_type"] = "multi_label_classification"
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def _setfit_model(folder: Path) -> Path:
    import numpy as np

    from jobs.training.sentence_model import save_head

    tiny_models.tiny_bert(folder)
    rng = np.random.default_rng(0)
    save_head(folder, rng.normal(size=(2, 32)).astype("float32") * 5, np.zeros(2, "float32"), ["neg", "pos"],
              "mean", True, 64)
    return folder


def tiny_run(folder: Path, kind: str, *, rows: int = 12, model_source: Path | None = None, run_id: int = 1,
             run_dir: Path | None = None) -> TinyRun:
    """A finished run of ``kind`` (one of ``KINDS``) in ``run_dir`` (default ``folder/run``; the export's folder
    is ``folder/export``). ``model_source``: a model folder built earlier by ``build_model`` to copy instead of
    training one again; ``run_id``: the id the ``ModelRef`` carries (a Run row's, when a test inserts one)."""
    task = _TASKS.get(kind, kind)
    run_dir = run_dir or folder / "run"
    model_dir = run_dir / "model"
    if model_source is not None:
        shutil.copytree(model_source, model_dir)
    else:
        build_model(kind, model_dir)
    hyperparameters = {"max_length": 64, "doc_stride": 21, "max_answer_length": 30, "seed": 42,
                       "multi_label": kind == "multi-label-classification", "mlm_probability": 0.15,
                       "batch_size": 8, "method": "setfit" if kind == "setfit" else "finetune"}
    (run_dir / "metrics.json").write_text(json.dumps({"hyperparameters": hyperparameters}))
    records = validation(kind, rows)
    path = tiny_models.write_jsonl(run_dir / "validation.jsonl", records)
    run_spec = RunSpec(task=task, model=str(model_dir), data=DataSpec(train_path=str(path),
                                                                      validation_path=str(path)))
    labels = ("neg", "pos") if kind == "setfit" else tuple(
        json.loads((model_dir / "config.json").read_text()).get("id2label", {}).values())
    model = ModelRef(run_id=run_id, task=task, model_dir=str(model_dir), hyperparameters=hyperparameters, labels=labels)
    output_dir = folder / "export"
    output_dir.mkdir(parents=True, exist_ok=True)
    return TinyRun(model, run_spec, output_dir, run_dir)
