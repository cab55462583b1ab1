"""Baselines beside every classification score, and the verdict on whether a run learned anything.

A score means little alone: 0.87 accuracy is nothing on a set where 87 % of the messages are "ham".
Each text-classification run fits, in seconds, on its own training split and scores on its own
validation split (an evaluation job: on its test set, ``jobs.predict.evaluate``):

- ``majority``: always the most frequent training label (multi-label: each label that most training
  examples carry);
- ``tfidf_logreg``: TF-IDF of words and word pairs with a logistic regression (scikit-learn; one
  regression per label for multi-label data);
- ``frozen_embeddings``: the run's own starting model, frozen, as a feature extractor — each text (a
  pair: both texts, as the model reads them) embedded once, pooled as a sentence-transformers model
  pools (its own mean or [CLS]; any other encoder: the masked mean), and a logistic regression on
  the embeddings. On 300 unseen movie-review snippets it scored 0.690 against the default run's
  0.678 (issue 38): a baseline of seconds that a fine-tuned run must beat. Each text is read as the run
  read it: cut at the run's ``max_length``, or, for a run that reads long documents in windows, in the
  same windows with the document's embedding the mean of its windows'. At most ``FROZEN_MAX_TRAIN``
  training and ``FROZEN_MAX_EVAL`` scored examples are embedded (seeded samples beyond that), so it
  stays cheap on a CPU.

``verdict`` compares the run with them on the same examples, with a paired test (McNemar's exact test on
the examples each got right; a paired bootstrap of macro F1 for multi-label runs): a run is *better* than a
baseline only when the test says so at ``SIGNIFICANCE``, *worse* likewise, and *level* otherwise. A run
that predicts one class for nearly every example, or does no better than the majority class, did not learn;
one worse than a baseline is below it; one level with a baseline has not shown it beats it. Each message
reads after "This run …" and says what to try.
"""
from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections import Counter
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

log = logging.getLogger(__name__)

MAJORITY, TFIDF, FROZEN = "majority", "tfidf_logreg", "frozen_embeddings"
NAMES = {MAJORITY: "majority class", TFIDF: "TF-IDF + logistic regression",
         FROZEN: "frozen embeddings + logistic regression"}
# The frozen-embedding baseline embeds at most this many training examples to fit its regression and this many
# validation (or test) examples to score it — seeded samples beyond that. Measured on the shared 2-core machine at
# load 11 (niced): 2,000 + 1,357 tweets took 589 s with the packaged MiniLM, 100 + 419 took 6 s at load 1; so
# 1,000 of each (the sentence head's probe takes 1,000 too), about a minute on a busy CPU, seconds on a GPU.
FROZEN_MAX_TRAIN = 1000
FROZEN_MAX_EVAL = 1000
# Tokens per text where the caller names no max_length (a run gives its own), and texts (or windows) per
# forward pass: bench/small_data.py's "frozen_lr", whose figures the docs quote, is this same code.
FROZEN_MAX_LENGTH = 128
FROZEN_BATCH = 64
# records -> one frozen embedding a row (jobs.training.sentence_model.frozen_embedder builds one for a model)
Embedder = Callable[[Sequence[Mapping[str, Any]]], np.ndarray]
# A run is better or worse than a baseline when a paired test on the same examples gives p below this
SIGNIFICANCE = 0.05
BETTER, LEVEL, WORSE = "better", "level", "worse"
# A run "predicts one class" when this share of its validation predictions is one label ...
ONE_CLASS_SHARE = 0.95
# ... and that label is not itself nearly all of the gold labels.
# "Does not beat" the majority: within this margin of its accuracy.
MARGIN = 0.005
LEARNED, BELOW_BASELINE, DID_NOT_LEARN = "learned", "below_baseline", "did_not_learn"
# not shown to beat a baseline: the paired test cannot tell the two apart on these examples
LEVEL_WITH_BASELINE = "level_with_baseline"
# the statuses every view marks with ⚠
WARNED = (DID_NOT_LEARN, BELOW_BASELINE, LEVEL_WITH_BASELINE)


def _text(record: Mapping[str, Any]) -> str:
    pair = record.get("text_pair")
    return f"{record['text']} [SEP] {pair}" if pair else str(record["text"])


