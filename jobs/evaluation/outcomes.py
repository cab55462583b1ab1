"""Per-example outcomes of an evaluation, saved beside its metrics, and the intervals computed from them.

    save_outcomes(output_dir, evaluation) -> {"metrics_ci": {...}}   (empty when the task has none)

``outcomes.npz`` holds, per unit (an example; a sentence for tagging; a question for QA):

- ``ids``: a digest of the unit's input and gold answer (with ``#2``, ``#3``... for repeats), so two runs
  evaluated on the same examples are paired by content, never by position;
- text classification: ``gold`` and ``predicted`` class ids (multi-hot rows for multi-label) and ``labels``;
- token classification: ``words`` and ``correct_words``, and for BIO tags the entity ``tp``/``fp``/``fn``
  (seqeval's entities, whose sums give the run's entity F1);
- question answering: ``exact_match`` and ``f1`` (0..1, the best over the gold answers).

- masked LM: per validation block (a window of ``max_length`` tokens, masked once with a fixed seed),
  ``loss_sum`` (the summed cross-entropy over its masked tokens) and ``tokens`` (how many): perplexity is
  exp(Σ loss_sum / Σ tokens), resampled by blocks.

They are read back from the evaluation's rows (``predictions.jsonl``'s), which every task writes in
record order: a SetFit run, an engine run and an evaluation job all get them the same way. A masked-LM
evaluation has no rows: its task module hands its per-block arrays over as ``Evaluation.outcomes``.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Optional

import numpy as np

from jobs.evaluation import stats

log = logging.getLogger(__name__)
OUTCOMES_FILE = "outcomes.npz"
TASK_OF_ROW = (("tokens", "token-classification"), ("question", "question-answering"),
               ("text", "text-classification"))
# what identifies a unit: its input and its gold answer
ID_KEYS = {"text-classification": ("text", "text_pair", "gold"), "token-classification": ("tokens", "gold"),
           "question-answering": ("id", "question", "context", "gold")}
# metrics whose values are on a 0..100 scale (the rest are fractions)
PERCENT_METRICS = {"exact_match", "f1"}


def task_of(rows: list[dict]) -> Optional[str]:
    """The task an evaluation's rows come from (None: no rows, e.g. masked-LM)."""
    if not rows:
        return None
    return next((task for key, task in TASK_OF_ROW if key in rows[0]), None)


def unit_ids(rows: list[dict], task: str) -> list[str]:
    """A short digest of each row's input and gold answer; a repeated unit gets ``#2``, ``#3``..."""
    seen: dict[str, int] = {}
    ids = []
    for row in rows:
        content = json.dumps([row.get(key) for key in ID_KEYS[task]], ensure_ascii=False, sort_keys=True)
        digest = hashlib.sha1(content.encode("utf-8")).hexdigest()[:16]
        seen[digest] = seen.get(digest, 0) + 1
        ids.append(digest if seen[digest] == 1 else f"{digest}#{seen[digest]}")
    return ids


def outcomes_from_rows(rows: list[dict], tables: dict) -> Optional[dict]:
    """The arrays of ``outcomes.npz`` for an evaluation's rows and tables; None for a task without rows."""
    task = task_of(rows)
    if task is None:
        return None
    out: dict = {"task": np.asarray(task), "ids": np.asarray(unit_ids(rows, task))}
    if task == "text-classification":
        labels = [entry["label"] for entry in tables.get("per_class", [])]
        index = {name: i for i, name in enumerate(labels)}
        out["labels"] = np.asarray(labels, dtype=str)
        if isinstance(rows[0]["gold"], list):
            def hot(names):
                vector = np.zeros(len(labels), dtype=np.int8)
                vector[[index[n] for n in names]] = 1
                return vector
            out["gold"] = np.stack([hot(r["gold"]) for r in rows])
            out["predicted"] = np.stack([hot(r["predicted"]) for r in rows])
        else:
            out["gold"] = np.asarray([index[r["gold"]] for r in rows], dtype=np.int32)
            out["predicted"] = np.asarray([index[r["predicted"]] for r in rows], dtype=np.int32)
    elif task == "token-classification":
        out["words"] = np.asarray([len(r["gold"]) for r in rows], dtype=np.int32)
        out["correct_words"] = np.asarray([sum(g == p for g, p in zip(r["gold"], r["predicted"])) for r in rows],
                                          dtype=np.int32)
        if "gold_entities" in rows[0]:
            counts = [_entity_counts(r["gold_entities"], r["predicted_entities"]) for r in rows]
            for name, column in zip(("tp", "fp", "fn"), np.asarray(counts, dtype=np.int32).T):
                out[name] = column
    else:
        from jobs.tasks.qa import squad_scores

        scores = np.asarray([squad_scores(r["predicted"], r["gold"]) for r in rows], dtype=np.float64)
        out["exact_match"], out["f1"] = scores[:, 0], scores[:, 1]
    return out


