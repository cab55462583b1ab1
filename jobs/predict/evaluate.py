"""An evaluation job: a finished run's model scored on a stored test set, written as its validation is.

    run_evaluation(spec, model, records_paths, output_dir, reporter) -> metrics

The test set goes through the very code the engine runs for a run's validation split
(``module.prepare`` → ``module.build_model`` → ``module.evaluate(prepared, trainer.predict(...))`` or
``module.evaluate_model``; a SetFit run through ``jobs.training.setfit``), with the model's own label ids
and the run's own hyper-parameters (max length, doc stride, multi-label, masking seed...). So a run
evaluated on its own validation file gets exactly its validation metrics, and ``output_dir`` receives
what a training run writes for its validation split (``metrics.json``, ``tables.json``,
``predictions.jsonl``, ``outcomes.npz``): the run views (per-class tables, confusion matrix, error browser)
read them unchanged. Each file is written under a temporary name and renamed, ``metrics.json`` last: a folder
with ``metrics.json`` holds a finished evaluation.

Labels the model never saw, by task:

- text classification: an error (``DataValidationError``, one problem per unknown label with its file
  and line) before any scoring: the model cannot predict the class, and the engine refuses such a
  validation label too;
- token classification: counted as wrong, as the engine counts an unseen validation tag (the word-level
  evaluation compares tag strings; the tag gets its row in the per-tag table with recall 0).

Batch inference only: no optimizer, ``torch.inference_mode``, a larger evaluation batch than training's,
the attention path the engine picks (SDPA, or flash attention where it applies), and length-sorted
batches whose predictions are put back in dataset order before the task module reads them.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from jobs.predict.infer import run_abstains
from jobs.predict.spec import ModelRef, PredictSpec
from jobs.predict.test_facts import test_set_facts
from jobs.progress import EVALUATING, PREPARING, WRITING_PREDICTIONS, Cancelled, report_phase
from storage.errors import ConfigError, DataValidationError, Problem, TrainingError

log = logging.getLogger(__name__)

# Evaluation batch when the spec names none: inference keeps no gradients or optimizer state
DEFAULT_BATCH = {"cpu": 64, "cuda": 128}
# SetFit runs are scored chunk by chunk: progress and cancel between chunks
SETFIT_CHUNK = 512
# masked-LM perplexity is the mean of per-batch losses (Trainer.evaluate): the run's own batches reproduce it
PER_BATCH_LOSS_TASKS = {"masked-lm"}
REQUIRED_HP = {"text-classification": ("max_length",), "token-classification": ("max_length",),
               "question-answering": ("max_length", "doc_stride", "max_answer_length"),
               "masked-lm": ("max_length", "mlm_probability", "seed", "batch_size")}
OUTPUT_FILES = ("metrics.json", "tables.json", "predictions.jsonl")


def run_evaluation(spec: PredictSpec, model: ModelRef, records_paths: Sequence[str | Path], output_dir: Path,
                   reporter, *, device: str = "auto") -> dict:
    """Score ``model`` on the test set ``records_paths`` (its train.jsonl, then validation.jsonl) into ``output_dir``.

    Returns the metrics (the task's, plus rows, seconds, test_set, model_run, and ``test_set_facts``'s
    counts of repeated and truncated rows); raises ``Cancelled`` when
    the reporter asks to stop (nothing is written then), ``DataValidationError`` for a test set the model
    cannot be scored on, ``TrainingError``/``ConfigError`` for a model or run that cannot be read.
    """
    from jobs.tasks import task_module
    from jobs.training.trainer import pick_device

    started = time.perf_counter()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "metrics.json").unlink(missing_ok=True)  # an earlier attempt's result is not this one's
    report_phase(reporter, PREPARING)
    hp = dict(model.hyperparameters or {})
    module = task_module(model.task, hp.get("objective") or "mlm")
    records, origins = read_test_set(module, records_paths)
    device = pick_device(device)
    log.info("evaluating run %s on %d records of test set %s (%s)", model.run_id, len(records), spec.dataset_id,
             device)
    evaluation, batch_size = _score(spec, model, module, records, origins, hp, device, reporter)
    seconds = time.perf_counter() - started
    metrics = {**evaluation.metrics, "rows": len(records), "seconds": round(seconds, 2),
               "rows_per_second": round(len(records) / max(seconds, 1e-9), 2), "test_set": spec.dataset_id,
               "model_run": model.run_id, "device": device, "batch_size": batch_size}
    metrics.update(test_set_facts(model, records, records_paths, hp))  # repeated rows, rows cut to max length
    metrics.update(test_set_baselines(model, records, evaluation, device))
    report_phase(reporter, WRITING_PREDICTIONS, 0, len(evaluation.predictions))
    write_evaluation(output_dir, metrics, hp, evaluation)
    log.info("evaluation finished: %s", json.dumps(evaluation.metrics))
    return metrics


def test_set_baselines(model: ModelRef, records: list[dict], evaluation, device: str) -> dict:
    """Text classification: the baselines (``jobs.evaluation.baselines``: majority class, TF-IDF and the frozen embeddings of
    the run's starting model) fitted on the run's training split and scored on the test set, and the verdict on
    the same examples; ``{}`` for other tasks and where the run's training data is gone. A baseline that fails
    is logged: the evaluation stands without it."""
    if model.task != "text-classification" or not model.run_spec:
        return {}
    from jobs.evaluation.baselines import assess
    from jobs.specs.run import RunSpec
    from jobs.training import catalogue
    from jobs.training.chunking import load_config
    from jobs.training.data import training_records
    from jobs.training.sentence_model import frozen_embedder

    try:
        run_spec = RunSpec.from_dict(model.run_spec)
        train = training_records(run_spec, dict(model.hyperparameters or {}))
        path = catalogue.load_path(catalogue.resolve_model(run_spec.model))
        embed = frozen_embedder(path, device, max_length=(model.hyperparameters or {}).get("max_length"),
                                chunking=load_config(model.model_dir))  # each text read as the run read it
        found = assess(train, records, evaluation.metrics, evaluation.predictions, embed=embed,
                       seed=run_spec.train.seed)
    except Exception:  # noqa: BLE001 - the evaluation's own scores stand without baselines
        log.exception("the baselines could not be fitted on run %s's training split", model.run_id)
        return {}
    log.info("baselines on the test set: %s", json.dumps(found["baselines"]))
    return found


def read_test_set(module, records_paths: Sequence[str | Path]) -> tuple[list[dict], list[tuple[str, int]]]:
    """Every record of the test set's files, once, with the task's own reader; and each one's (file, line).

    The normalized files hold one record per line, so the n-th record is on line n.
    """
    records: list[dict] = []
    origins: list[tuple[str, int]] = []
    for path in records_paths:
        found = module.read(path)
        records.extend(found)
        origins.extend((str(path), line) for line in range(1, len(found) + 1))
    if not records:
        raise DataValidationError([Problem("error", "test set", "the test set has no records",
                                           hint="choose a dataset with examples")])
    return records, origins


def _score(spec: PredictSpec, model: ModelRef, module, records: list[dict], origins, hp: dict, device: str,
           reporter):
    """The evaluation of ``records``, through SetFit's classifier or the task module's Trainer path."""
    from jobs.training.sentence_model import is_setfit_model

    if not Path(model.model_dir).is_dir():
        raise TrainingError(f"the model of run {model.run_id} is missing: {model.model_dir}",
                            "the run's folder was deleted; train it again")
    missing = [key for key in REQUIRED_HP.get(model.task, ()) if key not in hp]
    if missing:
        raise ConfigError(f"run {model.run_id} recorded no {', '.join(missing)} in its metrics.json; "
                          "it cannot be evaluated the way it was validated — train it again")
    if is_setfit_model(model.model_dir):
        batch_size = spec.batch_size or DEFAULT_BATCH.get(device.split(":")[0], 64)
        return _evaluate_setfit(model, records, origins, hp, device, batch_size, reporter), batch_size
    return _evaluate_with_trainer(spec, model, module, records, origins, hp, device, reporter)


# --- labels -----------------------------------------------------------------------------------------

def model_labels(config) -> list[str]:
    """The model's class or tag names in id order (``config.id2label``): the ids its head was trained on."""
    id2label = {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}
    return [id2label[i] for i in range(len(id2label))]


def check_classification_labels(records: Sequence[dict], origins: Sequence[tuple[str, int]], names: Sequence[str],
                                multi_label: bool) -> None:
    """Refuse labels the model was never trained on, and label lists for a single-label model.

    One problem per unknown label, at its first record, with how many records carry it.
    """
    known = set(names)
    first: dict[str, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    problems = []
    for record, (path, line) in zip(records, origins):
        value = record["label"]
        if isinstance(value, list) and not multi_label:
            problems.append(Problem("error", path, "this record has a list of labels, and the model gives one label "
                                    "per text", line=line, column="label",
                                    hint="evaluate a multi-label run on it, or give each text one label"))
            break
        for name in map(str, value if isinstance(value, list) else [value]):
            if name not in known:
                first.setdefault(name, (path, line))
                counts[name] = counts.get(name, 0) + 1
    for name, (path, line) in first.items():
        problems.append(Problem(
            "error", path, f"label {name!r} ({counts[name]} record{'s' if counts[name] > 1 else ''}) is not one the "
            f"model was trained on; it knows {', '.join(map(repr, names))}", line=line, column="label",
            hint="evaluate on a test set with the model's labels, or train a run whose data has this class"))
    if problems:
        raise DataValidationError(problems)


def unseen_tags(records: Sequence[dict], names: Sequence[str]) -> dict[str, int]:
    """Tags of the test set the model cannot predict, with their word counts (they count as wrong)."""
    known, unseen = set(names), {}
    for record in records:
        for tag in record["tags"]:
            if tag not in known:
                unseen[tag] = unseen.get(tag, 0) + 1
    return unseen


def evaluation_hp(task: str, hp: dict, config, records: Sequence[dict], model_dir: str) -> dict:
    """The run's hyper-parameters plus what ``prepare`` needs to rebuild the run's model, not the test set's.

    Classification and tagging take the model's labels (``model_labels``) and classification its
    single/multi-label head; QA abstains ("no answer") when the run did: its training or validation had
    unanswerable questions (its tables then have ``by_kind``), or the test set has some.
    """
    hp = dict(hp)
    if task in ("text-classification", "token-classification"):
        hp["model_labels"] = model_labels(config)
        if len(hp["model_labels"]) < 2:
            raise TrainingError(f"the model in {model_dir} has no label names (config.id2label)",
                                "evaluate a run trained by the workbench")
    if task == "text-classification":
        from jobs.training.chunking import load_config

        hp["multi_label"] = getattr(config, "problem_type", None) == "multi_label_classification"
        hp["class_weights"] = False  # a training-loss setting; evaluation has no loss to weigh
        hp["chunking_plan"] = load_config(model_dir)  # a run trained on documents reads them in windows again
    if task == "question-answering":
        hp["allow_null"] = any(not r["answers"]["text"] for r in records) or run_abstains(model_dir)
    return hp


# --- the Trainer path: the engine's task code ------------------------------------------------------

def _evaluate_with_trainer(spec: PredictSpec, model_ref: ModelRef, module, records: list[dict], origins, hp: dict,
                           device: str, reporter):
    """Prepare, build and predict as the engine does for its validation split; returns (evaluation, batch size)."""
    from transformers import AutoConfig

    from jobs.training.attention import attention_path
    from jobs.training.tokenizers import load_tokenizer

    path, task = model_ref.model_dir, model_ref.task
    config = AutoConfig.from_pretrained(path)
    run_hp = evaluation_hp(task, hp, config, records, path)
    if task == "text-classification":
        check_classification_labels(records, origins, run_hp["model_labels"], run_hp["multi_label"])
    if task == "token-classification":
        unseen = unseen_tags(records, run_hp["model_labels"])
        if unseen:
            log.warning("tags the model never saw count as wrong: %s", json.dumps(unseen))
    tokenizer = load_tokenizer(path, config, task)
    prepared = module.prepare(_stand_in_train(module, records), records, tokenizer, config, run_hp)
    if task == "text-classification":  # scored with the temperature and thresholds the model predicts with
        from jobs.evaluation.postprocess import load_calibration

        prepared.extra["stored_calibration"] = load_calibration(path)
    model = module.build_model(path, prepared, config)
    _same_labels(model, run_hp, path)
    attention_path(model, config, task, device, run_hp.get("precision", "auto"), prepared)
    if hasattr(module, "chunked_model"):  # documents: windows pooled as the run was trained
        model = module.chunked_model(model, prepared)
    batch_size = run_hp["batch_size"] * 2 if task in PER_BATCH_LOSS_TASKS else (
        spec.batch_size or DEFAULT_BATCH.get(device.split(":")[0], 64))
    n_examples = len(prepared.eval_dataset)
    listener = _progress_listener(reporter, len(records), n_examples)
    trainer = _trainer(model, tokenizer, prepared, run_hp, device, batch_size, listener)
    return _predict_and_evaluate(module, trainer, prepared, reporter, len(records)), batch_size


def _stand_in_train(module, records: list[dict]) -> list[dict]:
    """What ``prepare`` gets as its training split: nothing is trained, so a record or two to tokenize.

    The labels come from the model (``model_labels``), not from these. BERT's NSP pairs need sentences
    of several documents: that objective gets the whole test set.
    """
    if module.__name__.endswith(".pretraining"):
        return records
    if module.__name__.endswith(".mlm"):
        texts = [r for r in records if str(r["text"]).strip()]
        if not texts:
            raise DataValidationError([Problem("error", "test set", "every text of the test set is empty",
                                               hint="choose a dataset with text")])
        return texts[:1]
    return records[:1]


def _same_labels(model, run_hp: dict, path: str) -> None:
    """The head built for the evaluation must carry the model's own label ids (never a re-initialised head)."""
    if "model_labels" in run_hp and model_labels(model.config) != run_hp["model_labels"]:
        raise TrainingError(f"the labels of the model in {path} changed while loading it",
                            "the model folder may be damaged; train the run again")


def _trainer(model, tokenizer, prepared, hp: dict, device: str, batch_size: int, listener: Callable):
    """A WorkbenchTrainer that only predicts: sequential batches, the run's precision, no outputs of its own."""
    import tempfile

    from transformers import TrainingArguments

    from jobs.training.trainer import WorkbenchTrainer, precision_flags

    args = TrainingArguments(
        output_dir=tempfile.gettempdir(),  # nothing is saved: no training, no checkpoints
        per_device_eval_batch_size=batch_size, eval_accumulation_steps=32, use_cpu=device == "cpu",
        remove_unused_columns=False, label_names=prepared.label_names or ["labels"], report_to=[],
        dataloader_num_workers=0, disable_tqdm=True, seed=hp.get("seed", 42),
        **precision_flags(device, hp.get("precision", "auto")))
    return WorkbenchTrainer(model=model, args=args, data_collator=prepared.collator,
                            eval_dataset=prepared.eval_dataset, processing_class=tokenizer, phase_listener=listener)


def _progress_listener(reporter, n_records: int, n_examples: int) -> Callable:
    """The trainer's evaluation counts (examples: QA windows) as rows done of the test set's; honours cancel."""
    def listen(name: str, done: Optional[int], total: Optional[int]) -> None:
        if name != EVALUATING:
            return
        rows = n_records if not total else min(n_records, round((done or 0) * n_records / total))
        report_phase(reporter, EVALUATING, rows, n_records)
        reporter.progress(rows, n_records, 0.0)
        if reporter.cancel_requested():
            raise Cancelled(f"evaluation cancelled after {rows} of {n_records} rows")
    log.info("%d records make %d examples for the model", n_records, n_examples)
    return listen


def _predict_and_evaluate(module, trainer, prepared, reporter, n_records: int):
    """``module.evaluate_model`` or ``module.evaluate(prepared, predict())``, under ``torch.inference_mode``."""
    import torch

    with torch.inference_mode():
        if hasattr(module, "evaluate_model"):
            report_phase(reporter, EVALUATING, 0, n_records)
            if reporter.cancel_requested():
                raise Cancelled("evaluation cancelled before it started")
            return module.evaluate_model(trainer, prepared)
        return module.evaluate(prepared, sorted_predict(trainer, prepared.eval_dataset))


def sorted_predict(trainer, dataset):
    """``trainer.predict`` over length-sorted batches (less padding), outputs put back in dataset order.

    The trainer predicts sequentially (``WorkbenchTrainer``), so the sorted dataset's i-th output is
    the example ``order[i]``; every array of the output is indexed back by that, never by position.
    """
    import numpy as np

    lengths = np.asarray([len(ids) for ids in dataset["input_ids"]])
    order = np.argsort(-lengths, kind="stable")  # longest first: a batch too big fails at once
    output = trainer.predict(dataset.select(order.tolist()))
    inverse = np.argsort(order)
    return output._replace(predictions=_reorder(output.predictions, inverse),
                           label_ids=_reorder(output.label_ids, inverse))


def _reorder(value: Any, inverse):
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return type(value)(_reorder(v, inverse) for v in value)
    return value[inverse]


# --- SetFit runs --------------------------------------------------------------------------------------

def _evaluate_setfit(model_ref: ModelRef, records: list[dict], origins, hp: dict, device: str, batch_size: int,
                     reporter):
    """A SetFit run's classifier on the test set, scored as ``jobs.training.setfit.train_setfit`` scores validation."""
    import numpy as np
    from transformers import AutoTokenizer

    from jobs.tasks import classification
    from jobs.tasks.common import Evaluation
    from jobs.training.sentence_model import load_classifier

    classifier = load_classifier(model_ref.model_dir).to(device)
    tokenizer = AutoTokenizer.from_pretrained(model_ref.model_dir)
    names = model_labels(classifier.config)
    check_classification_labels(records, origins, names, False)
    logits = _setfit_logits(classifier, tokenizer, [r["text"] for r in records], hp["max_length"], batch_size,
                            reporter)
    label2id = {name: i for i, name in enumerate(names)}
    gold = np.asarray([classification.encode_label(r["label"], label2id, False) for r in records])
    metrics, tables = classification.compute_metrics_arrays(logits, gold, names, False)
    from jobs.evaluation.postprocess import load_calibration

    classification.merge_calibration(metrics, tables, *classification.apply_stored(
        logits, gold, names, False, load_calibration(model_ref.model_dir)))
    return Evaluation(metrics, tables, classification.prediction_rows(records, logits, names, False))


def _setfit_logits(classifier, tokenizer, texts: list[str], max_length: int, batch_size: int, reporter):
    """``predict_logits`` chunk by chunk, reporting rows done and stopping when cancel is asked."""
    import numpy as np

    from jobs.training.sentence_model import predict_logits

    chunks = []
    for start in range(0, len(texts), SETFIT_CHUNK):
        if reporter.cancel_requested():
            raise Cancelled(f"evaluation cancelled after {start} of {len(texts)} rows")
        report_phase(reporter, EVALUATING, start, len(texts))
        chunks.append(predict_logits(classifier, tokenizer, texts[start:start + SETFIT_CHUNK], max_length,
                                     batch_size))
        done = min(len(texts), start + SETFIT_CHUNK)
        reporter.progress(done, len(texts), 0.0)
    report_phase(reporter, EVALUATING, len(texts), len(texts))
    return np.concatenate(chunks)


# --- outputs ------------------------------------------------------------------------------------------

def write_evaluation(output_dir: Path, metrics: dict, hp: dict, evaluation) -> None:
    """``tables.json``, ``predictions.jsonl``, then ``metrics.json``: ``jobs.training.outputs.write_outputs``'s format,
    each file complete under a temporary name before it is renamed into place. ``outcomes.npz`` comes first
    and ``metrics`` gains its ``metrics_ci`` in place (``jobs.evaluation.outcomes``)."""
    from jobs.evaluation.outcomes import save_outcomes

    metrics.update(save_outcomes(output_dir, evaluation))
    _write_atomic(output_dir / "tables.json", [json.dumps(evaluation.tables, indent=2)])
    _write_atomic(output_dir / "predictions.jsonl",
                  (json.dumps(row, ensure_ascii=False) + "\n" for row in evaluation.predictions))
    _write_atomic(output_dir / "metrics.json",
                  [json.dumps({**metrics, "hyperparameters": hp}, indent=2, default=str)])


def _write_atomic(path: Path, parts) -> None:
    import os

    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for part in parts:
            handle.write(part)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
