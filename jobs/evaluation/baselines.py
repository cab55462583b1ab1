"""Baselines beside every classification score, and the verdict on whether a run learned anything.

A score means little alone: 0.87 accuracy is nothing on a set where 87 % of the messages are "ham".
Each text-classification run fits, in seconds, on its own training split and scores on its own
validation split:

- ``majority``: always the most frequent training label (multi-label: each label that most training
  examples carry);
- ``tfidf_logreg``: TF-IDF of words and word pairs with a logistic regression (scikit-learn; one
  regression per label for multi-label data).

``verdict`` compares the run with them: a run that predicts one class for nearly every example, or
does no better than the majority class, did not learn; one below the TF-IDF baseline learned less
than a plain linear model would. The messages say what to try.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Any, Mapping, Optional, Sequence

import numpy as np

MAJORITY, TFIDF = "majority", "tfidf_logreg"
NAMES = {MAJORITY: "majority class", TFIDF: "TF-IDF + logistic regression"}
# A run "predicts one class" when this share of its validation predictions is one label ...
ONE_CLASS_SHARE = 0.95
# ... and that label is not itself nearly all of the gold labels.
# "Does not beat" the majority: within this margin of its accuracy.
MARGIN = 0.005
LEARNED, BELOW_BASELINE, DID_NOT_LEARN = "learned", "below_baseline", "did_not_learn"


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


def fit_baselines(train: Sequence[Mapping[str, Any]], validation: Sequence[Mapping[str, Any]],
                  multi_label: Optional[bool] = None) -> dict[str, Any]:
    """Majority class and TF-IDF + logistic regression, fitted on ``train`` and scored on ``validation``.

    Returns ``{"majority": {"accuracy", "f1_macro"}, "tfidf_logreg": {..., "seconds"}}``; labels of the
    validation split that never occur in training count as errors, as they do for the run.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
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
    out: dict[str, Any] = {MAJORITY: _scores(y_val, majority, labels, multi_label)}
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True, max_features=200_000)
    x_train = vectorizer.fit_transform([_text(r) for r in train])
    x_val = vectorizer.transform([_text(r) for r in validation])
    classifier = LogisticRegression(max_iter=1000, C=10.0)
    if multi_label:
        keep = y_train.std(axis=0) > 0  # a label all or none of the training examples carry: predict that
        predicted = np.tile(y_train[0], (len(y_val), 1))
        if keep.any():
            model = OneVsRestClassifier(classifier).fit(x_train, y_train[:, keep])
            predicted[:, keep] = model.predict(x_val)
    elif len(set(y_train.tolist())) < 2:
        predicted = majority
    else:
        predicted = classifier.fit(x_train, y_train).predict(x_val)
    out[TFIDF] = {**_scores(y_val, predicted, labels, multi_label),
                  "seconds": round(time.perf_counter() - started, 3)}
    return out


def verdict(metrics: Mapping[str, Any], baselines: Mapping[str, Any], predicted: Sequence[str],
            gold: Sequence[str]) -> dict[str, Any]:
    """Whether a single-label run learned: ``{"status", "message", "top_share", "top_label"}``.

    ``predicted``/``gold`` are the run's validation predictions and labels (one string each).
    """
    accuracy = float(metrics.get("accuracy", 0.0))
    majority = float(baselines.get(MAJORITY, {}).get("accuracy", 0.0))
    tfidf = baselines.get(TFIDF, {}).get("accuracy")
    counts = Counter(predicted)
    top_label, top = counts.most_common(1)[0] if counts else ("", 0)
    top_share = top / max(1, len(predicted))
    gold_share = Counter(gold).get(top_label, 0) / max(1, len(gold))
    facts = {"top_label": top_label, "top_share": round(top_share, 4)}
    hint = ("try more epochs or a higher learning rate, the SetFit method for few examples per class, "
            "or more labelled data")
    if len(predicted) >= 10 and top_share >= ONE_CLASS_SHARE and gold_share < ONE_CLASS_SHARE:
        return {"status": DID_NOT_LEARN, **facts,
                "message": (f"did not learn: predicts {top_label!r} for {top_share:.0%} of the validation "
                            f"examples (accuracy {accuracy:.3f}, majority class {majority:.3f}) — {hint}")}
    if accuracy <= majority + MARGIN:
        return {"status": DID_NOT_LEARN, **facts,
                "message": (f"did not learn: accuracy {accuracy:.3f} is no better than always answering the "
                            f"majority class ({majority:.3f}) — {hint}")}
    if tfidf is not None and accuracy < float(tfidf):
        return {"status": BELOW_BASELINE, **facts,
                "message": (f"below a TF-IDF + logistic regression baseline: accuracy {accuracy:.3f} vs "
                            f"{float(tfidf):.3f} — {hint}")}
    return {"status": LEARNED, **facts, "message": ""}