def _label_sets(records: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    return [[str(v) for v in (r["label"] if isinstance(r["label"], list) else [r["label"]])] for r in records]


def _scores(gold, predicted, labels: list[str], multi_label: bool) -> dict[str, float]:
    from sklearn.metrics import f1_score

    if multi_label:
        accuracy = float((gold == predicted).all(axis=1).mean())
        f1 = float(f1_score(gold, predicted, average="macro", zero_division=0))
    else:
        accuracy = float((gold == predicted).mean())
        f1 = float(f1_score(gold, predicted, average="macro", labels=list(range(len(labels))), zero_division=0))
    return {"accuracy": round(accuracy, 4), "f1_macro": round(f1, 4)}


@dataclasses.dataclass
class Fitted:
    """The baselines' scores and what each predicted, kept to compare the run with them example by example."""

    scores: dict[str, Any]  # name → {"accuracy", "f1_macro", ...}: what the run's metrics keep
    predicted: dict[str, np.ndarray]  # name → label ids (multi-hot rows) of the examples it scored
    rows: dict[str, np.ndarray]  # name → which examples of the scored split those are (all but a capped one)
    gold: np.ndarray  # the scored split's label ids (multi-hot rows)
    labels: list[str]  # the label of each id
    multi_label: bool


def fit_baselines(train: Sequence[Mapping[str, Any]], validation: Sequence[Mapping[str, Any]],
                  multi_label: Optional[bool] = None, *, embed: Optional[Embedder] = None,
                  seed: int = 0) -> dict[str, Any]:
    """The baselines fitted on ``train`` and scored on ``validation``: ``fit(...).scores``."""
    return fit(train, validation, multi_label, embed=embed, seed=seed).scores


def fit(train: Sequence[Mapping[str, Any]], validation: Sequence[Mapping[str, Any]],
        multi_label: Optional[bool] = None, *, embed: Optional[Embedder] = None, seed: int = 0) -> Fitted:
    """Majority class, TF-IDF + logistic regression and, given ``embed`` (the frozen embeddings of the run's
    starting model, ``jobs.training.sentence_model.frozen_embedder``), frozen embeddings + logistic regression,
    fitted on ``train`` and scored on ``validation``.

    Scores: ``{"majority": {"accuracy", "f1_macro"}, "tfidf_logreg": {..., "seconds"}, "frozen_embeddings":
    {..., "seconds", "train_examples", "examples", "read"}}`` ("read": how each text was read, the embedder's
    ``reading`` where it has one); labels of the validation split that never occur in
    training count as errors, as they do for the run. A frozen-embedding baseline that fails (a model that
    cannot be loaded) is logged and left out: the others stand without it.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import MultiLabelBinarizer

    if multi_label is None:
        multi_label = any(isinstance(r["label"], list) for r in train)
    train_sets, val_sets = _label_sets(train), _label_sets(validation)
    started = time.perf_counter()
    if multi_label:
        binarizer = MultiLabelBinarizer().fit(train_sets + val_sets)
        labels = list(binarizer.classes_)
        y_train, y_val = binarizer.transform(train_sets), binarizer.transform(val_sets)
        majority = np.tile((y_train.mean(axis=0) > 0.5).astype(int), (len(y_val), 1))
    else:
        labels = sorted({s[0] for s in train_sets} | {s[0] for s in val_sets})
        index = {name: i for i, name in enumerate(labels)}
        y_train = np.asarray([index[s[0]] for s in train_sets])
        y_val = np.asarray([index[s[0]] for s in val_sets])
        majority = np.full(len(y_val), Counter(y_train.tolist()).most_common(1)[0][0])
    every = np.arange(len(y_val))
    out = Fitted({MAJORITY: _scores(y_val, majority, labels, multi_label)}, {MAJORITY: majority}, {MAJORITY: every},
                 y_val, labels, multi_label)
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True, max_features=200_000)
    x_train = vectorizer.fit_transform([_text(r) for r in train])
    x_val = vectorizer.transform([_text(r) for r in validation])
    predicted = _linear(x_train, y_train, x_val, multi_label, C=10.0, max_iter=1000)
    out.scores[TFIDF] = {**_scores(y_val, predicted, labels, multi_label),
                         "seconds": round(time.perf_counter() - started, 3)}
    out.predicted[TFIDF], out.rows[TFIDF] = predicted, every
    if embed is not None:
        try:
            _frozen(out, train, validation, y_train, embed, seed)
        except Exception:  # noqa: BLE001 - the run keeps its other baselines
            log.exception("the frozen-embedding baseline could not be fitted")
    return out


def _linear(x_train, y_train: np.ndarray, x_val, multi_label: bool, *, C: float, max_iter: int) -> np.ndarray:
    """A logistic regression's predictions (one per label for multi-label data); a label every or no training
    example carries, or a single training class, is predicted as it is."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    n_val = x_val.shape[0]
    classifier = LogisticRegression(max_iter=max_iter, C=C)
    if multi_label:
        keep = y_train.std(axis=0) > 0
        predicted = np.tile(y_train[0], (n_val, 1))
        if keep.any():
            predicted[:, keep] = OneVsRestClassifier(classifier).fit(x_train, y_train[:, keep]).predict(x_val)
        return predicted
    if len(set(y_train.tolist())) < 2:
        return np.full(n_val, y_train[0])
    return classifier.fit(x_train, y_train).predict(x_val)


def _sample(n: int, cap: int, seed: int) -> np.ndarray:
    """All of ``n`` rows, or a seeded sample of ``cap`` of them in their order."""
    if n <= cap:
        return np.arange(n)
    return np.asarray(sorted(random.Random(seed).sample(range(n), cap)))


def _frozen(out: Fitted, train, validation, y_train: np.ndarray, embed: Embedder, seed: int) -> None:
    """The frozen-embedding baseline into ``out``: at most ``FROZEN_MAX_TRAIN`` training examples embedded to
    fit a logistic regression (bench/small_data.py's C and iterations), at most ``FROZEN_MAX_EVAL`` scored."""
    started = time.perf_counter()
    fit_rows, eval_rows = _sample(len(train), FROZEN_MAX_TRAIN, seed), _sample(len(validation), FROZEN_MAX_EVAL, seed)
    x = embed([train[i] for i in fit_rows] + [validation[i] for i in eval_rows])
    predicted = _linear(x[:len(fit_rows)], y_train[fit_rows], x[len(fit_rows):], out.multi_label, C=1.0,
                        max_iter=2000)
    out.scores[FROZEN] = {**_scores(out.gold[eval_rows], predicted, out.labels, out.multi_label),
                          "seconds": round(time.perf_counter() - started, 3),
                          "train_examples": len(fit_rows), "examples": len(eval_rows)}
    if getattr(embed, "reading", None):  # how each text was read: as the run read it
        out.scores[FROZEN]["read"] = embed.reading
    out.predicted[FROZEN], out.rows[FROZEN] = predicted, eval_rows
    log.info("frozen-embedding baseline: %d training and %d scored examples embedded in %.1f s",
             len(fit_rows), len(eval_rows), out.scores[FROZEN]["seconds"])


# --- the run against each baseline, on the same examples ----------------------------------------------

def compare_with_run(fitted: Fitted, run_predicted: Sequence[Any]) -> None:
    """Add to each baseline's scores ``"paired"``: how the run stands against it on the examples both scored.

    ``run_predicted`` is the run's prediction per example of the scored split, in its order (a label, or a
    list of labels for multi-label). Single-label: McNemar's exact test on the examples only one of the two
    got right, ``{"run", "p_value", "examples", "run_only", "baseline_only"}``; multi-label: a paired
    bootstrap of macro F1, ``{"run", "p_value", "examples", "difference", "low", "high"}`` (run minus
    baseline). ``"run"`` is ``better``/``worse`` when p < ``SIGNIFICANCE``, else ``level``.
    """
    from jobs.evaluation import stats

    if len(run_predicted) != len(fitted.gold):
        log.warning("the run predicted %d examples and the baselines scored %d: no paired comparison",
                    len(run_predicted), len(fitted.gold))
        return
    index = {name: i for i, name in enumerate(fitted.labels)}
    if fitted.multi_label:
        run = np.zeros_like(fitted.gold)
        for row, names in enumerate(run_predicted):
            for name in (names if isinstance(names, list) else [names]):
                if str(name) in index:
                    run[row, index[str(name)]] = 1
    else:
        run = np.asarray([index.get(str(name), -1) for name in run_predicted])
    for name, predicted in fitted.predicted.items():
        rows = fitted.rows[name]
        gold, mine = fitted.gold[rows], run[rows]
        if fitted.multi_label:
            width = len(fitted.labels)
            found = stats.paired_bootstrap(stats.class_counts(gold, predicted, width),
                                           stats.class_counts(gold, mine, width), stats.macro_f1)
            p, sign = found["p_value"], found["difference"]
            paired = {"difference": round(found["difference"], 4), "low": round(found["low"], 4),
                      "high": round(found["high"], 4)}
        else:
            run_only, baseline_only = stats.discordant(mine == gold, predicted == gold)
            p, sign = stats.mcnemar_exact(run_only, baseline_only), run_only - baseline_only
            paired = {"run_only": run_only, "baseline_only": baseline_only}
        outcome = (BETTER if sign > 0 else WORSE) if p < SIGNIFICANCE and sign != 0 else LEVEL
        fitted.scores[name]["paired"] = {"run": outcome, "p_value": round(float(p), 4), "examples": len(rows),
                                         **paired}


def standing(metrics: Mapping[str, Any], entry: Mapping[str, Any], key: str) -> tuple[str, str]:
    """(``better``/``level``/``worse``, how that was told) of the run against one baseline's ``entry`` on ``key``.

    The paired test kept with the baseline when there is one; else (a run judged before they were kept)
    whether the baseline's score lies inside the run's own interval (``metrics_ci``); else the two scores.
    """
    paired = entry.get("paired")
    if isinstance(paired, Mapping) and paired.get("run") in (BETTER, LEVEL, WORSE):
        return str(paired["run"]), _paired_text(paired)
    score, base = float(metrics.get(key, 0.0)), float(entry.get(key, 0.0))
    ci = (metrics.get("metrics_ci") or {}).get(key)
    if isinstance(ci, Mapping) and isinstance(ci.get("low"), (int, float)) and isinstance(ci.get("high"), (int, float)):
        where = f"the run's {float(ci.get('level') or 0.95) * 100:g} % interval {ci['low']:.3f}–{ci['high']:.3f}"
        if base > ci["high"]:
            return WORSE, f"above {where}"
        if base < ci["low"]:
            return BETTER, f"below {where}"
        return LEVEL, f"inside {where}"
    return (BETTER if score > base else WORSE if score < base else LEVEL), "no interval to tell a difference by"


def _paired_text(paired: Mapping[str, Any]) -> str:
    p = float(paired.get("p_value", 1.0))
    p_text = "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
    if "run_only" in paired:
        return (f"McNemar's exact test on the same {int(paired.get('examples', 0)):,} examples: {paired['run_only']} "
                f"only the run got right, {paired['baseline_only']} only the baseline, {p_text}")
    return f"paired bootstrap of macro F1 on the same {int(paired.get('examples', 0)):,} examples, {p_text}"


HINT = ("try more epochs or a higher learning rate, the SetFit method for few examples per class, "
        "or more labelled data")
# Below this many scored examples a tie with a baseline says little: one example is 1 % or more of the score, and
# a paired test needs several examples that only one of the two got right (300 tweets, a new user's walk: 0.900
# against frozen embeddings' 0.900 on 30 validation examples, 2 against 2, p = 1.0). Then the advice is to score
# both on more examples, not to change the run.
FEW_TO_TELL = 100


def _tie_hint(examples: int, hint: str) -> str:
    """What to do about a run level with a baseline: ``hint``, or, on fewer than ``FEW_TO_TELL`` examples, to
    evaluate on a larger labelled file (which gives both a verdict on it)."""
    if not hint or not 0 < examples < FEW_TO_TELL:
        return hint
    return (f"{examples} examples are too few to tell the two apart: evaluate the run on a larger labelled file "
            "(Predict tab, \"Evaluate on a test set\"; the baselines are scored there too) before changing it")


def _against_baselines(metrics: Mapping[str, Any], baselines: Mapping[str, Any], key: str, label: str,
                       facts: Mapping[str, Any], hint: str) -> dict[str, Any]:
    """The verdict once the run did learn something: below a baseline it is worse than, level with one it is
    not shown to beat (the strongest such one is named), else learned."""
    score = float(metrics.get(key, 0.0))
    judged = {name: standing(metrics, entry, key) for name, entry in baselines.items()
              if isinstance(entry, Mapping) and key in entry}
    for outcome, status, words in ((WORSE, BELOW_BASELINE, "is below"), (LEVEL, LEVEL_WITH_BASELINE, "is level with")):
        names = [name for name, (found, _how) in judged.items() if found == outcome]
        if names:
            name = max(names, key=lambda n: float(baselines[n][key]))
            base, how = float(baselines[name][key]), judged[name][1]
            tail = "" if outcome == WORSE else ": no better on these examples"
            if outcome == LEVEL:
                hint = _tie_hint(int((baselines[name].get("paired") or {}).get("examples") or 0), hint)
            return {"status": status, **facts, "baseline": name,
                    "message": (f"{words} the {NAMES.get(name, name)} baseline{tail} ({label} {score:.3f} vs "
                                f"{base:.3f}; {how})" + (f" — {hint}" if hint else ""))}
    return {"status": LEARNED, **facts, "message": ""}


def verdict(metrics: Mapping[str, Any], baselines: Mapping[str, Any], predicted: Sequence[str],
            gold: Sequence[str]) -> dict[str, Any]:
    """Whether a single-label run learned: ``{"status", "message", "top_share", "top_label"}`` (and the
    ``baseline`` it is below or level with). The message reads after "This run …".

    ``predicted``/``gold`` are the run's validation predictions and labels (one string each).
    """
    accuracy = float(metrics.get("accuracy", 0.0))
    majority = float(baselines.get(MAJORITY, {}).get("accuracy", 0.0))
    counts = Counter(predicted)
    top_label, top = counts.most_common(1)[0] if counts else ("", 0)
    top_share = top / max(1, len(predicted))
    gold_share = Counter(gold).get(top_label, 0) / max(1, len(gold))
    facts = {"top_label": top_label, "top_share": round(top_share, 4)}
    if len(predicted) >= 10 and top_share >= ONE_CLASS_SHARE and gold_share < ONE_CLASS_SHARE:
        return {"status": DID_NOT_LEARN, **facts,
                "message": (f"did not learn: predicts {top_label!r} for {top_share:.0%} of the scored "
                            f"examples (accuracy {accuracy:.3f}, majority class {majority:.3f}) — {HINT}")}
    if accuracy <= majority + MARGIN:
        # on a few examples one answer decides it (a tweets run at 0.600 against 0.700 on 10 scored 0.82 on 50
        # held out): then, as for a tie with a baseline, first evaluate on more
        return {"status": DID_NOT_LEARN, **facts,
                "message": (f"did not learn: accuracy {accuracy:.3f} is no better than always answering the "
                            f"majority class ({majority:.3f}) — {_tie_hint(len(predicted), HINT)}")}
    return _against_baselines(metrics, baselines, "accuracy", "accuracy", facts, HINT)


def multi_label_verdict(metrics: Mapping[str, Any], baselines: Mapping[str, Any]) -> dict[str, Any]:
    """The same verdict for multi-label runs, on macro F1 (exact-set accuracy is harsh on many labels)."""
    f1 = float(metrics.get("f1_macro", 0.0))
    majority = float(baselines.get(MAJORITY, {}).get("f1_macro", 0.0))
    if f1 <= majority + MARGIN:
        return {"status": DID_NOT_LEARN,
                "message": f"did not learn: macro F1 {f1:.3f} is no better than the majority labels ({majority:.3f})"}
    return _against_baselines(metrics, baselines, "f1_macro", "macro F1", {}, "")


def assess(train: Sequence[Mapping[str, Any]], validation: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any],
           predictions: Sequence[Mapping[str, Any]], *, embed: Optional[Embedder] = None,
           seed: int = 0) -> dict[str, Any]:
    """Baselines and verdict for a finished classification run (or an evaluation: ``validation`` is then the
    test set and ``predictions`` the evaluation's rows): ``{"baselines": ..., "verdict": ...}``.

    ``embed`` gives the frozen embeddings of the run's starting model, for the frozen-embedding baseline (none
    without it)."""
    multi = any(isinstance(r["label"], list) for r in train)
    fitted = fit(train, validation, multi, embed=embed, seed=seed)
    compare_with_run(fitted, [row.get("predicted") for row in predictions])
    if multi:
        return {"baselines": fitted.scores, "verdict": multi_label_verdict(metrics, fitted.scores)}
    predicted = [str(row.get("predicted")) for row in predictions]
    gold = [str(row.get("gold")) for row in predictions]
    return {"baselines": fitted.scores, "verdict": verdict(metrics, fitted.scores, predicted, gold)}


