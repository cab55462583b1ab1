"""The defaults: task, model size and data size pick them; explicit values win."""
import pytest

from jobs.training.catalogue import ModelInfo
from jobs.specs.hyperparameters import QUICK_MAX_EXAMPLES, paced_checkpoints, resolve_hyperparameters
from jobs.specs.run import DataSpec, LoraSpec, RunSpec, TrainSpec

SMALL = ModelInfo("mini", "x", "bert", 6, 384, 12, 22_700_000)
BASE = ModelInfo("base", "x", "bert", 12, 768, 12, 110_000_000)
LARGE = ModelInfo("large", "x", "bert", 24, 1024, 16, 335_000_000)


def _spec(task="text-classification", **train):
    return RunSpec(task=task, data=DataSpec(train_path="t.jsonl"), train=TrainSpec(**train))


@pytest.mark.parametrize("task,model,lr", [
    ("text-classification", SMALL, 5e-5), ("token-classification", SMALL, 1e-4), ("question-answering", SMALL, 1e-4),
    ("text-classification", BASE, 3e-5), ("token-classification", BASE, 5e-5), ("text-classification", LARGE, 2e-5),
])
def test_learning_rate_follows_task_and_model_size(task, model, lr):
    assert resolve_hyperparameters(_spec(task), model, 2000)["learning_rate"] == lr


def test_standard_defaults():
    hp = resolve_hyperparameters(_spec(), SMALL, 10_000)
    assert (hp["batch_size"], hp["epochs"], hp["warmup_ratio"], hp["weight_decay"], hp["max_length"]) == (16, 3.0, 0.06, 0.01, 128)
    assert hp["max_steps"] is None and hp["early_stopping_patience"] == 0


def test_data_size_drives_epochs_and_batch():
    assert resolve_hyperparameters(_spec(), SMALL, 100_000)["epochs"] == 2.0
    assert resolve_hyperparameters(_spec(), SMALL, 300_000)["epochs"] == 1.0
    # fewer than 250 steps an epoch at batch 16 → batch 8
    assert [resolve_hyperparameters(_spec(), SMALL, n)["batch_size"] for n in (100, 2000, 3999, 4000)] == [8, 8, 8, 16]


def test_presets():
    # quick: one full epoch (no step cap) on at most QUICK_MAX_EXAMPLES examples
    quick = resolve_hyperparameters(_spec(preset="quick"), SMALL, 100_000)
    assert quick["epochs"] == 1.0 and quick["max_steps"] is None and quick["max_train_examples"] == QUICK_MAX_EXAMPLES
    assert quick["batch_size"] == 8  # chosen for the 2,000 examples it sees, not the 100,000 there are
    assert resolve_hyperparameters(_spec(preset="quick", max_train_examples=500), SMALL, 9000)["max_train_examples"] == 500
    standard = resolve_hyperparameters(_spec(), SMALL, 100_000)
    assert standard["max_train_examples"] is None and standard["epochs"] == 2.0
    thorough = resolve_hyperparameters(_spec(preset="thorough"), SMALL, 2000)
    assert thorough["epochs"] == 5.0 and thorough["early_stopping_patience"] == 2


def test_explicit_values_win():
    hp = resolve_hyperparameters(_spec(learning_rate=1e-3, batch_size=4, epochs=7, max_length=64), BASE, 2000)
    assert (hp["learning_rate"], hp["batch_size"], hp["epochs"], hp["max_length"]) == (1e-3, 4, 7.0, 64)


def test_lora_raises_the_default_rate_only():
    spec = RunSpec(task="text-classification", data=DataSpec(train_path="t"), lora=LoraSpec(enabled=True))
    assert resolve_hyperparameters(spec, SMALL, 2000)["learning_rate"] == 5e-4
    spec.train.learning_rate = 2e-5
    assert resolve_hyperparameters(spec, SMALL, 2000)["learning_rate"] == 2e-5


def test_qa_has_a_longer_window():
    assert resolve_hyperparameters(_spec("question-answering"), SMALL, 500)["max_length"] == 384