def _entity_counts(gold: list[dict], predicted: list[dict]) -> tuple[int, int, int]:
    """(tp, fp, fn) of one sentence: an entity is right when its type and both ends match (seqeval)."""
    def spans(entities):
        return {(e["type"], e["start"], e["end"]) for e in entities}
    gold_set, predicted_set = spans(gold), spans(predicted)
    tp = len(gold_set & predicted_set)
    return tp, len(predicted_set) - tp, len(gold_set) - tp


def metric_columns(outcomes: dict) -> dict[str, tuple[str, np.ndarray]]:
    """Each headline metric the outcomes give: the ``jobs.evaluation.stats`` statistic's name and its per-unit columns."""
    task = str(outcomes["task"])
    ones = np.ones(len(outcomes["ids"]))
    if task == "text-classification":
        gold, predicted = outcomes["gold"], outcomes["predicted"]
        correct = (gold == predicted).all(axis=1) if gold.ndim == 2 else gold == predicted
        found = {"accuracy": ("ratio", np.stack([correct, ones], axis=1)),
                 "f1_macro": ("macro_f1", stats.class_counts(gold, predicted, len(outcomes["labels"])))}
        if gold.ndim == 2:
            found["f1_micro"] = ("f1", stats.class_counts(gold, predicted, gold.shape[1]).reshape(
                len(gold), -1, 3).sum(axis=1))
        return found
    if task == "token-classification":
        found = {}
        if "tp" in outcomes:
            counts = np.stack([outcomes["tp"], outcomes["fp"], outcomes["fn"]], axis=1)
            found.update(entity_f1=("f1", counts), entity_precision=("precision", counts),
                         entity_recall=("recall", counts))
        found["token_accuracy"] = ("ratio", np.stack([outcomes["correct_words"], outcomes["words"]], axis=1))
        return found
    if task == "question-answering":
        return {name: ("ratio", np.stack([100.0 * outcomes[name], ones], axis=1)) for name in ("f1", "exact_match")}
    if task == "masked-lm":
        return {"perplexity": ("perplexity", np.stack([outcomes["loss_sum"], outcomes["tokens"]], axis=1))}
    return {}


def correct_per_unit(outcomes: dict) -> Optional[np.ndarray]:
    """Right or wrong per unit, for McNemar's test of an accuracy (None where the task has no such outcome)."""
    if str(outcomes["task"]) != "text-classification":
        return None
    gold, predicted = outcomes["gold"], outcomes["predicted"]
    return (gold == predicted).all(axis=1) if gold.ndim == 2 else gold == predicted


def intervals(outcomes: dict, resamples: int = stats.RESAMPLES, level: float = stats.LEVEL,
              seed: int = stats.SEED) -> dict:
    """``metrics_ci``: per headline metric ``{"low", "high", "resamples", "level"}`` (percentile bootstrap)."""
    found = {}
    for name, (statistic, columns) in metric_columns(outcomes).items():
        result = stats.bootstrap_ci(columns, stats.STATISTICS[statistic], resamples, level, seed)
        found[name] = {key: result[key] for key in ("low", "high", "resamples", "level")}
    return found


def write_outcomes(path: Path, outcomes: dict) -> None:
    """Written under a temporary name and renamed, so a reader sees all of it or none."""
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **outcomes)
    tmp.replace(path)


def read_outcomes(path: Path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def save_outcomes(output_dir: Path, evaluation) -> dict:
    """Write ``outcomes.npz`` for ``evaluation`` and return ``{"metrics_ci": ...}`` to add to its metrics.

    Never fails the evaluation it comes with: a problem is logged and the run keeps its scores without
    intervals ({} is returned).
    """
    try:
        outcomes = getattr(evaluation, "outcomes", None) or outcomes_from_rows(evaluation.predictions,
                                                                               evaluation.tables)
        if outcomes is None:
            return {}
        write_outcomes(Path(output_dir) / OUTCOMES_FILE, outcomes)
        return {"metrics_ci": intervals(outcomes)}
    except Exception:  # noqa: BLE001 - the scores stand without their intervals
        log.exception("the per-example outcomes could not be saved")
        return {}
