"""Few-shot text classification with SetFit (Tunstall et al., 2022), as a training method of the engine.

SetFit tunes a sentence encoder on pairs of training texts (same class: close, different class: far),
then fits a logistic regression on the tuned embeddings. From a few dozen examples per class it
learns where a classification head fine-tuned for a few dozen steps stays at the majority class.

Training goes through the ``setfit`` library. The run's ``model/`` folder is what
``SetFitModel.save_pretrained`` writes (a sentence-transformers folder plus ``model_head.pkl``) and
beside it ``setfit_head.safetensors`` + ``setfit.json``: the head as plain weights, so that the
workbench loads a SetFit model without unpickling anything (``SetFitClassifier``). The classifier
is an ``nn.Module`` that answers like a transformers sequence classifier (``.logits``,
``.attentions``, ``.config.id2label``): evaluation, audits, playgrounds and the API use it as they
use any run's model. A SetFit run keeps no checkpoints: stopped or crashed, it starts again
(it takes minutes).

The model is saved in the sentence-model layout (``jobs.training.sentence_model``).
"""
from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from jobs.progress import EVALUATING, SAVING_MODEL, TRAINING, WRITING_PREDICTIONS, Cancelled, report_phase
from jobs.training.sentence_model import head_weights, load_classifier, predict_logits, read_sentence_layout, save_head
from storage.errors import TrainingError

log = logging.getLogger(__name__)


class _ReporterCallback:
    """SetFit's trainer calls transformers callbacks with its own arguments; progress and cancel only."""

    def __init__(self, reporter):
        from transformers import TrainerCallback

        self.reporter, self.cancelled = reporter, False
        outer = self

        class Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                outer.reporter.progress(state.global_step, state.max_steps, float(state.epoch or 0.0))
                if outer.reporter.cancel_requested():
                    outer.cancelled = True
                    control.should_training_stop = True
                return control

            def on_log(self, args, state, control, logs=None, **kwargs):
                log.info("step %d: %s", state.global_step, logs)
                loss = (logs or {}).get("embedding_loss", (logs or {}).get("loss"))
                if isinstance(loss, (int, float)):
                    outer.reporter.metrics(state.global_step, state.epoch, {"train/loss": float(loss)})

        self.callback = Callback()


