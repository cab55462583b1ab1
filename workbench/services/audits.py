"""Label audits: find the labels of a stored dataset that are probably wrong, and fix them in a copy.

An audit pools the dataset's train and validation examples, deals them into k folds
(stratified by label for classification) and queues k ordinary runs: fold f trains on the
other k-1 folds (its engine splits off its own 10 % to pick a checkpoint) and predicts fold f
(``DataSpec.predict_path``). So every example is predicted exactly once, by a model that never
saw it, and the folds run in parallel on as many workers as there are, with the queue's leases,
retries and crash resume. Once every fold has succeeded, confident learning
(``jobs.audits.confident_learning``) ranks the examples whose given label disagrees with a confidently
predicted other one; the ranking is written to the audit's folder once and read from there.

The user marks each flagged example keep, relabel or drop (``audit_decisions``, one row per
example); ``save_corrected`` writes a corrected copy as a new dataset and never touches the
original. An audit's state follows from its folds' states; nothing else has to be kept in step.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import numpy as np
from sqlalchemy import select

from jobs.evaluation import baselines
from jobs.audits import confident_learning as label_issues
from jobs.queue import table as queue
from jobs.training.outputs import HELDOUT_FILE
from jobs.specs.run import DEFAULT_MODEL, DataSpec, LoraSpec, RunSpec, TrainSpec
from jobs.queue.states import ACTIVE
from storage.context import Workbench
from storage.models import CANCELLED, FAILED, QUEUED, SUCCEEDED, Audit, AuditDecision, Dataset, Run, utcnow
from workbench.errors import ConfigError, InvalidState, NotFound, WorkbenchError

log = logging.getLogger(__name__)

TASKS = ("text-classification", "token-classification")
PRESETS = ("quick", "standard", "thorough")
KEEP, RELABEL, DROP = "keep", "relabel", "drop"
ACTIONS = (KEEP, RELABEL, DROP)
# Audit states, derived from the fold runs: running (a fold is queued or running), finished (the
# ranking is written), stopped (a fold failed or was cancelled and none is running: retry them).
RUNNING, FINISHED, STOPPED = "running", "finished", "stopped"
ISSUES_FILE = "issues.json"
EXAMPLE_KEY = "_example"  # in the fold files: which example of the dataset a record is ("train:17")
MAX_FOLDS = 20
# Below this held-out accuracy the fold models mostly guess, and an audit says so.
WEAK_HELD_OUT_ACCURACY = 0.7


def _iso(value: Optional[dt.datetime]) -> Optional[str]:
    return value.isoformat(timespec="seconds") + "Z" if value else None


def _audits_dir(wb: Workbench) -> Path:
    return wb.settings.home / "audits"


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _write_jsonl(path: Path, records: Iterable[dict]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def _pool(wb: Workbench, dataset: Dataset) -> list[dict]:
    """Every example of the dataset, train then validation, each tagged with its key."""
    folder = Path(dataset.path)
    pool = []
    for split in ("train", "validation"):
        path = folder / f"{split}.jsonl"
        if split == "train" and not path.is_file():
            raise NotFound(f"the files of dataset {dataset.id} are missing from {folder}; import the file again")
        if path.is_file():
            pool.extend({**record, EXAMPLE_KEY: f"{split}:{i}"} for i, record in enumerate(_read_jsonl(path)))
    return pool


def _given(record: dict, task: str) -> Any:
    return record["label"] if task == "text-classification" else record["tags"]


def create_audit(wb: Workbench, dataset: str, *, folds: int = 5, model: str = DEFAULT_MODEL, preset: str = "quick",
                 seed: int = 42, method: str = label_issues.SELF_CONFIDENCE, lora: bool = False,
                 name: str = "", train: Optional[Mapping[str, Any]] = None, owner_id: Optional[int] = None) -> int:
    """Queue the k fold runs of an audit of ``dataset`` (id, id prefix or name). Returns the audit id.

    ``train`` sets more hyper-parameters of every fold run (``TrainSpec`` fields, e.g. ``epochs``).
    """
    from workbench.services import datasets as datasets_service
    from workbench.services import runs as runs_service

    if not isinstance(folds, int) or not 2 <= folds <= MAX_FOLDS:
        raise ConfigError(f"the number of folds must be a whole number from 2 to {MAX_FOLDS} (got {folds!r})")
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    if method not in label_issues.QUALITY_METHODS:
        raise ConfigError(f"unknown ranking {method!r}; choose one of {', '.join(label_issues.QUALITY_METHODS)}")
    summary = datasets_service.get_dataset(wb, dataset)
    if summary.task not in TASKS:
        raise ConfigError(f"dataset {summary.id} is {summary.task} data; suspicious labels are found in "
                          "text-classification and token-classification datasets")
    with wb.db.session() as session:
        row = session.get(Dataset, summary.id)
        pool = _pool(wb, row)
    if summary.task == "text-classification" and any(isinstance(r["label"], list) for r in pool):
        raise ConfigError(f"dataset {summary.id} is multi-label; finding suspicious labels needs one label "
                          "per example")
    if len(pool) < 2 * folds:
        raise ConfigError(f"dataset {summary.id} has {len(pool)} examples: too few for {folds} folds "
                          f"(at least {2 * folds} are needed); choose fewer folds")
    strata = None
    if summary.task == "text-classification":
        names = sorted({str(r["label"]) for r in pool})
        strata = [names.index(str(r["label"])) for r in pool]
    assignment = label_issues.assign_folds(len(pool), folds, seed, strata)
    train = dict(train or {})
    spec = {"folds": folds, "model": model, "preset": preset, "seed": seed, "method": method, "lora": bool(lora),
            "train": train}
    title = name or f"audit of {summary.name}"
    # Check the data and the settings before anything is queued (as a run's submit does).
    first = _fold_spec(summary, 0, folds, model, preset, seed, lora, title, _audits_dir(wb), train)
    runs_service.submit_run_checks(wb, first)
    estimate = _fold_estimate(wb, first, len(pool), folds)
    with wb.db.session() as session:
        audit = Audit(name=title, dataset_id=summary.id, task=summary.task, spec=spec, folder="", owner_id=owner_id)
        session.add(audit)
        session.flush()
        folder = _audits_dir(wb) / str(audit.id)
        audit.folder = str(folder)
        try:
            _write_folds(folder, pool, assignment, folds)
            for fold in range(folds):
                fold_spec = _fold_spec(summary, fold, folds, model, preset, seed, lora, title, folder, train)
                run = Run(name=fold_spec.name, task=fold_spec.task, model=fold_spec.model, status=QUEUED,
                          spec=fold_spec.to_dict(), dataset_id=summary.id, audit_id=audit.id, fold=fold,
                          estimate=estimate, owner_id=owner_id)
                session.add(run)
                session.flush()
                run.output_dir = str(wb.settings.runs_dir / str(run.id))
            session.flush()
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        audit_id = audit.id
    log.info("audit %s of dataset %s: %d examples in %d folds queued", audit_id, summary.id, len(pool), folds)
    return audit_id


def estimate_audit(wb: Workbench, dataset: str, *, folds: int = 5, model: str = DEFAULT_MODEL,
                   preset: str = "quick", lora: bool = False, train: Optional[Mapping[str, Any]] = None
                   ) -> Optional[dict[str, Any]]:
    """How long an audit would take before it is started: ``fold`` (one fold run's estimate, on the
    (k-1)/k of the examples it trains on), ``seconds``/``low``/``high`` for all k fold runs one after
    another, and ``wall_seconds``, the same spread over the live workers' slots (``workers``; 1 when
    none runs yet). None when a fold's time cannot be estimated."""
    from workbench.services import datasets as datasets_service
    from workbench.services import runs as runs_service

    summary = datasets_service.get_dataset(wb, dataset)
    examples = int(summary.train or 0) + int(summary.validation or 0)
    if not 2 <= folds <= MAX_FOLDS or examples < 2 * folds:
        return None
    spec = _fold_spec(summary, 0, folds, model, preset, 42, lora, "estimate", _audits_dir(wb), train or {})
    fold = _fold_estimate(wb, spec, examples, folds)
    if fold is None:
        return None
    slots = max(1, runs_service.worker_slots(wb))
    rounds = -(-folds // slots)  # folds run side by side, slots at a time
    return {"fold": fold, "folds": folds, "workers": slots, "seconds": round(folds * fold["seconds"], 1),
            "low": round(folds * fold["low"], 1), "high": round(folds * fold["high"], 1),
            "wall_seconds": round(rounds * fold["seconds"], 1)}


def _fold_estimate(wb: Workbench, spec: RunSpec, examples: int, folds: int) -> Optional[dict[str, Any]]:
    """One fold run's time: training on the other folds less the 10 % its engine holds out to pick a
    checkpoint, evaluating on that 10 %, then predicting its own fold (at the cost of an evaluation)."""
    from workbench.services import runs as runs_service

    others = examples * (folds - 1) // folds
    held_out = max(1, others // 10)
    estimate = runs_service.run_estimate_for(wb, spec, n_train=others - held_out, n_validation=held_out)
    if estimate is None:
        return None
    evaluated = estimate["validation_examples"] * estimate["evaluations"]
    per_example = estimate["parts"]["evaluation"] / evaluated if evaluated else 0.0
    predict = round(per_example * (examples - others), 1)
    estimate["parts"]["prediction"] = predict
    for key in ("seconds", "low", "high"):
        estimate[key] = round(estimate[key] + predict, 1)
    return estimate


def _fold_spec(summary, fold: int, folds: int, model: str, preset: str, seed: int, lora: bool, title: str,
               folder: Path, train: Mapping[str, Any]) -> RunSpec:
    fold_dir = folder / f"fold-{fold}"
    return RunSpec(task=summary.task, model=model, name=f"{title} · fold {fold + 1}/{folds}",
                   data=DataSpec(dataset_id=summary.id, name=summary.name, train_path=str(fold_dir / "train.jsonl"),
                                 predict_path=str(fold_dir / "heldout.jsonl")),
                   train=_train_spec(preset, seed, train), lora=LoraSpec(enabled=bool(lora)))


def _train_spec(preset: str, seed: int, train: Mapping[str, Any]) -> TrainSpec:
    try:
        return TrainSpec(**{"select_by": "loss", **train, "preset": preset, "seed": seed})
    except TypeError as exc:
        raise ConfigError(f"invalid training setting for the audit's folds: {exc}") from None


def _write_folds(folder: Path, pool: list[dict], assignment: np.ndarray, folds: int) -> None:
    """fold-f/train.jsonl (every other fold) and fold-f/heldout.jsonl (fold f), in pool order."""
    for fold in range(folds):
        fold_dir = folder / f"fold-{fold}"
        fold_dir.mkdir(parents=True, exist_ok=True)
        _write_jsonl(fold_dir / "train.jsonl", (r for r, f in zip(pool, assignment) if f != fold))
        _write_jsonl(fold_dir / "heldout.jsonl", (r for r, f in zip(pool, assignment) if f == fold))


def _require(session, audit_id: int) -> Audit:
    audit = session.get(Audit, audit_id)
    if audit is None:
        raise NotFound(f"audit {audit_id} does not exist; `workbench data audits` lists them")
    return audit


def _fold_runs(session, audit_id: int) -> list[Run]:
    return list(session.scalars(select(Run).where(Run.audit_id == audit_id).order_by(Run.fold)))


def _state(audit: Audit, runs: list[Run]) -> tuple[str, str]:
    """(state, one line for the user)."""
    folds = audit.spec["folds"]
    if audit.summary is not None:
        message = f"{audit.summary['issues']} suspicious of {audit.summary['examples']} examples"
        accuracy = audit.summary.get("held_out_accuracy")
        found = audit.summary.get("baselines") or {}
        if accuracy is not None and found and audit.summary.get("beats_baseline") is False:
            name, value = max(found.items(), key=lambda item: item[1])
            message += (f"; the fold models' held-out accuracy ({accuracy:.2f}) does not beat a "
                        f"{baselines.NAMES.get(name, name)} baseline ({value:.2f}) on the same folds, so the "
                        "suggestions are guesses, not evidence: use more folds, the standard preset or the "
                        "SetFit method, or more data")
        elif accuracy is not None and accuracy < WEAK_HELD_OUT_ACCURACY:
            message += (f"; the fold models' held-out accuracy is {accuracy:.2f}, too low to trust their "
                        "suggestions: use more data per fold, the standard preset or a stronger model")
        return FINISHED, message
    done = sum(r.status == SUCCEEDED for r in runs)
    if len(runs) < folds:
        return STOPPED, (f"{folds - len(runs)} of the {folds} fold runs were deleted; the audit cannot finish — "
                         "start a new one")
    if any(r.status in (QUEUED, *ACTIVE) for r in runs):
        return RUNNING, f"{done} of {folds} folds done"
    broken = [r for r in runs if r.status in (FAILED, CANCELLED)]
    if broken:
        first = broken[0]
        why = f": {first.error}" if first.error else ""
        return STOPPED, (f"fold {first.fold + 1} (run {first.id}) {first.status}{why} — retry the stopped folds "
                         "to go on")
    return RUNNING, f"{done} of {folds} folds done; ranking the labels"


def _audit_dict(audit: Audit, runs: list[Run], dataset_name: Optional[str]) -> dict[str, Any]:
    state, message = _state(audit, runs)
    folds = audit.spec["folds"]
    # progress: each fold counts for 1/k, a running one for its share of steps done
    progress = sum(1.0 if r.status == SUCCEEDED else float(r.progress or 0.0) for r in runs) / folds
    return {"id": audit.id, "name": audit.name, "dataset_id": audit.dataset_id, "dataset": dataset_name,
            "task": audit.task, "spec": dict(audit.spec), "state": state, "message": message,
            "progress": 1.0 if state == FINISHED else round(min(progress, 0.999), 4),
            "folds": [{"fold": r.fold, "run_id": r.id, "status": r.status, "progress": float(r.progress or 0.0),
                       "error": r.error} for r in runs],
            "summary": audit.summary, "created_at": _iso(audit.created_at), "finished_at": _iso(audit.finished_at)}


def get_audit(wb: Workbench, audit_id: int) -> dict[str, Any]:
    """An audit with its state, progress and folds; computes the ranking when the last fold has succeeded."""
    with wb.db.session() as session:
        audit = _require(session, audit_id)
        runs = _fold_runs(session, audit_id)
        ready = audit.summary is None and len(runs) == audit.spec["folds"] and all(
            r.status == SUCCEEDED for r in runs)
    if ready:
        _rank(wb, audit_id)
    with wb.db.session() as session:
        audit = _require(session, audit_id)
        dataset = session.get(Dataset, audit.dataset_id) if audit.dataset_id else None
        record = _audit_dict(audit, _fold_runs(session, audit_id), dataset.name if dataset else None)
    if record["state"] == RUNNING:
        from workbench.services import runs as runs_service

        # until the last fold ends: the queue played forward (None when a fold ahead has no estimate)
        record["time_left_seconds"] = runs_service.time_left(wb, [f["run_id"] for f in record["folds"]])
    return record


def list_audits(wb: Workbench, dataset: Optional[str] = None, limit: int = 100) -> list[dict[str, Any]]:
    """Audits, newest first; only those of ``dataset`` (an id) when given. Does not rank (cheap)."""
    stmt = select(Audit, Dataset.name).outerjoin(Dataset, Audit.dataset_id == Dataset.id)
    if dataset:
        stmt = stmt.where(Audit.dataset_id == dataset)
    with wb.db.session() as session:
        rows = session.execute(stmt.order_by(Audit.id.desc()).limit(limit)).all()
        return [_audit_dict(audit, _fold_runs(session, audit.id), name) for audit, name in rows]


def cancel_audit(wb: Workbench, audit_id: int) -> dict[str, Any]:
    """Cancel every fold that is still queued or running; finished folds keep their results."""
    with wb.db.session() as session:
        _require(session, audit_id)
        pending = [r.id for r in _fold_runs(session, audit_id) if r.status in (QUEUED, *ACTIVE)]
    for run_id in pending:
        queue.request_cancel(wb.db, run_id)
    return get_audit(wb, audit_id)


def retry_audit(wb: Workbench, audit_id: int) -> dict[str, Any]:
    """Queue the failed and cancelled folds again; they resume from their checkpoints."""
    with wb.db.session() as session:
        _require(session, audit_id)
        stopped = [r.id for r in _fold_runs(session, audit_id) if r.status in (FAILED, CANCELLED)]
    if not stopped:
        raise InvalidState(f"audit {audit_id} has no failed or cancelled fold to retry")
    for run_id in stopped:
        queue.requeue(wb.db, run_id)
    return get_audit(wb, audit_id)


def wait_for_audit(wb: Workbench, audit_id: int, timeout: Optional[float] = None, poll: float = 1.0,
                   on_poll=None) -> dict[str, Any]:
    """Block until the audit has finished or stopped; ``on_poll(record)`` is told each state seen."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        record = get_audit(wb, audit_id)
        if on_poll is not None:
            on_poll(record)
        if record["state"] != RUNNING:
            return record
        if deadline is not None and time.monotonic() >= deadline:
            raise WorkbenchError(f"audit {audit_id} is still running after {timeout:g} s ({record['message']})")
        time.sleep(poll)


def out_of_sample(wb: Workbench, audit_id: int) -> dict[str, Any]:
    """The audit's cross-validated predictions, gathered from its folds.

    Returns ``labels`` (class names), ``records`` (every example, pool order, with its key), ``fold``
    (per record), and for the probability rows ``probs``, ``given`` (class ids), ``record`` (row →
    record) and ``word`` (row → word of the record; -1 for classification).
    """
    with wb.db.session() as session:
        audit = _require(session, audit_id)
        runs = _fold_runs(session, audit_id)
        task, folder, folds = audit.task, Path(audit.folder), audit.spec["folds"]
        outputs = {r.fold: (r.id, r.status, r.output_dir) for r in runs}
    records, fold_of, parts = [], [], []
    for fold in range(folds):
        run_id, status, output_dir = outputs.get(fold, (None, None, None))
        if status != SUCCEEDED:
            raise InvalidState(f"audit {audit_id}: fold {fold + 1} has not succeeded yet")
        heldout = _read_jsonl(folder / f"fold-{fold}" / "heldout.jsonl")
        path = Path(output_dir) / HELDOUT_FILE
        if not path.is_file():
            raise NotFound(f"run {run_id} (fold {fold + 1}) has no {HELDOUT_FILE}; retrying the audit's "
                           "folds cannot bring it back — start a new audit")
        with np.load(path) as data:
            parts.append((len(records), {k: data[k] for k in ("probs", "labels", "record", "word")}))
        records.extend(heldout)
        fold_of.extend([fold] * len(heldout))
    given_values = [_given(r, task) for r in records]
    if task == "text-classification":
        names = sorted({str(v) for v in given_values})
    else:
        names = sorted({str(t) for tags in given_values for t in tags}, key=lambda t: (t != "O", t[2:], t))
    index = {n: i for i, n in enumerate(names)}
    probs, given, record_of, word_of = [], [], [], []
    for offset, part in parts:
        block = np.zeros((len(part["probs"]), len(names)), dtype=np.float64)
        columns = [index.get(str(n)) for n in part["labels"]]
        for source, target in enumerate(columns):
            if target is not None:  # a class only this fold's training part had cannot exist: pool = all
                block[:, target] = part["probs"][:, source]
        probs.append(block)
        rows = part["record"] + offset
        record_of.append(rows)
        word_of.append(part["word"])
        if task == "text-classification":
            given.extend(index[str(given_values[r])] for r in rows)
        else:
            given.extend(index[str(given_values[r][w])] for r, w in zip(rows, part["word"]))
    return {"task": task, "labels": names, "records": records, "fold": fold_of,
            "probs": np.concatenate(probs) if probs else np.zeros((0, len(names))),
            "given": np.asarray(given, dtype=np.int64), "record": np.concatenate(record_of).astype(np.int64),
            "word": np.concatenate(word_of).astype(np.int64)}


def _rank(wb: Workbench, audit_id: int) -> None:
    """Rank the labels from the folds' predictions and keep the result (once; a second caller's
    identical write is harmless: the file is replaced atomically and the summary is set only once)."""
    with wb.db.session() as session:
        audit = _require(session, audit_id)
        method, folder = audit.spec.get("method", label_issues.SELF_CONFIDENCE), Path(audit.folder)
    oos = out_of_sample(wb, audit_id)
    rows = issue_rows(oos, method)
    tmp = folder / (ISSUES_FILE + ".tmp")
    tmp.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    tmp.replace(folder / ISSUES_FILE)
    # How good the fold models were on what they never saw: suggestions of a weak model are guesses.
    held_out_accuracy = float((oos["probs"].argmax(axis=1) == oos["given"]).mean()) if len(oos["given"]) else 0.0
    found = held_out_baselines(oos)
    summary = {"issues": len(rows), "examples": len(oos["records"]), "labels": oos["labels"],
               "method": method, "words": int(len(oos["probs"])) if oos["task"] == "token-classification" else None,
               "held_out_accuracy": round(held_out_accuracy, 4), "baselines": found,
               "beats_baseline": held_out_accuracy > max(found.values()) + baselines.MARGIN}
    with wb.db.session() as session:
        audit = _require(session, audit_id)
        if audit.summary is None:
            audit.summary, audit.finished_at = summary, utcnow()
    log.info("audit %s ranked: %d suspicious of %d examples", audit_id, len(rows), len(oos["records"]))


def held_out_baselines(oos: dict[str, Any]) -> dict[str, float]:
    """The baselines' held-out accuracy on the audit's own folds: each fold predicted by a majority class and,
    for text classification, a TF-IDF + logistic regression fitted on the other folds (``jobs.evaluation.baselines``).
    Token tagging: the most frequent tag, per word. Fold models that do not beat these have learned nothing
    a reviewer should act on."""
    given = oos["given"]
    if not len(given):
        return {baselines.MAJORITY: 0.0}
    if oos["task"] != "text-classification":
        return {baselines.MAJORITY: round(float(np.bincount(given).max() / len(given)), 4)}
    records, folds = oos["records"], np.asarray(oos["fold"])
    hits = {baselines.MAJORITY: 0.0, baselines.TFIDF: 0.0}
    for fold in np.unique(folds):
        held = [r for r, f in zip(records, folds) if f == fold]
        found = baselines.fit_baselines([r for r, f in zip(records, folds) if f != fold], held, multi_label=False)
        for name in hits:
            hits[name] += found[name]["accuracy"] * len(held)
    return {name: round(total / len(records), 4) for name, total in hits.items()}


def _where(key: str) -> tuple[str, int]:
    split, _, position = key.partition(":")
    return split, int(position)


def issue_rows(oos: dict[str, Any], method: str = label_issues.SELF_CONFIDENCE) -> list[dict[str, Any]]:
    """The ranked issues as JSON rows, most suspicious first (``rank`` 1)."""
    names, records = oos["labels"], oos["records"]
    rows: list[dict[str, Any]] = []
    if oos["task"] == "text-classification":
        for issue in label_issues.find_label_issues(oos["probs"], oos["given"], method):
            record_index = int(oos["record"][issue.index])
            record = records[record_index]
            split, position = _where(record[EXAMPLE_KEY])
            rows.append({"rank": len(rows) + 1, "example": record[EXAMPLE_KEY], "split": split,
                         "position": position, "text": record["text"],
                         **({"text_pair": record["text_pair"]} if record.get("text_pair") else {}),
                         "given": names[issue.given], "suggested": names[issue.suggested],
                         "confidence": round(issue.confidence, 4), "quality": round(issue.quality, 4),
                         "fold": int(oos["fold"][record_index])})
        return rows
    sentences = label_issues.sentence_issues(oos["probs"], oos["given"], oos["record"], oos["word"], method)
    for sentence in sentences:
        record = records[sentence.sentence]
        split, position = _where(record[EXAMPLE_KEY])
        words = [{"word": t.index, "token": record["tokens"][t.index], "given": names[t.given],
                  "suggested": names[t.suggested], "confidence": round(t.confidence, 4),
                  "quality": round(t.quality, 4)} for t in sentence.tokens]
        rows.append({"rank": len(rows) + 1, "example": record[EXAMPLE_KEY], "split": split, "position": position,
                     "tokens": record["tokens"], "tags": record["tags"], "words": words,
                     "given": ", ".join(f"{w['token']}: {w['given']}" for w in words),
                     "suggested": ", ".join(f"{w['token']}: {w['suggested']}" for w in words),
                     "confidence": round(sentence.confidence, 4), "quality": round(sentence.quality, 4),
                     "fold": int(oos["fold"][sentence.sentence])})
    return rows


def audit_issues(wb: Workbench, audit_id: int) -> list[dict[str, Any]]:
    """The ranked suspicious examples of a finished audit, each with the user's ``decision``
    (``None`` while undecided) and the ``label`` it will get (relabel only)."""
    record = get_audit(wb, audit_id)
    if record["state"] != FINISHED:
        raise InvalidState(f"audit {audit_id} is not finished: {record['message']}")
    with wb.db.session() as session:
        folder = Path(_require(session, audit_id).folder)
        decisions = {d.example: (d.action, d.label) for d in
                     session.scalars(select(AuditDecision).where(AuditDecision.audit_id == audit_id))}
    path = folder / ISSUES_FILE
    if not path.is_file():
        raise NotFound(f"audit {audit_id}'s ranking is missing from {folder}")
    rows = json.loads(path.read_text(encoding="utf-8"))
    for row in rows:
        action, label = decisions.get(row["example"], (None, None))
        row["decision"], row["new_label"] = action, label
    return rows


def set_decisions(wb: Workbench, audit_id: int, examples: Iterable[str], action: Optional[str],
                  label: Any = None) -> int:
    """Mark flagged examples keep / relabel / drop (``None`` clears the mark). ``label`` is the
    new class for a relabel (default: the suggested one); token tagging always takes the
    suggested tags of its flagged words. Returns how many examples were marked."""
    if action is not None and action not in ACTIONS:
        raise ConfigError(f"unknown decision {action!r}; choose one of {', '.join(ACTIONS)}")
    rows = {row["example"]: row for row in audit_issues(wb, audit_id)}
    examples = list(dict.fromkeys(examples))
    unknown = [e for e in examples if e not in rows]
    if unknown:
        raise NotFound(f"audit {audit_id} did not flag {', '.join(unknown[:5])}")
    with wb.db.session() as session:
        audit = _require(session, audit_id)
        task, labels = audit.task, audit.summary.get("labels") or []
        if label is not None and (task != "text-classification" or str(label) not in labels):
            raise ConfigError(f"{label!r} is not one of the dataset's labels ({', '.join(labels[:20])})"
                              if task == "text-classification" else
                              "a tagged sentence is relabelled with its suggested tags; no label can be given")
        for example in examples:
            current = session.get(AuditDecision, (audit_id, example))
            if action is None:
                if current is not None:
                    session.delete(current)
                continue
            new_label = (str(label) if label is not None else rows[example]["suggested"]) \
                if action == RELABEL and task == "text-classification" else None
            if current is None:
                session.add(AuditDecision(audit_id=audit_id, example=example, action=action, label=new_label))
            else:
                current.action, current.label = action, new_label
    return len(examples)


def corrected_records(wb: Workbench, audit_id: int) -> tuple[dict[str, list[dict]], dict[str, int]]:
    """The dataset with the decisions applied: ``({"train": [...], "validation": [...]}, counts)``.

    Read from the audit's own fold files, so it works even after the original dataset was deleted.
    """
    rows = {row["example"]: row for row in audit_issues(wb, audit_id)}
    with wb.db.session() as session:
        audit = _require(session, audit_id)
        folder, folds, task = Path(audit.folder), audit.spec["folds"], audit.task
    splits: dict[str, dict[int, dict]] = {"train": {}, "validation": {}}
    for fold in range(folds):
        for record in _read_jsonl(folder / f"fold-{fold}" / "heldout.jsonl"):
            split, position = _where(record.pop(EXAMPLE_KEY))
            key = f"{split}:{position}"
            decision = rows.get(key, {}).get("decision")
            if decision == DROP:
                continue
            if decision == RELABEL:
                record = _relabel(record, rows[key], task)
            splits[split][position] = record
    counts = {action: sum(1 for r in rows.values() if r["decision"] == action) for action in ACTIONS}
    return {split: [records[i] for i in sorted(records)] for split, records in splits.items()}, counts


def _relabel(record: dict, row: dict, task: str) -> dict:
    if task == "text-classification":
        return {**record, "label": row["new_label"] or row["suggested"]}
    tags = list(record["tags"])
    for word in row["words"]:
        tags[word["word"]] = word["suggested"]
    return {**record, "tags": tags}


def save_corrected(wb: Workbench, audit_id: int, name: str = "", *, owner_id: Optional[int] = None) -> dict[str, Any]:
    """Write the corrected copy as a new dataset (a new id; the original is never changed) and
    return its summary with the counts of relabelled, dropped and kept examples."""
    from workbench.services import datasets as datasets_service

    splits, counts = corrected_records(wb, audit_id)
    if not counts[RELABEL] and not counts[DROP]:
        raise InvalidState("nothing to save: no flagged example is marked relabel or drop")
    with wb.db.session() as session:
        audit = _require(session, audit_id)
        dataset = session.get(Dataset, audit.dataset_id) if audit.dataset_id else None
        base_name = dataset.name if dataset else audit.name
        options = ((dataset.stats or {}).get("options") or {}) if dataset else {}
        task = audit.task
    title = name.strip() or f"{base_name} (corrected by audit {audit_id})"
    if len(title) > 200:
        raise ConfigError(f"a dataset name has at most 200 characters (this one has {len(title)})")
    with tempfile.TemporaryDirectory(dir=wb.settings.home, prefix="corrected-") as tmp:
        train = Path(tmp) / "train.jsonl"
        _write_jsonl(train, splits["train"])
        validation = None
        if splits["validation"]:
            validation = Path(tmp) / "validation.jsonl"
            _write_jsonl(validation, splits["validation"])
        summary = datasets_service.import_dataset(
            wb, train, task, name=title, format="jsonl", validation_path=validation,
            validation_fraction=0.0 if validation is None else float(options.get("validation_fraction", 0.1)),
            seed=int(options.get("seed", 13)), owner_id=owner_id)
    log.info("audit %s: corrected copy saved as dataset %s (%s)", audit_id, summary.id, counts)
    return {**summary.to_dict(), "counts": counts}
