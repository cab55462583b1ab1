"""One module per task; each holds pure preprocessing, metrics and post-processing.

Every task module exposes the same small surface that ``jobs.training.engine`` drives:

    MAIN_METRIC                      the metric early stopping and "best checkpoint" follow
    prepare(train, validation, tokenizer, config, hp) -> Prepared
    build_model(path, prepared, config) -> model
    evaluate(prepared, predictions) -> Evaluation

The pure functions (label alignment, feature building, span search, masking) are
module-level with explicit inputs so tests drive them with hand-written data.
"""
from __future__ import annotations

TASK_MODULES = {
    "text-classification": "jobs.tasks.classification",
    "token-classification": "jobs.tasks.token_classification",
    "question-answering": "jobs.tasks.qa",
    "masked-lm": "jobs.tasks.mlm",
    "mlm+nsp": "jobs.tasks.pretraining",
}


def task_module(task: str, objective: str = "mlm"):
    """The module that implements ``task`` (the mlm+nsp objective has its own)."""
    import importlib

    key = "mlm+nsp" if task == "masked-lm" and objective == "mlm+nsp" else task
    return importlib.import_module(TASK_MODULES[key])