def summary(metrics: Optional[Mapping[str, Any]]) -> str:
    """One line for people: "majority class 0.866 · TF-IDF + logistic regression 0.952 · frozen embeddings +
    logistic regression 0.940" (for a chunked run "frozen embeddings + logistic regression (long texts in
    windows) 0.707"), or "" without baselines.

    The score is the one the run's main metric compares with: accuracy, or macro F1 for multi-label runs.
    """
    found = (metrics or {}).get("baselines")
    if not isinstance(found, Mapping):
        return ""
    key = _key(metrics)
    parts = [f"{NAMES[name]}{_how_read(found[name])} {float(found[name][key]):.3f}" for name in NAMES
             if isinstance(found.get(name), Mapping) and key in found[name]]
    return " · ".join(parts)


def _how_read(scores: Mapping[str, Any]) -> str:
    """The name's suffix for a baseline that read a chunked run's windows ("long texts in windows"), else ""."""
    return " (long texts in windows)" if str(scores.get("read", "")).startswith("windows") else ""


def _key(metrics: Optional[Mapping[str, Any]]) -> str:
    return "f1_macro" if (metrics or {}).get("multi_label") else "accuracy"


def best(metrics: Optional[Mapping[str, Any]]) -> Optional[float]:
    """The stronger baseline's accuracy, or None."""
    found = (metrics or {}).get("baselines")
    if not isinstance(found, Mapping):
        return None
    values = [float(v["accuracy"]) for v in found.values() if isinstance(v, Mapping) and "accuracy" in v]
    return max(values) if values else None