def test_subsample_is_seeded_ordered_and_capped():
    from jobs.training.data import subsample

    records = [{"i": i} for i in range(5000)]
    sample = subsample(records, QUICK_MAX_EXAMPLES, seed=42)
    assert len(sample) == QUICK_MAX_EXAMPLES and sample == subsample(records, QUICK_MAX_EXAMPLES, seed=42)
    assert [r["i"] for r in sample] == sorted(r["i"] for r in sample)  # file order kept
    assert sample != subsample(records, QUICK_MAX_EXAMPLES, seed=1)
    assert subsample(records[:100], QUICK_MAX_EXAMPLES, seed=42) == records[:100]
    assert subsample(records, None, seed=42) is records


def test_a_single_epoch_is_evaluated_once_at_the_end():
    from jobs.specs.hyperparameters import evaluations_during_training

    quick = resolve_hyperparameters(_spec(preset="quick"), SMALL, 5000)
    assert evaluations_during_training(quick, 250) == 0  # the final evaluation is the only one
    assert evaluations_during_training(resolve_hyperparameters(_spec(), SMALL, 5000), 313) == 3
    thorough_one = resolve_hyperparameters(_spec(preset="thorough", epochs=1), SMALL, 5000)
    assert evaluations_during_training(thorough_one, 313) == 1  # early stopping needs its evaluations
    by_steps = resolve_hyperparameters(_spec(preset="quick", max_steps=8, eval_steps=2), SMALL, 5000)
    assert evaluations_during_training(by_steps, 250) == 4


# ---- small data: a floor on optimiser steps, early stopping on the validation loss (issue: defaults that learn)

@pytest.mark.parametrize("n,preset,epochs", [
    (270, "standard", 12),    # 34 steps an epoch at batch 8: 12 epochs reach the 400-step floor
    (90, "standard", 34),     # 12 steps an epoch: 34 epochs reach the floor
    (10, "standard", 100),    # 2 steps an epoch: the floor would need 200, capped at MAX_EPOCHS
    (1350, "standard", 3),    # 169 steps an epoch: 3 epochs are 507 steps, above the floor
    (2000, "quick", 1),       # quick on large data stays one epoch of its 2,000-example sample
    (100_000, "quick", 1),
    (900, "quick", 3),        # 113 steps an epoch: 250 steps need 3
    (270, "thorough", 18),    # 600 steps
])
def test_small_sets_get_enough_epochs_to_reach_the_step_floor(n, preset, epochs):
    import math

    from jobs.specs.hyperparameters import MAX_EPOCHS, MIN_STEPS

    hp = resolve_hyperparameters(_spec(preset=preset, method="finetune"), SMALL, n)
    assert hp["epochs"] == epochs
    steps = math.ceil(n / hp["batch_size"]) * hp["epochs"]
    assert steps >= MIN_STEPS[preset] or hp["epochs"] == MAX_EPOCHS


def test_a_raised_floor_stops_early_on_the_validation_score_and_says_why():
    # 1,000 examples: the engine's split holds out 100, enough to pick a checkpoint
    hp = resolve_hyperparameters(_spec(method="finetune"), SMALL, 900, n_validation=100)
    assert hp["early_stopping_patience"] == 3 and hp["select_by"] == "metric"
    assert hp["why"].startswith("900 examples: 4 epoch(s), 452 steps, lr ")
    assert "at least 400 steps" in hp["why"] and "early stopping" in hp["why"]


def test_under_a_thousand_examples_the_100_held_out_pick_no_checkpoint():
    # 500 examples hold out 100 (storage.datasets.split): the interval and the calibration use them, but picking
    # a checkpoint on them kept earlier, worse ones (bench/results/small_data_split_rule.json)
    hp = resolve_hyperparameters(_spec(method="finetune"), SMALL, 400, n_validation=100)
    assert hp["early_stopping_patience"] == 0 and hp["select_by"] == "last"
    assert ("under 1,000 examples no checkpoint is picked on the 100 validation examples (they give the score's "
            "interval and the calibration), so the last one is kept") in hp["why"]
    assert resolve_hyperparameters(_spec(method="finetune"), SMALL, 899, n_validation=100)["select_by"] == "last"
    assert resolve_hyperparameters(_spec(method="finetune"), SMALL, 270, n_validation=150)["select_by"] == "last"
    # what the spec asks still wins
    asked = resolve_hyperparameters(_spec(method="finetune", select_by="metric", early_stopping_patience=3), SMALL,
                                    400, n_validation=100)
    assert asked["select_by"] == "metric" and asked["early_stopping_patience"] == 3