def train_setfit(spec, output_dir: Path, reporter, hp: dict, path: str, train: list[dict],
                 validation: list[dict], facts: dict, setup_started: float) -> dict:
    """Train ``spec`` with SetFit; writes the same outputs as a fine-tuned run (see ``jobs.training.engine``)."""
    from datasets import Dataset
    from setfit import SetFitModel
    from setfit import Trainer as SetFitTrainer
    from setfit import TrainingArguments as SetFitArguments
    from transformers import AutoTokenizer, set_seed

    from jobs.tasks import classification
    from jobs.tasks.common import Evaluation
    from jobs.training.outputs import HELDOUT_FILE, assess_run, peak_rss_mb, write_heldout, write_outputs

    if any(r.get("text_pair") for r in train):
        raise TrainingError("SetFit takes single texts, and this dataset has text pairs",
                            "choose the finetune method (or auto) for text-pair classification")
    if classification.is_multi_label(train):
        raise TrainingError("SetFit runs here take one label per example", "choose the finetune method")
    names = classification.collect_labels(train, False)
    label2id = {name: i for i, name in enumerate(names)}
    set_seed(hp["seed"])
    # balanced classes: with 4 spam among 32 messages an unweighted head leans to the majority class
    model = SetFitModel.from_pretrained(path, labels=names, head_params={"class_weight": "balanced", "max_iter": 1000})
    args = SetFitArguments(output_dir=str(output_dir / "checkpoints"), batch_size=(hp["batch_size"], 16),
                           num_epochs=(1, 16), max_steps=hp["max_steps"], body_learning_rate=hp["learning_rate"],
                           warmup_proportion=hp["warmup_ratio"], seed=hp["seed"], max_length=hp["max_length"],
                           report_to="none", show_progress_bar=False, save_strategy="no",
                           logging_steps=max(1, min(25, hp["max_steps"] // 20)), sampling_strategy="oversampling")
    callback = _ReporterCallback(reporter)
    dataset = Dataset.from_list([{"text": r["text"], "label": label2id[str(r["label"])]} for r in train])
    trainer = SetFitTrainer(model=model, args=args, train_dataset=dataset, callbacks=[callback.callback])
    trainer.st_trainer.args.disable_tqdm = True  # progress goes through the reporter; no bars in the run log
    parameters = sum(p.numel() for p in model.model_body.parameters())
    facts = {**facts, "total_steps": hp["max_steps"], "method": "setfit", "trainable_parameters": parameters,
             "total_parameters": parameters}
    reporter.info(facts)
    log.info("run starts (SetFit): %s", json.dumps(facts, default=str))
    started = time.perf_counter()
    report_phase(reporter, TRAINING)
    trainer.train_embeddings(list(dataset["text"]), list(dataset["label"]), args=args)
    if callback.cancelled:
        raise Cancelled("cancelled during SetFit's pair training (a SetFit run restarts from the beginning)")
    trainer.train_classifier(list(dataset["text"]), list(dataset["label"]), args=args)
    train_seconds = time.perf_counter() - started
    steps = int(trainer.st_trainer.state.global_step)
    train_loss = _last_loss(trainer.st_trainer.state.log_history)

    report_phase(reporter, SAVING_MODEL)
    model_dir = output_dir / "model"
    model.save_pretrained(str(model_dir))
    pooling, normalize = read_sentence_layout(model_dir)
    weight, bias = head_weights(model.model_head.coef_, model.model_head.intercept_, len(names))
    save_head(model_dir, weight, bias, names, pooling, normalize, hp["max_length"])
    classifier = load_classifier(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    final_started = time.perf_counter()
    report_phase(reporter, EVALUATING, 0, len(validation))
    logits = predict_logits(classifier, tokenizer, [r["text"] for r in validation], hp["max_length"])
    gold = np.asarray([classification.encode_label(r["label"], label2id, False) for r in validation])
    metrics, tables = classification.compute_metrics_arrays(logits, gold, names, False)
    # the head's logits get a temperature and a positive-class threshold as a fine-tuned run's do
    classification.merge_calibration(metrics, tables, *classification.calibrate(
        logits, gold, names, False, spec.train.calibrate, spec.train.threshold))
    rows = classification.prediction_rows(validation, logits, names, False)
    final_eval_seconds = time.perf_counter() - final_started
    if spec.data.predict_path:
        held = classification.read(spec.data.predict_path)
        probs = classification.softmax(predict_logits(classifier, tokenizer, [r["text"] for r in held],
                                                      hp["max_length"]))
        write_heldout(output_dir / HELDOUT_FILE, {"probs": probs, "labels": names, "record": list(range(len(held))),
                                                  "word": [-1] * len(held)})
    evaluation = Evaluation(dict(metrics), tables, rows)
    pairs = steps * hp["batch_size"]
    metrics.update({
        "train_loss": train_loss, "steps": steps, "method": "setfit",
        "trainable_parameters": parameters, "total_parameters": parameters,
        "peak_rss_mb": round(peak_rss_mb(), 1), "peak_gpu_mb": 0.0,
        "train_seconds": round(train_seconds, 2),
        # a pair is two texts through the encoder: comparable with a fine-tuned run's examples per second
        "samples_per_second": round(2 * pairs / max(train_seconds, 1e-9), 3),
        "eval_and_checkpoint_seconds": 0.0, "train_examples": 2 * pairs, "train_records": len(train),
        "validation_examples": len(validation), "validation_records": len(validation),
        "setup_seconds": round(started - setup_started, 2), "evaluations": 0, "evaluation_seconds": 0.0,
        "checkpoints": 0, "checkpoint_seconds": 0.0, "final_eval_seconds": round(final_eval_seconds, 2),
        "device": facts.get("device", "cpu"), "processes": 1,
    })
    reporter.metrics(steps, 1.0, {f"eval/{k}": v for k, v in evaluation.metrics.items() if isinstance(v, (int, float))})
    report_phase(reporter, WRITING_PREDICTIONS, 0, len(rows))
    metrics.update(assess_run(spec, train, validation, evaluation, model_path=path, device=metrics["device"],
                              max_length=hp["max_length"]))
    metrics["finish_seconds"] = round(time.perf_counter() - final_started - final_eval_seconds, 2)
    metrics["wall_seconds"] = round(time.perf_counter() - setup_started, 2)
    write_outputs(output_dir, metrics, hp, evaluation)
    log.info("run finished (SetFit): %s", json.dumps(evaluation.metrics))
    return metrics


def _last_loss(history: list[dict]) -> float:
    for entry in reversed(history or []):
        for key in ("embedding_loss", "loss", "train_loss"):
            if isinstance(entry.get(key), (int, float)) and math.isfinite(entry[key]):
                return float(entry[key])
    return float("nan")