def multi_label_verdict(metrics: Mapping[str, Any], baselines: Mapping[str, Any]) -> dict[str, Any]:
    """The same verdict for multi-label runs, on macro F1 (exact-set accuracy is harsh on many labels)."""
    f1 = float(metrics.get("f1_macro", 0.0))
    majority = float(baselines.get(MAJORITY, {}).get("f1_macro", 0.0))
    tfidf = baselines.get(TFIDF, {}).get("f1_macro")
    if f1 <= majority + MARGIN:
        return {"status": DID_NOT_LEARN,
                "message": f"did not learn: macro F1 {f1:.3f} is no better than the majority labels ({majority:.3f})"}
    if tfidf is not None and f1 < float(tfidf):
        return {"status": BELOW_BASELINE,
                "message": f"below a TF-IDF + logistic regression baseline: macro F1 {f1:.3f} vs {float(tfidf):.3f}"}
    return {"status": LEARNED, "message": ""}


def assess(train: Sequence[Mapping[str, Any]], validation: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any],
           predictions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Baselines and verdict for a finished classification run: ``{"baselines": ..., "verdict": ...}``."""
    multi = any(isinstance(r["label"], list) for r in train)
    baselines = fit_baselines(train, validation, multi)
    if multi:
        return {"baselines": baselines, "verdict": multi_label_verdict(metrics, baselines)}
    predicted = [str(row.get("predicted")) for row in predictions]
    gold = [str(row.get("gold")) for row in predictions]
    return {"baselines": baselines, "verdict": verdict(metrics, baselines, predicted, gold)}


def summary(metrics: Optional[Mapping[str, Any]]) -> str:
    """One line for people: "majority class 0.866 · TF-IDF + logistic regression 0.952", or "" without baselines.

    The score is the one the run's main metric compares with: accuracy, or macro F1 for multi-label runs.
    """
    found = (metrics or {}).get("baselines")
    if not isinstance(found, Mapping):
        return ""
    key = "f1_macro" if (metrics or {}).get("multi_label") else "accuracy"
    parts = [f"{NAMES[name]} {float(found[name][key]):.3f}" for name in (MAJORITY, TFIDF)
             if isinstance(found.get(name), Mapping) and key in found[name]]
    return " · ".join(parts)


def best(metrics: Optional[Mapping[str, Any]]) -> Optional[float]:
    """The stronger baseline's accuracy, or None."""
    found = (metrics or {}).get("baselines")
    if not isinstance(found, Mapping):
        return None
    values = [float(v["accuracy"]) for v in found.values() if isinstance(v, Mapping) and "accuracy" in v]
    return max(values) if values else None


def status(metrics: Optional[Mapping[str, Any]]) -> str:
    """``learned``, ``below_baseline``, ``did_not_learn``, or "" for a run without a verdict."""
    found = (metrics or {}).get("verdict")
    return str(found.get("status", "")) if isinstance(found, Mapping) else ""


def warning(metrics: Optional[Mapping[str, Any]]) -> str:
    """The verdict's sentence for a run that did not beat its baselines, else ""."""
    found = (metrics or {}).get("verdict")
    return str(found.get("message") or "") if isinstance(found, Mapping) else ""