def test_a_validation_split_too_small_to_rank_checkpoints_keeps_the_last_one():
    # 270 examples and the engine's own split: 30 validation examples
    hp = resolve_hyperparameters(_spec(method="finetune"), SMALL, 270)
    assert hp["early_stopping_patience"] == 0 and hp["select_by"] == "last" and hp["epochs"] == 12
    assert "30 validation examples are too few to pick a checkpoint" in hp["why"]
    assert resolve_hyperparameters(_spec(method="finetune"), SMALL, 270, n_validation=99)["select_by"] == "last"
    assert resolve_hyperparameters(_spec(method="finetune"), SMALL, 900, n_validation=99)["select_by"] == "last"
    assert resolve_hyperparameters(_spec(method="finetune"), SMALL, 900, n_validation=100)["select_by"] == "metric"
    large = resolve_hyperparameters(_spec(method="finetune"), SMALL, 10_000)
    assert large["early_stopping_patience"] == 0 and large["select_by"] == "metric"
    assert "at least" not in large["why"]


def test_explicit_epochs_steps_patience_and_selection_switch_the_floor_off():
    assert resolve_hyperparameters(_spec(epochs=1), SMALL, 270)["epochs"] == 1.0
    hp = resolve_hyperparameters(_spec(max_steps=50), SMALL, 270)
    assert hp["max_steps"] == 50 and hp["early_stopping_patience"] == 0
    hp = resolve_hyperparameters(_spec(early_stopping_patience=1, select_by="metric"), SMALL, 270, n_validation=20)
    assert hp["epochs"] == 12 and hp["early_stopping_patience"] == 1 and hp["select_by"] == "metric"


def test_small_data_keeps_the_rate_of_the_task_and_model_size():
    # the step floor makes a small set learn; a larger rate cost TREC-6 (1,000 questions) 2.8 points
    small = resolve_hyperparameters(_spec(), SMALL, 270)
    assert small["epochs"] == 12 and small["learning_rate"] == 5e-5
    assert resolve_hyperparameters(_spec(), BASE, 270)["learning_rate"] == 3e-5
    assert resolve_hyperparameters(_spec(learning_rate=1e-5), SMALL, 270)["learning_rate"] == 1e-5
    # token classification keeps its own (higher) rate for small models
    assert resolve_hyperparameters(_spec("token-classification"), SMALL, 270)["learning_rate"] == 1e-4


def test_setfit_hyperparameters_scale_pairs_with_the_data_within_a_budget():
    from jobs.specs.hyperparameters import SETFIT_MAX_STEPS, SETFIT_MIN_STEPS

    tiny = resolve_hyperparameters(_spec(), SMALL, 20, method="setfit")
    assert tiny["method"] == "setfit" and tiny["max_steps"] == SETFIT_MIN_STEPS and tiny["learning_rate"] == 2e-5
    assert resolve_hyperparameters(_spec(), SMALL, 100, method="setfit")["max_steps"] == 250  # 40 pairs x 100 / 16
    assert resolve_hyperparameters(_spec(), SMALL, 5000, method="setfit")["max_steps"] == SETFIT_MAX_STEPS
    assert resolve_hyperparameters(_spec(max_steps=7), SMALL, 5000, method="setfit")["max_steps"] == 7
    assert "SetFit" in tiny["why"]


