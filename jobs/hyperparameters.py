"""Default hyper-parameters: the task, the model size and the data size pick them, the user tunes nothing.

Measured here with the packaged MiniLM: 5e-5 underfits NER and QA on a small
model (1e-4 gave +16 entity F1 on WNUT-16 and +22 F1 on SQuAD), while
classification is best at 5e-5 (SMS 0.993 vs 0.980 at 1e-4). Larger models
want smaller rates. LoRA trains few parameters and needs a larger rate.
"""
from __future__ import annotations

import math

PRESETS = ("quick", "standard", "thorough")
SMALL, BASE = 100_000_000, 200_000_000  # parameter counts separating small / base / large

_LR = {  # task family → (small, base, large)
    "classification": (5e-5, 3e-5, 2e-5),
    "span": (1e-4, 5e-5, 3e-5),  # token classification and QA
    "mlm": (1e-4, 5e-5, 3e-5),
}
_TASK_FAMILY = {"text-classification": "classification", "token-classification": "span",
                "question-answering": "span", "masked-lm": "mlm"}
_MAX_LENGTH = {"text-classification": 128, "token-classification": 128, "question-answering": 384, "masked-lm": 128}
# quick = one full epoch on at most this many training examples (a seeded sample of larger sets).
# 100 steps (0.4 epoch of 2,000 reviews) left a model at chance level; one epoch on 2,000 examples
# reaches most of the standard preset's score in a fraction of its time (README, "Presets").
QUICK_MAX_EXAMPLES = 2000
MIN_STEPS_PER_EPOCH = 250


def size_class(parameters: int) -> int:
    """0 small, 1 base, 2 large (unknown sizes count as base)."""
    if not parameters:
        return 1
    return 0 if parameters < SMALL else (1 if parameters < BASE else 2)


def default_epochs(preset: str, n_train: int) -> float:
    """More data needs fewer passes; 'thorough' trains longer and relies on early stopping."""
    base = 3.0 if n_train < 50_000 else (2.0 if n_train < 200_000 else 1.0)
    return {"quick": 1.0, "standard": base, "thorough": base + 2}[preset]


def train_examples_cap(preset: str, explicit: int | None) -> int | None:
    """How many training examples a run uses at most: the spec's value, else 2,000 for quick, else all."""
    if explicit:
        return int(explicit)
    return QUICK_MAX_EXAMPLES if preset == "quick" else None


def examples_used(n_train: int, cap: int | None) -> int:
    return min(n_train, cap) if cap else n_train


def evaluations_during_training(hp: dict, steps_per_epoch: int) -> int:
    """How many evaluations the Trainer runs before the engine's final one on the best model.

    Every epoch (or every ``eval_steps``), except for a single epoch without early stopping: its one
    evaluation would pick the only checkpoint as the best and then be repeated by the final
    evaluation, which on a large validation set doubles the time spent after the last step.
    """
    max_steps, eval_steps = hp.get("max_steps"), hp.get("eval_steps")
    total = max_steps or math.ceil(steps_per_epoch * hp["epochs"])
    if max_steps or eval_steps:
        return max(1, total // (eval_steps or min(steps_per_epoch, total)))
    if hp["epochs"] <= 1 and not hp.get("early_stopping_patience"):
        return 0
    return math.ceil(hp["epochs"])


def default_batch_size(n_train: int) -> int:
    """16, or 8 when batches of 16 would give fewer than MIN_STEPS_PER_EPOCH updates an epoch.

    Small datasets learn more from more, smaller steps (Mosbach et al., 2021, on
    fine-tuning stability). SMS, 2,000 messages, 1 epoch, seeds 42/1/2/3: batch 8
    scored 0.9892/0.9875/0.9839/0.9857, batch 16 0.9839/0.9839/0.9857/0.9857.
    """
    return 8 if n_train < 16 * MIN_STEPS_PER_EPOCH else 16


def resolve_hyperparameters(spec, model_info, n_train: int) -> dict:
    """Every hyper-parameter of a run, explicit values from the spec winning over defaults."""
    train, task = spec.train, spec.task
    preset = train.preset if train.preset in PRESETS else "standard"
    family = _TASK_FAMILY[task]
    lr = train.learning_rate or _LR[family][size_class(model_info.parameters)]
    if spec.lora.enabled and not train.learning_rate:
        lr = min(lr * 10, 1e-3)
    cap = train_examples_cap(preset, train.max_train_examples)
    n_used = examples_used(n_train, cap)  # batch size and epochs follow the data the run really sees
    batch = train.batch_size or default_batch_size(n_used)
    epochs = train.epochs if train.epochs is not None else default_epochs(preset, n_used)
    max_steps = train.max_steps
    patience = train.early_stopping_patience
    if patience is None:
        patience = 2 if preset == "thorough" else 0
    return {
        "preset": preset,
        "learning_rate": lr,
        "batch_size": batch,
        "epochs": float(epochs),
        "max_steps": max_steps,
        "max_train_examples": cap,
        "gradient_accumulation_steps": train.gradient_accumulation_steps,
        "max_length": train.max_length or _MAX_LENGTH[task],
        "warmup_ratio": train.warmup_ratio,
        "weight_decay": train.weight_decay,
        "seed": train.seed,
        "early_stopping_patience": patience,
        "eval_steps": train.eval_steps,
        "class_weights": train.class_weights,
        "multi_label": train.multi_label,
        "label_all_subtokens": train.label_all_subtokens,
        "doc_stride": train.doc_stride,
        "max_answer_length": train.max_answer_length,
        "whole_word_masking": train.whole_word_masking,
        "mlm_probability": train.mlm_probability,
        "objective": train.objective,
        "precision": train.precision,
        "select_by": train.select_by,
        "lora": spec.lora.enabled,
    }
