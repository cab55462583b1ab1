"""Parity of an exported variant with PyTorch: the run's validation split through the project's own predictor.

The split goes through ``jobs.predict.infer.TorchPredictor`` twice: once with the run's torch model, once
with the same predictor holding an ``OnnxModel`` instead (``with_model``). Tokenization, windows, calibration
and post-processing are then one code path, so whatever differs is the exported graph's numbers. Per variant:

- ``agreement``: the share of rows whose decision equals PyTorch's: the class (or set of classes), the tag of
  every word, the answer text, the top fill of every mask;
- ``max_abs_diff``: the largest difference between the scores both give for the same thing (class
  probabilities; entity, answer and fill scores where both found the same entity, answer or fill);
- ``metric``: the task's headline metric against the gold labels, as a fraction (``METRIC_NAMES``).

Masked-LM records have no gold fills: ``mask_words`` hides a seeded ~15 % of each text's one-token words.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import random
import re
from typing import Any, Callable, Optional, Sequence

import numpy as np

from jobs.evaluation.postprocess import MASK_PLACEHOLDER
from jobs.progress import Cancelled, report_phase
from storage.errors import TrainingError

log = logging.getLogger(__name__)

CHECKING_PARITY = "checking parity"
BATCH_ROWS = 32  # rows per predict call: progress and cancel between them
MASK_SHARE, MAX_MASKS, MASK_WITHIN_WORDS = 0.15, 3, 64  # masks per text; only words early enough to survive truncation
METRIC_NAMES = {"text-classification": "accuracy", "token-classification": "entity_f1",
                "question-answering": "squad_f1", "masked-lm": "mask_accuracy"}
_WORD = re.compile(r"[^\W\d_]+")  # letters only: a number or a piece of punctuation is no word to guess


@dataclasses.dataclass
class Split:
    """The validation split as predictor rows, the gold answer of each, and the metric they are scored on."""

    task: str
    rows: list[dict]
    gold: list[Any]
    metric: str


@dataclasses.dataclass
class Parity:
    """One model's results on the split, and how they compare with PyTorch's."""

    metric: float
    agreement: float = 1.0
    max_abs_diff: float = 0.0


def validation_split(task: str, records: Sequence[dict], tokenizer, *, multi_label: bool = False,
                     seed: int = 42) -> Split:
    """Predictor rows (``jobs.predict.inputs`` shapes) and gold answers from the task module's records."""
    if task == "text-classification":
        rows = [{"text": r["text"], **({"text_pair": r["text_pair"]} if r.get("text_pair") else {})}
                for r in records]
        gold = [sorted(map(str, r["label"])) if isinstance(r["label"], list) else str(r["label"]) for r in records]
        return Split(task, rows, gold, "f1_micro" if multi_label else "accuracy")
    if task == "token-classification":
        from jobs.tasks.token_classification import is_bio

        bio = all(is_bio(r["tags"]) for r in records)
        return Split(task, [{"tokens": list(r["tokens"])} for r in records], [list(r["tags"]) for r in records],
                     "entity_f1" if bio else "token_accuracy")
    if task == "question-answering":
        return Split(task, [{"question": r["question"], "context": r["context"]} for r in records],
                     [list(r["answers"]["text"]) for r in records], "squad_f1")
    if task == "masked-lm":
        rows, gold = mask_words([r["text"] for r in records], tokenizer, seed)
        if not rows:
            raise TrainingError("the validation split has no word of one token to hide, so the masked LM's "
                                "fills cannot be compared", "export a run whose validation texts hold words")
        return Split(task, rows, gold, "mask_accuracy")
    raise TrainingError(f"the parity check does not handle the task {task!r}", "export a run of another task")


def mask_words(texts: Sequence[str], tokenizer, seed: int) -> tuple[list[dict], list[list[str]]]:
    """Texts with a seeded ~15 % (1 to ``MAX_MASKS``) of their one-token words replaced by ``[MASK]``, and the
    hidden words as the tokenizer spells them; texts without such a word are left out."""
    rng = random.Random(seed)
    rows, gold = [], []
    for text in texts:
        candidates = []
        for match in list(_WORD.finditer(text))[:MASK_WITHIN_WORDS]:
            pieces = tokenizer.tokenize(match.group())
            if len(pieces) == 1 and tokenizer.convert_tokens_to_ids(pieces[0]) != tokenizer.unk_token_id:
                candidates.append((match.span(), pieces[0]))
        if not candidates:
            continue
        count = min(MAX_MASKS, len(candidates), max(1, round(MASK_SHARE * len(candidates))))
        chosen = sorted(rng.sample(candidates, count))
        masked, last = [], 0
        for (start, end), _piece in chosen:
            masked.append(text[last:start] + MASK_PLACEHOLDER)
            last = end
        rows.append({"text": "".join(masked) + text[last:]})
        gold.append([tokenizer.decode([tokenizer.convert_tokens_to_ids(piece)]).strip() for _, piece in chosen])
    return rows, gold