def test_a_small_data_run_evaluates_a_few_times_not_after_each_short_epoch():
    from jobs.specs.hyperparameters import evaluations_during_training

    tiny = resolve_hyperparameters(_spec(method="finetune"), SMALL, 29)  # 100 epochs of 4 steps
    assert tiny["epochs"] == 100 and tiny["eval_steps"] == 80  # 400 steps, 5 evaluations of 3 examples
    assert evaluations_during_training(tiny, 4) == 5 and tiny["save_steps"] is None
    # 30 validation examples can show the split is learned: 20 cheap evaluations, a checkpoint at every fourth
    thirty = resolve_hyperparameters(_spec(method="finetune"), SMALL, 270)
    assert (thirty["eval_steps"], thirty["save_steps"]) == (21, 84) and evaluations_during_training(thirty, 34) == 19
    # a checkpoint picked by the loss (as an audit's folds are) must exist: 5 evaluations, each saved
    by_loss = resolve_hyperparameters(_spec(method="finetune", select_by="loss"), SMALL, 270)
    assert (by_loss["eval_steps"], by_loss["save_steps"], by_loss["stop_when_learned"]) == (82, None, True)
    assert "the checkpoint of the best validation loss is kept" in by_loss["why"]
    selecting = resolve_hyperparameters(_spec(method="finetune"), SMALL, 900, n_validation=100)
    assert selecting["eval_steps"] == 46 and evaluations_during_training(selecting, 113) == 9
    assert selecting["save_steps"] is None  # the picked checkpoint must exist: one at every evaluation
    assert resolve_hyperparameters(_spec(method="finetune", eval_steps=7), SMALL, 29)["eval_steps"] == 7
    assert resolve_hyperparameters(_spec(method="finetune"), SMALL, 10_000)["eval_steps"] is None


def _evaluate(callbacks, metrics):
    for callback in callbacks:
        callback.on_evaluate(None, None, None, metrics=metrics)
    return metrics


def test_checkpoints_rank_by_the_metric_and_equal_scores_by_the_later_step():
    from types import SimpleNamespace

    from jobs.training.trainer import MetricThenLater, SELECTION_KEY

    rank = MetricThenLater("accuracy", greater_is_better=True)
    key = f"eval_{SELECTION_KEY}"

    def at(step, metrics, callback=rank):
        callback.on_evaluate(None, SimpleNamespace(global_step=step, max_steps=452), None, metrics=metrics)
        return metrics[key]

    early = at(46, {"eval_accuracy": 0.87, "eval_loss": 0.30})
    tie_later = at(230, {"eval_accuracy": 0.87, "eval_loss": 0.45})  # surer of its mistakes: a higher loss
    better_early = at(92, {"eval_accuracy": 0.88, "eval_loss": 3.0})
    worse_last = at(452, {"eval_accuracy": 0.86, "eval_loss": 0.1})
    # the Trainer keeps the highest: a tie goes to the later step, whatever the loss; a point of metric beats any step
    assert worse_last < early < tie_later < better_early
    # a lower-is-better metric ranks the same way under the Trainer's "higher is better"
    lower = MetricThenLater("error", greater_is_better=False)
    assert at(40, {"eval_error": 0.1}, lower) > at(452, {"eval_error": 0.2}, lower)
    # without a trainer state (or before any step) the metric alone
    assert _evaluate([rank], {"eval_accuracy": 0.5})[key] == 0.5


def test_selection_by_a_metric_goes_through_the_tie_break_key_and_loss_ranks_by_itself():
    from jobs.training.trainer import SELECTION_KEY, training_arguments

    hp = resolve_hyperparameters(_spec(method="finetune"), SMALL, 900, n_validation=150)
    args = training_arguments("/tmp/unused", hp, "cpu", 900, "accuracy", True, ["labels"])
    assert args.metric_for_best_model == SELECTION_KEY and args.greater_is_better and args.load_best_model_at_end
    args = training_arguments("/tmp/unused", hp, "cpu", 900, "loss", False, ["labels"])
    assert args.metric_for_best_model == "loss" and not args.greater_is_better


def test_only_a_raised_floor_stops_once_the_validation_split_is_learned():
    small = resolve_hyperparameters(_spec(method="finetune"), SMALL, 270)
    assert small["stop_when_learned"] and "fewer once every validation example is learned" in small["why"]
    assert resolve_hyperparameters(_spec("token-classification"), SMALL, 270)["stop_when_learned"]
    assert resolve_hyperparameters(_spec(method="finetune"), SMALL, 270, n_validation=150)["stop_when_learned"]
    # all of 3 validation sentences right says little (one entity among them would do)
    few = resolve_hyperparameters(_spec("token-classification"), SMALL, 29)
    assert not few["stop_when_learned"] and "learned" not in few["why"]
    # large data, explicit epochs or steps: the run is as long as asked; QA ranks by loss, not a perfect score
    for hp in (resolve_hyperparameters(_spec(), SMALL, 10_000), resolve_hyperparameters(_spec(epochs=2), SMALL, 270),
               resolve_hyperparameters(_spec(max_steps=50), SMALL, 270),
               resolve_hyperparameters(_spec("question-answering"), SMALL, 270)):
        assert not hp["stop_when_learned"]


