"""Default hyper-parameters: the task, the model size and the data size pick them, the user tunes nothing.

Measured here with the packaged MiniLM: 5e-5 underfits NER and QA on a small
model (1e-4 gave +16 entity F1 on WNUT-16 and +22 F1 on SQuAD), while
classification is best at 5e-5 (SMS 0.993 vs 0.980 at 1e-4). Larger models
want smaller rates. LoRA trains few parameters and needs a larger rate.

Small data is where defaults fail quietly: one epoch of 300 examples is 34 optimiser steps, and
the model ends at the majority class (TREC-6, 300 questions: accuracy 0.30). So every preset has
a floor on optimiser steps (``MIN_STEPS``): a small set gets as many epochs as the floor needs, up
to ``MAX_EPOCHS``, evaluated about ``SMALL_DATA_EVALUATIONS`` times. With enough validation examples
to rank checkpoints (``MIN_VALIDATION_TO_SELECT``) the one of the best validation score (ties: the
later one) is kept and early stopping ends the run once the score drops for good; with fewer,
the run trains to the floor and keeps the last checkpoint. Either way a set that is easy for the
model ends sooner: once every one of at least ``MIN_VALIDATION_TO_LEARN`` validation examples is
right with a mean loss below ``LEARNED_LOSS``, the rate is annealed to 0 over one more evaluation
interval and the run stops there (``jobs.training.trainer.StopWhenLearned``). The rate stays the task's: the floor,
not a larger rate, is what small sets need. Below about
``SETFIT_MAX_PER_CLASS`` examples per class, "auto" trains text classification with SetFit
instead (``choose_method``).
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
# Small data keeps these rates: the step floor, not a larger rate, is what makes a small set learn.
# Measured with MiniLM on TREC-6 (test file): 1,000 questions 0.914 at 5e-5 vs 0.886 at 1e-4 (seed 0);
# 300 questions 0.879 vs 0.866 (seed 1). SMS at 300 went the other way by less (0.982 vs 0.991, seed 1).
_TASK_FAMILY = {"text-classification": "classification", "token-classification": "span",
                "question-answering": "span", "masked-lm": "mlm"}
_MAX_LENGTH = {"text-classification": 128, "token-classification": 128, "question-answering": 384, "masked-lm": 128}


# Chunking: "auto" reads long texts in windows once at least this share of the training texts is longer than
# the window (docs/training.md, "Long documents"). Below it the few long texts lose little to truncation and a
# run stays as fast as before; at it, a fifth of the training signal would be cut away.
CHUNK_SHARE = 0.2


def chunking_choice(task: str, requested: str, long_share: float | None, max_length: int,
                    method: str = "finetune") -> tuple[str, str]:
    """(pooling or "off", why) for ``train.chunking``: "auto" turns mean pooling on for text classification
    when ``long_share`` (of the training texts, longer than ``max_length`` tokens) reaches ``CHUNK_SHARE``."""
    if task != "text-classification" or method != "finetune":
        return "off", ""
    share = f"{long_share:.0%} of the training texts are longer than {max_length} tokens" \
        if long_share is not None else ""
    if requested == "off":
        return "off", ""
    if requested != "auto":
        return requested, (f"long texts read in windows of {max_length} tokens, {requested} pooling, as the spec asks"
                           + (f" ({share})" if share else ""))
    if long_share is None or long_share < CHUNK_SHARE:
        return "off", ""
    return "mean", (f"{share}, so each is read in overlapping windows of {max_length} tokens and the windows' "
                    f"scores averaged (chunking; at least {CHUNK_SHARE:.0%} turns it on)")


def max_length_for(task: str) -> int:
    """The tokens of a text a run of ``task`` reads when its spec sets no ``max_length``."""
    return _MAX_LENGTH.get(task, 128)


# quick = one full epoch on at most this many training examples (a seeded sample of larger sets).
# 100 steps (0.4 epoch of 2,000 reviews) left a model at chance level; one epoch on 2,000 examples
# reaches most of the standard preset's score in a fraction of its time (docs/training.md, "Defaults and presets").
QUICK_MAX_EXAMPLES = 2000
MIN_STEPS_PER_EPOCH = 250
# Optimiser steps each preset takes at least (quick's floor is one epoch of its 2,000-example sample,
# so large data keeps quick as fast as before), and the most epochs a floor may ask for.
MIN_STEPS = {"quick": 250, "standard": 400, "thorough": 600}
# The floor may ask for this many passes (32 sentences at batch 8: 4 steps an epoch, 100 epochs reach 400 steps).
# At 30, WNUT-16 with 32 sentences stopped at 120 steps: entity F1 0.047/0.058/0.142 (seeds 0-2) against
# 0.108/0.226/0.190 at 400 steps, the only cell where the default fell below frozen embeddings + LR (0.090).
MAX_EPOCHS = 100
SMALL_DATA_PATIENCE = 3  # evaluations below the best validation score before a small-data run stops
# Below this many validation examples a small-data run picks no checkpoint and does not stop early: the
# loss of 10 examples rises (over-confidence) while accuracy still improves. TREC-6, 100 questions:
# early stopping on that loss kept step 96 of 360 (accuracy 0.728); the last checkpoint scored 0.803.
MIN_VALIDATION_TO_SELECT = 100
# ... and below this many examples in all (training and validation) it picks none either, even from the 100
# validation examples the split rule holds out at 400-999 examples (storage.datasets.split): those serve the
# score's interval and the calibration, but picking one of 10 checkpoints on them, with early stopping, kept
# earlier and worse ones. 500 examples, seeds 0/1/2 (bench/results/small_data_split_rule.json): TREC-6
# 0.886/0.884/0.903 picking (one run had stopped at step 200 of 400) against 0.895/0.895/0.912 keeping the
# last; VADER amazon 0.848/0.859/0.801 against 0.839/0.856/0.820. A tenth held out (50): 0.903 and 0.841.
MIN_EXAMPLES_TO_SELECT = 1000
SMALL_DATA_EVALUATIONS = 10  # evaluations (and checkpoints) of a small-data run that picks a checkpoint
# Without selection a split big enough to show it is learned (``MIN_VALIDATION_TO_LEARN``) is still small enough
# to cost little to evaluate: 20 times, so that a learned split is seen early, with a checkpoint (only for a
# resume after a crash) at every fourth; a smaller one 5 times, each with a checkpoint.
TINY_VALIDATION_EVALUATIONS, TINY_VALIDATION_SAVE_EVERY = 20, 4
# A small-data run whose validation split is learned — every example right (the task metric at its best value)
# and the mean validation loss below this — anneals its rate to 0 over one more evaluation interval and stops.
# The floor is there for sets that are slow to learn; an easy one learns in a fraction of it and then only grows
# surer. SMS spam, 300 messages (30 validation), seeds 0/1/2: learned at step 84 of 408 and stopped at 105, test
# accuracy 0.986/0.987/0.987 in 51 s (mean) against 0.982/0.982/0.980 in 138 s at the floor's end; TREC-6 at 300
# questions never learns its split and trains to the floor (0.885, against 0.754 for three plain epochs).
LEARNED_LOSS = 0.02
# ... judged on at least this many validation examples: all of 30 right bounds the error rate below 10 % (95 %,
# the rule of three); 3 WNUT-16 sentences with one entity would call a 32-sentence run learned at once.
MIN_VALIDATION_TO_LEARN = 30
METHODS = ("auto", "finetune", "setfit")
# "auto" picks SetFit for single-label text classification below this many training examples per class.
# Measured (seed 1, test files): TREC-6 100 questions (15 a class) SetFit 0.838 vs fine-tuning 0.803, 32
# (5 a class) 0.642 vs 0.526; at 45 a class fine-tuning matches or beats it (TREC 300: 0.85-0.88 vs
# 0.881 in a quarter of the time; SMS 100: 0.980 vs 0.939). SMS at 32 (14 a class, 4 spam) still
# favours fine-tuning (0.984 vs 0.946): a keyword task, where SetFit's sentence similarity helps least.
SETFIT_MAX_PER_CLASS = 25
# Fine-tuning a sentence-transformers model below this many training examples per class trains its own
# pooled sentence embedding, the head started from a logistic regression on it (``sentence_head``); above
# it, the [CLS] classifier. Probe runs with MiniLM (test files, seeds 0/1/2, sentence head vs [CLS]):
# TREC-6 300 questions (45 a class) 0.903/0.892/0.893 vs 0.888/0.875/0.893; SMS 100 (45 a class)
# 0.982/0.980/0.984 vs 0.982/0.980/0.986. Up to 1,000 examples (2026-12-07, bench/results/small_data_head.json,
# means of 3 seeds, head vs [CLS]): Amazon 300 0.810 vs 0.804, Amazon 1,000 0.859 vs 0.849, SMS 300 0.986 vs
# 0.987, SMS 1,000 0.989 vs 0.984, TREC-6 1,000 (150 a class) 0.915 vs 0.913: never more than 0.1 behind, and
# the Amazon cells come within 1 point of the best method. Above 500 a class (the full sets) it was not measured,
# so the [CLS] classifier stays there.
SENTENCE_HEAD_MAX_PER_CLASS = 500
SENTENCE_HEAD_WHY = "under 500 examples per class, so the head reads the model's pooled sentence embedding"


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


# A checkpoint that only serves a resume (no checkpoint is selected at the end) is written once the training since
# the last one took at least this many times as long as writing that one: checkpoints then take at most about a
# tenth of a run's time (jobs.training.trainer.PaceCheckpoints). A MiniLM checkpoint, its optimizer state
# included, is about 270 MB and took 2 s on the 2-core CPU: a 90-example run wrote one per epoch, 6 s of its 10 s
# of training.
CHECKPOINT_PACE = 10.0


def selects_checkpoint(hp: dict, steps_per_epoch: int) -> bool:
    """Whether the run keeps its best evaluated checkpoint at the end (every evaluated one is then written)."""
    return evaluations_during_training(hp, steps_per_epoch) > 0 and hp.get("select_by", "metric") != "last"


def paced_checkpoints(planned: int, train_seconds: float, checkpoint_seconds: float) -> int:
    """How many of ``planned`` resume-only checkpoints a run writes (``CHECKPOINT_PACE``): the first, then one each
    time the training since the last took ``CHECKPOINT_PACE`` times as long as writing one."""
    if planned <= 1 or checkpoint_seconds <= 0:
        return planned
    return max(1, min(planned, 1 + int(train_seconds // (CHECKPOINT_PACE * checkpoint_seconds))))


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


def is_sentence_model(path: str) -> bool:
    """Whether ``path`` is a local sentence-transformers folder (``modules.json``), as SetFit wants."""
    from pathlib import Path

    return (Path(path) / "modules.json").is_file()


def floor_epochs(preset: str, n_train: int, batch_size: int, accumulation: int = 1) -> int:
    """The epochs ``MIN_STEPS[preset]`` optimiser steps need on ``n_train`` examples (at most ``MAX_EPOCHS``)."""
    per_epoch = max(1, math.ceil(math.ceil(max(1, n_train) / batch_size) / max(1, accumulation)))
    return min(MAX_EPOCHS, math.ceil(MIN_STEPS[preset] / per_epoch))


def choose_method(task: str, requested: str, n_train: int, n_classes: int, *, multi_label: bool = False,
                  pairs: bool = False, lora: bool = False, sentence_model: bool = True) -> tuple[str, str]:
    """(method, why): "finetune" or "setfit" for the spec's "auto", "finetune" or "setfit".

    SetFit (contrastive pairs, then a logistic-regression head) learns from a handful of examples per
    class where fine-tuning a classification head has too few steps to move; above about
    ``SETFIT_MAX_PER_CLASS`` examples per class fine-tuning catches up and scales better. It takes single
    texts with one label; pairs, multi-label data and LoRA stay with fine-tuning. Its encoder should be a
    sentence-transformers model (trained to embed sentences, as the packaged default is): "auto" fine-tunes
    any other model (``sentence_model`` False), where mean-pooled token states make a weak start.
    """
    if requested not in METHODS:
        raise ValueError(f"unknown method {requested!r}; choose one of {', '.join(METHODS)}")
    if task != "text-classification":
        return "finetune", ""
    if requested != "auto":
        return requested, "chosen in the run spec"
    per_class = n_train / max(1, n_classes)
    if multi_label or pairs or lora:
        kind = "multi-label data" if multi_label else ("text pairs" if pairs else "LoRA")
        return "finetune", f"{kind}: SetFit takes single texts with one label"
    if per_class >= SETFIT_MAX_PER_CLASS:
        return "finetune", f"{per_class:.0f} examples per class: fine-tuning"
    if not sentence_model:
        return "finetune", (f"{per_class:.0f} examples per class, but the model is no sentence-transformers "
                            "model, which SetFit needs")
    return "setfit", (f"{per_class:.0f} examples per class (< {SETFIT_MAX_PER_CLASS}): SetFit learns more "
                      "from few examples")


def sentence_head(task: str, method: str, per_class: float, *, multi_label: bool, pairs: bool, lora: bool,
                  sentence_model: bool) -> bool:
    """Whether a fine-tuning run trains the model's own pooled sentence embedding with a linear head
    (``jobs.training.sentence_head.build_sentence_classifier``) rather than a new classifier on the [CLS] state:
    below ``SENTENCE_HEAD_MAX_PER_CLASS`` examples per class, for single texts with one label and a
    sentence-transformers model, without LoRA (whose adapters and saved heads follow the transformers classes)."""
    return (task == "text-classification" and method == "finetune" and sentence_model
            and per_class < SENTENCE_HEAD_MAX_PER_CLASS and not (multi_label or pairs or lora))


def head_for(spec, n_train: int, n_classes: int, method: str, *, multi_label: bool, pairs: bool,
             sentence_model: bool) -> bool:
    """``sentence_head`` for a run spec on ``n_train`` examples (those the preset really trains on)."""
    n_used = examples_used(n_train, train_examples_cap(spec.train.preset, spec.train.max_train_examples))
    return sentence_head(spec.task, method, n_used / max(1, n_classes),
                         multi_label=multi_label or bool(spec.train.multi_label), pairs=pairs,
                         lora=spec.lora.enabled, sentence_model=sentence_model)


def method_for(spec, n_train: int, n_classes: int, *, multi_label: bool, pairs: bool,
               sentence_model: bool) -> tuple[str, str]:
    """``choose_method`` for a run spec on ``n_train`` examples: counts the examples the preset really trains on
    (the engine at run time and the estimates before submit both ask this)."""
    n_used = examples_used(n_train, train_examples_cap(spec.train.preset, spec.train.max_train_examples))
    return choose_method(spec.task, spec.train.method, n_used, n_classes,
                         multi_label=multi_label or bool(spec.train.multi_label), pairs=pairs,
                         lora=spec.lora.enabled, sentence_model=sentence_model)


def steps_and_epochs(steps: int, epochs: float, by_steps: bool) -> str:
    """``12 epoch(s), 408 steps``; when ``max_steps`` decides (``by_steps``) the epochs follow from the steps, so
    the line says what the run really does: ``30 steps (0.44 epoch)``, not the epochs it will not run."""
    if not by_steps:
        return f"{epochs:g} epoch(s), {steps:,} steps"
    return f"{steps:,} steps ({round(epochs, 2):g} epoch{'s' if epochs > 1 else ''})"


def resolve_hyperparameters(spec, model_info, n_train: int, method: str = "finetune",
                            n_validation: int | None = None) -> dict:
    """Every hyper-parameter of a run, explicit values from the spec winning over defaults.

    ``n_validation`` defaults to the engine's own split (a tenth of the data). ``hp["why"]`` says in one
    line what the data made the defaults choose, for the Train form and the log.
    """
    train, task = spec.train, spec.task
    preset = train.preset if train.preset in PRESETS else "standard"
    family = _TASK_FAMILY[task]
    cap = train_examples_cap(preset, train.max_train_examples)
    n_used = examples_used(n_train, cap)  # batch size and epochs follow the data the run really sees
    if method == "setfit":
        return _setfit_hyperparameters(spec, preset, cap, n_used)
    lr = train.learning_rate or _LR[family][size_class(model_info.parameters)]
    batch = train.batch_size or default_batch_size(n_used)
    epochs = train.epochs if train.epochs is not None else default_epochs(preset, n_used)
    max_steps = train.max_steps
    small_data = False
    if train.epochs is None and not max_steps:
        needed = floor_epochs(preset, n_used, batch, train.gradient_accumulation_steps)
        small_data = needed > epochs
        epochs = max(epochs, needed)
    if spec.lora.enabled and not train.learning_rate:
        lr = min(lr * 10, 1e-3)
    if n_validation is None:
        n_validation = max(1, n_used // 9)  # the engine holds out a tenth of the data it was given
    too_few_in_all = n_used + n_validation < MIN_EXAMPLES_TO_SELECT
    tiny_validation = small_data and (n_validation < MIN_VALIDATION_TO_SELECT or too_few_in_all)
    patience = train.early_stopping_patience
    if patience is None:
        patience = (0 if tiny_validation else SMALL_DATA_PATIENCE) if small_data else (2 if preset == "thorough" else 0)
    select_by = train.select_by
    if select_by == "auto":
        # the task metric, ties going to the later checkpoint (jobs.training.trainer.MetricThenLater); a few dozen
        # validation examples rank nothing. Ranking by loss alone stopped too early: TREC-6, 1,000
        # questions, stopped at step 276 of 452 (accuracy 0.886; the plain Trainer's 3 epochs 0.901), and
        # so did ties broken by the lower loss: SMS, 1,000 messages, step 230 of 452 (0.978; later: 0.980)
        select_by = "last" if tiny_validation else "metric"
    steps = math.ceil(math.ceil(n_used / batch) / train.gradient_accumulation_steps * epochs)
    # the floor's extra epochs end once the validation split is learned (jobs.training.trainer.StopWhenLearned)
    stop_when_learned = (small_data and n_validation >= MIN_VALIDATION_TO_LEARN
                         and task in ("text-classification", "token-classification"))
    eval_steps, save_steps = train.eval_steps, None
    if small_data and eval_steps is None:
        # an evaluation and a checkpoint after each of 30 short epochs cost more than the training (WNUT-16,
        # 32 sentences: 120 steps took 238 s); a few evaluations spread over the run are enough to pick one
        if not tiny_validation:
            eval_steps = math.ceil(steps / SMALL_DATA_EVALUATIONS)
        elif stop_when_learned and select_by == "last":  # a picked checkpoint must have been saved
            eval_steps = math.ceil(steps / TINY_VALIDATION_EVALUATIONS)
            save_steps = eval_steps * TINY_VALIDATION_SAVE_EVERY
        else:
            eval_steps = math.ceil(steps / (SMALL_DATA_EVALUATIONS // 2))
    per_epoch = max(1, math.ceil(math.ceil(n_used / batch) / train.gradient_accumulation_steps))
    done = steps_and_epochs(max_steps or steps, max_steps / per_epoch if max_steps else epochs, bool(max_steps))
    why = f"{n_used:,} examples: {done}, lr {lr:g}"
    if small_data:
        why += f" — few examples, so at least {MIN_STEPS[preset]} steps"
        if stop_when_learned:
            why += ", fewer once every validation example is learned"
        if tiny_validation and select_by == "last" and n_validation >= MIN_VALIDATION_TO_SELECT:
            why += (f"; under {MIN_EXAMPLES_TO_SELECT:,} examples no checkpoint is picked on the {n_validation} "
                    "validation examples (they give the score's interval and the calibration), so the last "
                    "one is kept")
        elif tiny_validation and select_by == "last":
            why += (f"; {n_validation} validation examples are too few to pick a checkpoint, so the last one "
                    "is kept")
        elif tiny_validation:
            why += f"; the checkpoint of the best validation {select_by} is kept, as the spec asks"
        else:
            why += f"; early stopping after {patience} evaluations without a better validation score"
    return {
        "method": "finetune",
        "why": why,
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
        "eval_steps": eval_steps,
        "save_steps": save_steps,
        "stop_when_learned": stop_when_learned,
        "class_weights": train.class_weights,
        "multi_label": train.multi_label,
        "label_all_subtokens": train.label_all_subtokens,
        "doc_stride": train.doc_stride,
        "max_answer_length": train.max_answer_length,
        "whole_word_masking": train.whole_word_masking,
        "mlm_probability": train.mlm_probability,
        "objective": train.objective,
        "precision": train.precision,
        "select_by": select_by,
        "lora": spec.lora.enabled,
        # resolved by the engine once it has measured the training texts (chunking_choice)
        "chunking": getattr(train, "chunking", "off") if task == "text-classification" else "off",
        "chunk_stride": getattr(train, "chunk_stride", None),
        "max_windows": getattr(train, "max_windows", 16),
    }


# SetFit: pairs of training texts (same class or not) tune the sentence encoder, then a logistic
# regression is fitted on its embeddings. SetFit's own defaults (body lr 2e-5, batch 16 pairs); the
# number of pairs follows the data, within a budget that keeps a CPU run to a few minutes.
SETFIT_LR = 2e-5
SETFIT_BATCH = 16
SETFIT_PAIRS_PER_EXAMPLE = 20  # SetFit's num_iterations: 20 positive and 20 negative pairs per text ...
SETFIT_MIN_STEPS, SETFIT_MAX_STEPS = 100, 500  # ... within these many optimiser steps


def _setfit_hyperparameters(spec, preset: str, cap: int | None, n_used: int) -> dict:
    train = spec.train
    batch = train.batch_size or SETFIT_BATCH
    pairs = 2 * SETFIT_PAIRS_PER_EXAMPLE * n_used
    steps = train.max_steps or min(SETFIT_MAX_STEPS, max(SETFIT_MIN_STEPS, math.ceil(pairs / batch)))
    if train.epochs is not None and not train.max_steps:
        steps = max(1, math.ceil(steps * train.epochs))
    lr = train.learning_rate or SETFIT_LR
    return {
        "method": "setfit",
        "why": (f"{n_used:,} examples: SetFit, {steps:,} steps of {batch} text pairs, lr {lr:g}, then a "
                "logistic-regression head"),
        "preset": preset, "learning_rate": lr, "batch_size": batch, "epochs": 1.0, "max_steps": steps,
        "max_train_examples": cap, "gradient_accumulation_steps": 1,
        "max_length": train.max_length or _MAX_LENGTH[spec.task], "warmup_ratio": train.warmup_ratio,
        "weight_decay": train.weight_decay, "seed": train.seed, "early_stopping_patience": 0,
        "eval_steps": None, "class_weights": train.class_weights, "multi_label": False,
        "precision": train.precision, "select_by": "last", "lora": False, "chunking": "off",
    }