def judged(metrics: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's verdict as the views show it: the one it stored; for a run stored as "learned" before the
    paired tests were kept, judged again on its interval (a tie with a baseline is level, never a win)."""
    found = (metrics or {}).get("verdict")
    if not isinstance(found, Mapping):
        return {}
    baselines = (metrics or {}).get("baselines")
    if found.get("status") != LEARNED or not isinstance(baselines, Mapping) or any(
            isinstance(v, Mapping) and "paired" in v for v in baselines.values()):
        return dict(found)
    key = _key(metrics)
    again = _against_baselines(metrics, baselines, key, "macro F1" if key == "f1_macro" else key, {}, "")
    return dict(found) if again["status"] == LEARNED else {**found, **again}


def status(metrics: Optional[Mapping[str, Any]]) -> str:
    """``learned``, ``below_baseline``, ``level_with_baseline``, ``did_not_learn``, or "" without a verdict."""
    return str(judged(metrics).get("status", ""))


def warning(metrics: Optional[Mapping[str, Any]]) -> str:
    """The verdict's sentence for a run that did not beat its baselines, else "": it reads after "This run …".

    Runs judged before the sentences were worded so wrote "below a TF-IDF … baseline": that gains its "is".
    """
    message = str(judged(metrics).get("message") or "")
    return f"is {message}" if message.startswith("below ") else message


def verdict_cell(metrics: Optional[Mapping[str, Any]]) -> str:
    """The verdict in a table cell: "beats the baselines", "⚠ level with the … baseline …", "⚠ did not learn: …",
    or "" for a run without baselines."""
    if not summary(metrics):
        return ""
    message = warning(metrics)
    if not message:
        return "beats the baselines"
    return "⚠ " + (message[3:] if message.startswith("is ") else message)