def test_the_shortened_schedule_falls_from_where_it_is_to_zero():
    import torch
    from transformers import get_linear_schedule_with_warmup

    from jobs.training.trainer import anneal_schedule

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=10, num_training_steps=400)
    before = [scheduler.lr_lambdas[0](step) for step in (5, 60)]
    assert anneal_schedule(scheduler, 60, 80)
    factor = scheduler.lr_lambdas[0]
    assert [factor(5), factor(60)] == before  # up to the cut, the schedule it had
    assert factor(70) == pytest.approx(before[1] / 2) and factor(80) == 0.0 and factor(90) == 0.0
    assert not anneal_schedule(torch.optim.lr_scheduler.StepLR(optimizer, 10), 60, 80)  # no factors to reshape


def test_stop_when_learned_waits_for_every_validation_example_and_a_low_loss():
    from types import SimpleNamespace

    from transformers import TrainerControl

    from jobs.training.trainer import StopWhenLearned

    args = SimpleNamespace(load_best_model_at_end=False)
    stop = StopWhenLearned("accuracy", loss_below=0.02, anneal_steps=21)

    def evaluate(step, accuracy, loss):
        stop.on_evaluate(args, SimpleNamespace(global_step=step, max_steps=408), TrainerControl(),
                         metrics={"eval_accuracy": accuracy, "eval_loss": loss})

    def step_end(step):
        return stop.on_step_end(args, SimpleNamespace(global_step=step), TrainerControl()).should_training_stop

    evaluate(21, 0.967, 0.01)   # one validation example wrong
    evaluate(42, 1.0, 0.05)     # all right, not yet sure of them
    assert stop.learned_at is None and not step_end(400)
    evaluate(63, 1.0, 0.019)
    evaluate(84, 0.9, 0.5)      # the first learned evaluation decides; later ones change nothing
    assert (stop.learned_at, stop.stop_at) == (63, 84)
    assert not step_end(83) and step_end(84)
    # near the end the floor's own last step comes first
    late = StopWhenLearned("entity_f1", loss_below=0.02, anneal_steps=21)
    late.on_evaluate(args, SimpleNamespace(global_step=400, max_steps=408), TrainerControl(),
                     metrics={"eval_entity_f1": 1.0, "eval_loss": 0.001})
    assert late.stop_at == 408
    # a run that picks its checkpoint evaluates and saves the annealed model, a candidate like any other
    picking = SimpleNamespace(load_best_model_at_end=True)
    control = late.on_step_end(picking, SimpleNamespace(global_step=408), TrainerControl())
    assert control.should_training_stop and control.should_evaluate and control.should_save


def test_the_why_line_says_the_epochs_max_steps_really_make():
    from jobs.specs.hyperparameters import steps_and_epochs

    hp = resolve_hyperparameters(_spec(max_steps=30, batch_size=8), SMALL, 544)
    assert hp["why"].startswith("544 examples: 30 steps (0.44 epoch), lr ")  # 68 steps an epoch
    assert resolve_hyperparameters(_spec(max_steps=170, batch_size=8), SMALL, 544)["why"].startswith(
        "544 examples: 170 steps (2.5 epochs), lr ")
    assert steps_and_epochs(408, 12.0, by_steps=False) == "12 epoch(s), 408 steps"


def test_an_estimate_counts_the_resume_only_checkpoints_a_run_will_write():
    # the first, then one per 10 times a checkpoint's writing time of training (jobs.specs.hyperparameters)
    assert paced_checkpoints(8, train_seconds=10.0, checkpoint_seconds=2.0) == 1
    assert paced_checkpoints(8, train_seconds=45.0, checkpoint_seconds=2.0) == 3
    assert paced_checkpoints(8, train_seconds=1000.0, checkpoint_seconds=2.0) == 8
    assert paced_checkpoints(8, train_seconds=10.0, checkpoint_seconds=0.0) == 8  # nothing known yet: as planned
    assert paced_checkpoints(1, train_seconds=0.0, checkpoint_seconds=2.0) == 1