def with_model(predictor, model):
    """``predictor`` (a ``TorchPredictor``) answering with ``model`` (an ``OnnxModel``): same tokenizer, limits,
    calibration and post-processing, so only the model's numbers differ."""
    twin = copy.copy(predictor)
    twin.model = model
    return twin


def predict_split(predictor, split: Split, reporter, progress: Callable[[int], None]) -> list[dict]:
    """Every row of ``split`` in batches of ``BATCH_ROWS``; ``progress(rows)`` after each, and a
    ``Cancelled`` between batches when the reporter asks to stop."""
    results: list[dict] = []
    for start in range(0, len(split.rows), BATCH_ROWS):
        if reporter.cancel_requested():
            raise Cancelled()
        batch = split.rows[start:start + BATCH_ROWS]
        results.extend(predictor.predict(batch))
        progress(len(batch))
    return results


class Progress:
    """``CHECKING_PARITY`` with rows done of all the models' rows together."""

    def __init__(self, reporter, total: int):
        self.reporter, self.total, self.done = reporter, total, 0
        report_phase(reporter, CHECKING_PARITY, 0, total)

    def __call__(self, rows: int) -> None:
        self.done += rows
        report_phase(self.reporter, CHECKING_PARITY, self.done, self.total)


# ------------------------------------------------------------ comparing results

def decision(task: str, result: dict) -> Any:
    """What a row decides, in a form compared with ``==``."""
    if task == "text-classification":
        label = result["label"]
        return sorted(label) if isinstance(label, list) else label
    if task == "token-classification":
        return list(result["tags"])
    if task == "question-answering":
        return result["answer"]
    return [fill["candidates"][0]["token"] if fill["candidates"] else None for fill in result["fills"] or []]


def scores(task: str, result: dict) -> dict[Any, float]:
    """The row's scores, keyed by what they score, so that two models' results compare like with like."""
    if task == "text-classification":
        return {name: float(p) for name, p in result["scores"].items()}
    if task == "token-classification":
        return {(e["start"], e["end"], e["label"]): float(e["score"]) for e in result["entities"]}
    if task == "question-answering":
        return {(result["start"], result["end"]): float(result["score"])}
    return {(fill["mask"], c["token"]): float(c["score"]) for fill in result["fills"] or []
            for c in fill["candidates"]}


def compare(split: Split, reference: Sequence[dict], results: Sequence[dict]) -> Parity:
    """``results`` against PyTorch's ``reference`` and against the gold answers."""
    same = sum(decision(split.task, a) == decision(split.task, b) for a, b in zip(reference, results))
    diff = 0.0
    for a, b in zip(reference, results):
        ours, theirs = scores(split.task, a), scores(split.task, b)
        for key in ours.keys() & theirs.keys():
            diff = max(diff, abs(ours[key] - theirs[key]))
    return Parity(metric=task_metric(split, results), agreement=same / max(1, len(results)), max_abs_diff=diff)


def task_metric(split: Split, results: Sequence[dict]) -> float:
    """The split's headline metric of ``results`` against the gold answers, as a fraction."""
    task, gold = split.task, split.gold
    predicted = [decision(task, r) for r in results]
    if task == "text-classification":
        if split.metric == "f1_micro":
            return _micro_f1(gold, predicted)
        return float(np.mean([p == g for p, g in zip(predicted, gold)]))
    if task == "token-classification":
        from jobs.tasks.token_classification import word_metrics

        padded = [list(p) + ["O"] * (len(g) - len(p)) for p, g in zip(predicted, gold)]
        metrics, _tables = word_metrics(gold, padded, split.metric == "entity_f1", with_tables=False)
        return float(metrics[split.metric])
    if task == "question-answering":
        from jobs.tasks.qa import squad_scores

        return float(np.mean([squad_scores(p, g)[1] for p, g in zip(predicted, gold)]))
    hits = [i < len(p) and p[i] == word for p, g in zip(predicted, gold) for i, word in enumerate(g)]
    return float(np.mean(hits)) if hits else 0.0


def _micro_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> float:
    from sklearn.metrics import f1_score
    from sklearn.preprocessing import MultiLabelBinarizer

    binarizer = MultiLabelBinarizer().fit([*gold, *predicted])
    if not len(binarizer.classes_):  # no class anywhere: every row rightly empty
        return 1.0
    return float(f1_score(binarizer.transform(gold), binarizer.transform(predicted), average="micro",
                          zero_division=0))


def metric_of(split: Split, results: Sequence[dict]) -> Parity:
    """PyTorch's own line: its metric, agreeing with itself."""
    return Parity(metric=task_metric(split, results))


def describe(parity: Optional[Parity]) -> str:
    return "" if parity is None else (f"agreement {parity.agreement:.4f}, max |score diff| "
                                      f"{parity.max_abs_diff:.2e}, metric {parity.metric:.4f}")
