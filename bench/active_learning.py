"""Active learning, simulated: a labeller who answers with the gold label, the default strategy against random.

    python bench/active_learning.py [--data /work/shared/data] [--only sms,trec,amazon] [--seeds 0,1,2]
                                    [--budget 500] [--batch 10] [--speed] [--plot] [--real]

For each shared set (SMS spam, TREC-6, VADER amazon snippets) the training file is the unlabelled pool and the
test file scores the model. Each run starts from 0 labels and takes batches of 10 up to 500 labels:

- ``default``: the loop as the app runs it: the first batch in coverage order (the item nearest each cluster's
  centre), then after every batch a refit of the fast model and ``rank_pool(strategy="margin")`` (margin with one
  item per cluster per round, 10 % random share);
- ``random``: uniform random sampling, the control.

After every batch the fast model (``jobs.labelling.fast_model.FastModel``: logistic regression on the frozen
all-MiniLM-L6-v2 embeddings) is refitted on the labels and scored on the test file (accuracy, and macro-F1), and
the loop's own estimate (``jobs.labelling.curve.estimate``) is recorded beside it: the benchmark reports how often
its interval held the true test score. The reference is the same fast model fitted on the whole pool.

``--speed`` times one refit as the label-refit job does it (fit on 100 / 500 / 1,000 labels, predict_proba on a
10,000-text pool, estimate, rank_pool); ``--plot`` draws docs/labelling_curves.png from the results;
``--real`` also trains the workbench's default run (``bench/small_data.py``'s ``workbench``: the engine with
nothing set) on the first 100/200/500 labels of each strategy and seed, scored on the test file (``--real-results``: where). Embeddings are cached under bench/.cache/active_learning (gitignored).
Results: bench/results/active_learning.json (a finished (set, strategy, seed) is not run again); ``--real`` runs
only the real runs, into bench/results/active_learning_real.json.
Runs on one torch and one BLAS thread: the machine's two cores are shared.
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import sys
import time
from pathlib import Path

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from jobs.labelling import coverage, curve, strategies  # noqa: E402
from jobs.labelling.fast_model import FastModel  # noqa: E402

log = logging.getLogger("bench.active_learning")
RESULTS = ROOT / "bench" / "results" / "active_learning.json"
REAL_RESULTS = ROOT / "bench" / "results" / "active_learning_real.json"  # --real's runs: slow, kept apart
CACHE = ROOT / "bench" / ".cache" / "active_learning"
PLOT = ROOT / "docs" / "labelling_curves.png"
DATA_CANDIDATES = (ROOT.parent / "shared" / "data", Path("/work/shared/data"))
SETS = {"sms": "sms_spam_collection", "trec": "trec_question_type_train5500", "amazon": "vader_amazon"}
TITLES = {"sms": "SMS spam", "trec": "TREC-6", "amazon": "VADER amazon"}
STRATEGIES = ("default", "random")
CHECKPOINTS = (100, 200, 500)
TARGET = 0.95  # share of the full-pool score a strategy must reach


# --- data and embeddings ---------------------------------------------------------------------------------------

def data_folder(given: str | None) -> Path:
    for folder in ([Path(given)] if given else list(DATA_CANDIDATES)):
        if (folder / "sms_spam_collection").is_dir():
            return folder
    raise SystemExit("no shared data found: pass --data /path/to/shared/data")


def read_split(folder: Path, split: str) -> tuple[list[str], list[str]]:
    with (folder / f"{split}.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def embedded(data: Path, name: str, split: str) -> tuple[np.ndarray, list[str]]:
    """L2-normalised frozen embeddings of a split (cached) and its gold labels."""
    texts, labels = read_split(data / SETS[name], split)
    path = CACHE / f"{name}_{split}.npy"
    if path.exists():
        emb = np.load(path)
        if len(emb) == len(texts):
            return emb, labels
    import torch

    from jobs.training.catalogue import packaged_model_path
    from jobs.training.sentence_model import frozen_embeddings

    torch.set_num_threads(1)
    started = time.perf_counter()
    emb = frozen_embeddings([{"text": t} for t in texts], str(packaged_model_path()))
    emb = (emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)).astype(np.float32)
    log.info("embedded %s/%s: %d texts in %.1f s", name, split, len(texts), time.perf_counter() - started)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, emb)
    return emb, labels


# --- scores ----------------------------------------------------------------------------------------------------

def scores(model: FastModel, X: np.ndarray, gold: np.ndarray) -> dict:
    from jobs.evaluation.calibration import expected_calibration_error

    proba = model.predict_proba(X)
    predicted = np.argmax(proba, axis=1)
    f1s = []
    for c in range(len(model.classes)):
        tp = int(((predicted == c) & (gold == c)).sum())
        fp = int(((predicted == c) & (gold != c)).sum())
        fn = int(((predicted != c) & (gold == c)).sum())
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return {"accuracy": float((predicted == gold).mean()), "macro_f1": float(np.mean(f1s)),
            "ece": float(expected_calibration_error(proba, gold, False))}


def full_pool_score(pool: np.ndarray, pool_labels: list[str], test: np.ndarray, test_gold: np.ndarray,
                    classes: list[str]) -> dict:
    return scores(FastModel(classes).fit(pool, pool_labels), test, test_gold)


# --- the simulation --------------------------------------------------------------------------------------------

def simulate(pool: np.ndarray, pool_labels: list[str], test: np.ndarray, test_gold: np.ndarray, classes: list[str],
             strategy: str, seed: int, budget: int, batch: int, random_share: float = 0.1,
             asked: list | None = None) -> list[dict]:
    """One run from 0 labels to ``budget``: a point per refit (every ``batch`` labels). ``asked``, when given,
    receives the pool positions in the order they were labelled."""
    n = len(pool)
    clusters = coverage.cluster_pool(pool, seed=seed)
    labelled = np.zeros(n, dtype=bool)
    random_flag = np.zeros(n, dtype=bool)
    if strategy == "default":
        order, picks = coverage.coverage_order(pool, clusters, seed=seed), np.zeros(n, dtype=bool)
    else:
        order, picks = strategies.rank_pool(None, clusters, ~labelled, "random", seed=seed)
    previous = None
    estimates: list[curve.Estimate] = []
    points = []
    for step in range(budget // batch):
        take = order[:batch]
        if asked is not None:
            asked.extend(int(i) for i in take)
        labelled[take] = True
        random_flag[take] = picks[:batch]
        started = time.perf_counter()
        rows = np.flatnonzero(labelled)
        y = [pool_labels[i] for i in rows]
        model = FastModel(classes, seed=seed).fit(pool[rows], y)
        proba = model.predict_proba(pool)
        predicted = np.argmax(proba, axis=1)
        agreement = curve.agreement(previous, predicted)
        previous = predicted
        point = curve.estimate(pool[rows], y, random_flag[rows], classes, False, seed=seed, agreement=agreement)
        estimates.append(point)
        hint = curve.stop_hint(estimates)
        order, picks = strategies.rank_pool(proba, clusters, ~labelled, "margin" if strategy == "default" else
                                            "random", random_share=random_share, seed=seed * 1000 + step,
                                            batch=batch)
        seconds = time.perf_counter() - started
        true = scores(model, test, test_gold)
        points.append({"labels": int(labelled.sum()), **{k: round(v, 4) for k, v in true.items()},
                       "estimate": _round(point.estimate), "low": _round(point.low), "high": _round(point.high),
                       "majority": _round(point.majority), "source": point.source,
                       "agreement": _round(agreement), "stop_hint": hint is not None,
                       "random_labels": int(random_flag[rows].sum()), "seconds": round(seconds, 3)})
    return points


def _round(value):
    return None if value is None else round(float(value), 4)


# --- real runs ---------------------------------------------------------------------------------------------

def real_runs(data: Path, name: str, seed: int, sizes=CHECKPOINTS) -> None:
    """The workbench's default run (as ``bench/small_data.py``'s ``workbench``) trained on the first 100 / 200 / 500
    labels of each strategy's run, scored on the test file."""
    import tempfile

    import torch

    from bench.small_data import workbench

    torch.set_num_threads(1)
    real = json.loads(REAL_RESULTS.read_text()) if REAL_RESULTS.exists() else {}
    pool, pool_labels = embedded(data, name, "train")
    test, test_labels = embedded(data, name, "test")
    texts, _ = read_split(data / SETS[name], "train")
    test_texts, _ = read_split(data / SETS[name], "test")
    classes = sorted(set(pool_labels))
    test_gold = np.array([classes.index(label) for label in test_labels])
    test_records = [{"text": t, "label": y} for t, y in zip(test_texts, test_labels)]
    for strategy in STRATEGIES:
        asked: list[int] = []
        simulate(pool, pool_labels, test, test_gold, classes, strategy, seed, max(sizes), 10, asked=asked)
        for size in sizes:
            key = f"{name}/{strategy}/{seed}/{size}"
            if key in real:
                continue
            train = [{"text": texts[i], "label": pool_labels[i]} for i in asked[:size]]
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as work:
                predicted, extra = workbench("text-classification", train, test_records, seed, Path(work))
            accuracy = float(np.mean([p == y for p, y in zip(predicted, test_labels)]))
            real[key] = {"accuracy": round(accuracy, 4), "seconds": round(time.perf_counter() - started, 1),
                         "method": extra.get("method"), "classes_in_labels": len({pool_labels[i] for i in asked[:size]})}
            log.info("real %s: %s", key, real[key])
            REAL_RESULTS.write_text(json.dumps(real, indent=1, sort_keys=True))


# --- summary ---------------------------------------------------------------------------------------------------

def mean_curve(runs: list[list[dict]], key: str = "accuracy") -> tuple[np.ndarray, np.ndarray]:
    labels = np.array([p["labels"] for p in runs[0]])
    return labels, np.mean([[p[key] for p in run] for run in runs], axis=0)


def _mean_at(runs: list[list[dict]], key: str) -> dict:
    """The mean over seeds of ``key`` at each checkpoint (runs older than the key give nothing)."""
    out = {}
    for c in CHECKPOINTS:
        values = [p[key] for run in runs for p in run if p["labels"] == c and key in p]
        if values:
            out[str(c)] = round(float(np.mean(values)), 4)
    return out


def labels_to_reach(labels: np.ndarray, values: np.ndarray, target: float) -> int | None:
    hit = np.flatnonzero(values >= target)
    return int(labels[hit[0]]) if len(hit) else None


def summarise(results: dict) -> dict:
    summary = {}
    for name in SETS:
        if name not in results.get("full", {}):
            continue
        full = results["full"][name]["accuracy"]
        entry = {"full_pool_accuracy": full, "target_accuracy": round(TARGET * full, 4)}
        for strategy in STRATEGIES:
            runs = [results["runs"][k] for k in sorted(results["runs"]) if k.startswith(f"{name}/{strategy}/")]
            if not runs:
                continue
            labels, acc = mean_curve(runs)
            per_seed = [labels_to_reach(labels, np.array([p["accuracy"] for p in run]), TARGET * full) for run in runs]
            at = {str(c): round(float(acc[labels == c][0]), 4) for c in CHECKPOINTS if c in labels}
            f1_labels, f1 = mean_curve(runs, "macro_f1")
            points = [p for run in runs for p in run if p["estimate"] is not None]
            held = [p["low"] <= p["accuracy"] <= p["high"] for p in points]
            by_source = {}
            for kind in ("random share", "cross-validation"):
                chosen = [p for p in points if p["source"].startswith(kind)]
                if chosen:
                    by_source[kind] = {"points": len(chosen),
                                       "held": round(float(np.mean([p["low"] <= p["accuracy"] <= p["high"]
                                                                    for p in chosen])), 3),
                                       "mean_error": round(float(np.mean([p["estimate"] - p["accuracy"]
                                                                          for p in chosen])), 4),
                                       "mean_width": round(float(np.mean([p["high"] - p["low"] for p in chosen])), 4)}
            first_hint = [next((p["labels"] for p in run if p["stop_hint"]), None) for run in runs]
            at_hint = [next((p["accuracy"] for p in run if p["stop_hint"]), None) for run in runs]
            entry[strategy] = {"seeds": len(runs), "labels_to_target_mean_curve": labels_to_reach(labels, acc,
                                                                                                   TARGET * full),
                               "labels_to_target_per_seed": per_seed, "accuracy_at": at,
                               "macro_f1_at": {str(c): round(float(f1[f1_labels == c][0]), 4) for c in CHECKPOINTS
                                               if c in f1_labels},
                               "ece_at": _mean_at(runs, "ece"),
                               "estimate_held_truth": round(float(np.mean(held)), 3) if held else None,
                               "estimate_by_source": by_source, "first_stop_hint_labels": first_hint,
                               "accuracy_at_first_stop_hint": at_hint,
                               "accuracy_at_budget_per_seed": [run[-1]["accuracy"] for run in runs],
                               "refit_seconds_mean": round(float(np.mean([p["seconds"] for r in runs for p in r])), 3)}
        if "default" in entry and "random" in entry:
            ours, theirs = entry["default"]["labels_to_target_mean_curve"], entry["random"]["labels_to_target_mean_curve"]
            entry["label_saving"] = (round(1 - ours / theirs, 3) if ours and theirs else None)
            entry["default_minus_random_points"] = {c: round(100 * (entry["default"]["accuracy_at"][c] -
                                                                     entry["random"]["accuracy_at"][c]), 2)
                                                    for c in entry["default"]["accuracy_at"]
                                                    if c in entry["random"]["accuracy_at"]}
        summary[name] = entry
    return summary


def extend(results: dict, data: Path, name: str, budget: int, seeds: list[int], batch: int) -> None:
    """Runs to ``budget`` labels (past the acceptance's 500) where 500 did not reach 95 % of the whole pool."""
    pool, pool_labels = embedded(data, name, "train")
    test, test_labels = embedded(data, name, "test")
    classes = sorted(set(pool_labels))
    test_gold = np.array([classes.index(label) for label in test_labels])
    long = results.setdefault("runs_long", {})
    for seed in seeds:
        for strategy in STRATEGIES:
            key = f"{name}/{strategy}/{seed}/{budget}"
            if key not in long:
                long[key] = simulate(pool, pool_labels, test, test_gold, classes, strategy, seed, budget, batch)
                log.info("%s: %.3f at %d labels", key, long[key][-1]["accuracy"], long[key][-1]["labels"])
                save(results)


def summarise_long(results: dict) -> dict:
    out = {}
    for key in sorted(results.get("runs_long", {})):
        name, strategy, _seed, budget = key.split("/")
        out.setdefault(f"{name}/{budget}", {}).setdefault(strategy, []).append(results["runs_long"][key])
    summary = {}
    for group, by_strategy in out.items():
        name = group.split("/")[0]
        target = TARGET * results["full"][name]["accuracy"]
        summary[group] = {"target_accuracy": round(target, 4)}
        for strategy, runs in by_strategy.items():
            labels, acc = mean_curve(runs)
            summary[group][strategy] = {
                "seeds": len(runs), "labels_to_target_mean_curve": labels_to_reach(labels, acc, target),
                "labels_to_target_per_seed": [labels_to_reach(labels, np.array([p["accuracy"] for p in run]), target)
                                              for run in runs],
                "accuracy_at": {str(c): round(float(acc[labels == c][0]), 4) for c in (500, 1000, 1500, 2000)
                                if c in labels}}
        if "default" in summary[group] and "random" in summary[group]:
            ours = summary[group]["default"]["labels_to_target_mean_curve"]
            theirs = summary[group]["random"]["labels_to_target_mean_curve"]
            summary[group]["label_saving"] = round(1 - ours / theirs, 3) if ours and theirs else None
    return summary


# --- refit speed -----------------------------------------------------------------------------------------------

def refit_speed(data: Path, repeats: int = 3) -> dict:
    """One label-refit's core on a 10,000-text pool: fit + predict_proba + estimate + rank_pool."""
    parts = [embedded(data, name, split) for name in SETS for split in ("train", "test")]
    pool = np.concatenate([emb for emb, _ in parts])[:10_000]
    trec, trec_labels = embedded(data, "trec", "train")
    classes = sorted(set(trec_labels))
    clusters = coverage.cluster_pool(pool, seed=0)
    out = {"pool": len(pool), "dim": int(pool.shape[1]), "classes": len(classes), "labels": {}}
    for n in (100, 500, 1000):
        X, y = trec[:n], trec_labels[:n]
        for share_name, share in (("random share 10 %", 0.1), ("no random share (CV)", 0.0)):
            random_pick = np.zeros(n, dtype=bool)
            random_pick[: int(n * share)] = True
            timings = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                model = FastModel(classes).fit(X, y)
                t1 = time.perf_counter()
                proba = model.predict_proba(pool)
                t2 = time.perf_counter()
                point = curve.estimate(X, y, random_pick, classes, False)
                t3 = time.perf_counter()
                unlabelled = np.ones(len(pool), dtype=bool)
                unlabelled[:n] = False
                strategies.rank_pool(proba, clusters, unlabelled, "margin")
                t4 = time.perf_counter()
                timings.append([t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0])
            best = np.median(np.array(timings), axis=0)
            out["labels"].setdefault(str(n), {})[share_name] = {
                "fit_s": round(best[0], 3), "predict_10k_s": round(best[1], 3), "estimate_s": round(best[2], 3),
                "rank_s": round(best[3], 3), "total_s": round(best[4], 3), "estimate_source": point.source}
    t0 = time.perf_counter()
    big = np.concatenate([pool] * 10)
    big_clusters = coverage.cluster_pool(big, seed=0)
    t1 = time.perf_counter()
    coverage.coverage_order(big, big_clusters)
    t2 = time.perf_counter()
    proba = np.random.default_rng(0).dirichlet(np.ones(6), size=len(big))
    strategies.rank_pool(proba, big_clusters, np.ones(len(big), dtype=bool), "margin")
    t3 = time.perf_counter()
    out["pool_100k"] = {"cluster_pool_s": round(t1 - t0, 2), "coverage_order_s": round(t2 - t1, 2),
                        "rank_pool_s": round(t3 - t2, 3)}
    out["threads"] = "one BLAS thread (OMP/OPENBLAS/MKL_NUM_THREADS=1)"
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return out


# --- the tables for docs/labelling.md ----------------------------------------------------------------

def tables(results: dict) -> str:
    """Markdown: labels to 95 %, accuracy at 100/200/500, the estimate's coverage, the stop hint, the speed."""
    rows = ["| set (pool) | whole pool | 95 % of it | labels to reach it: default / random (per seed) | fewer labels |"
            " accuracy at 100 / 200 / 500: default | random | default − random (points) |",
            "|---|---|---|---|---|---|---|---|"]
    long = results.get("summary_long", {})
    summary = {name: results["summary"][name] for name in SETS if name in results.get("summary", {})}
    for name, entry in summary.items():
        ours, theirs = entry["default"], entry["random"]

        def reach(d):
            mean = d["labels_to_target_mean_curve"]
            seeds = ", ".join("> 500" if v is None else str(v) for v in d["labels_to_target_per_seed"])
            return f"{'> 500' if mean is None else mean} ({seeds})"

        saving = entry.get("label_saving")
        saving_text = f"{saving:.0%}" if saving is not None else "—"
        for group, extra in long.items():
            if group.startswith(name + "/") and "default" in extra and "random" in extra:
                budget = group.split("/")[1]
                d, r = (extra[k]["labels_to_target_mean_curve"] for k in STRATEGIES)
                per_seed = " / ".join(", ".join(f"> {budget}" if v is None else str(v)
                                                for v in extra[k]["labels_to_target_per_seed"]) for k in STRATEGIES)
                saved = f"{extra['label_saving']:.0%}" if extra.get("label_saving") is not None else (
                    f"≥ {1 - d / int(budget):.0%}" if d else "—")
                saving_text += (f"; runs to {budget}: {d or f'> {budget}'} / {r or f'> {budget}'} ({per_seed}), "
                                f"{saved} fewer")
        at = lambda d: " / ".join(f"{d['accuracy_at'][c]:.3f}" for c in ("100", "200", "500"))  # noqa: E731
        diff = " / ".join(f"{v:+.1f}" for v in entry["default_minus_random_points"].values())
        rows.append(f"| {TITLES[name]} ({results['full'][name]['pool']}) | {entry['full_pool_accuracy']:.3f} | "
                    f"{entry['target_accuracy']:.3f} | {reach(ours)} / {reach(theirs)} | {saving_text} | {at(ours)} | "
                    f"{at(theirs)} | {diff} |")
    rows += ["", "| set | strategy | estimate from | points | interval held the test score | mean error | mean width |"
             " first stop hint per seed: labels (test accuracy there → at 500) |", "|---|---|---|---|---|---|---|---|"]
    for name, entry in summary.items():
        for strategy in STRATEGIES:
            d = entry[strategy]
            hint = ", ".join("none" if v is None else f"{v} ({a:.3f} → {end:.3f})" for v, a, end in
                             zip(d["first_stop_hint_labels"], d["accuracy_at_first_stop_hint"],
                                 d["accuracy_at_budget_per_seed"]))
            for source, v in d["estimate_by_source"].items():
                rows.append(f"| {TITLES[name]} | {strategy} | {source} | {v['points']} | {v['held']:.0%} | "
                            f"{v['mean_error'] * 100:+.1f} pts | {v['mean_width'] * 100:.0f} pts | {hint} |")
    rows += ["", "| set | strategy | ECE of the fast model on the test file at 100 / 200 / 500 labels |", "|---|---|---|"]
    for name, entry in summary.items():
        for strategy in STRATEGIES:
            ece = entry[strategy].get("ece_at", {})
            rows.append(f"| {TITLES[name]} | {strategy} | " + " / ".join(f"{ece[c]:.3f}" for c in sorted(ece, key=int))
                        + " |")
    speed = results.get("refit_speed")
    if speed:
        rows += ["", "| labels | estimate from | fit | predict_proba 10k | estimate | rank_pool | total |",
                 "|---|---|---|---|---|---|---|"]
        for n, by in sorted(speed["labels"].items(), key=lambda item: int(item[0])):
            for _, v in by.items():
                rows.append(f"| {n} | {v['estimate_source']} | {v['fit_s']:.2f} s | {v['predict_10k_s']:.2f} s | "
                            f"{v['estimate_s']:.2f} s | {v['rank_s']:.3f} s | **{v['total_s']:.2f} s** |")
        big = speed["pool_100k"]
        rows.append(f"\n100,000-text pool: cluster_pool {big['cluster_pool_s']:.1f} s, coverage_order "
                    f"{big['coverage_order_s']:.1f} s, rank_pool {big['rank_pool_s']:.3f} s "
                    f"(load average {', '.join(str(x) for x in speed['load_average'])}).")
    return "\n".join(rows)


# --- the picture -----------------------------------------------------------------------------------------------

def plot(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in SETS if n in results.get("full", {})]
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        full = results["full"][name]["accuracy"]
        for strategy, colour in (("default", "tab:blue"), ("random", "tab:orange")):
            runs = [results["runs"][k] for k in sorted(results["runs"]) if k.startswith(f"{name}/{strategy}/")]
            if not runs:
                continue
            labels = np.array([p["labels"] for p in runs[0]])
            acc = np.array([[p["accuracy"] for p in run] for run in runs])
            label = "margin + diversity (default)" if strategy == "default" else "random (control)"
            ax.plot(labels, acc.mean(axis=0), color=colour, label=f"{label}, test")
            ax.fill_between(labels, acc.min(axis=0), acc.max(axis=0), color=colour, alpha=0.15)
            if strategy == "default":
                est = np.array([[np.nan if p["estimate"] is None else p["estimate"] for p in run] for run in runs])
                ax.plot(labels, np.nanmean(est, axis=0), color=colour, linestyle=":", label="the loop's estimate")
        majority = [p["majority"] for k, run in results["runs"].items() if k.startswith(f"{name}/random/")
                    for p in run if p["majority"] is not None and p["labels"] == 500]
        if majority:
            ax.axhline(np.mean(majority), color="grey", linestyle="--", linewidth=1, label="majority class")
        ax.axhline(full, color="black", linewidth=1, label=f"whole pool ({full:.3f})")
        ax.axhline(TARGET * full, color="black", linestyle=":", linewidth=1, label="95 % of it")
        ax.set_title(f"{TITLES[name]} (pool {results['full'][name]['pool']})")
        ax.set_xlabel("labels")
        ax.set_ylabel("test accuracy (fast model)")
        low = min(0.5, float(np.mean(majority)) - 0.05) if majority else 0.5
        ax.set_ylim(max(0.0, low), 1.0)
        ax.grid(alpha=0.3)
    axes[0][0].legend(loc="lower right", fontsize=7)
    fig.suptitle("Active learning, simulated (3 seeds: mean line, min-max band)")
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT, dpi=110)
    log.info("wrote %s", PLOT)


# --- main ------------------------------------------------------------------------------------------------------

def load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {"full": {}, "runs": {}}


def real_table(real: dict) -> str:
    """Markdown: the real runs' test accuracy per set, strategy and labels (mean of the seeds there, each seed in
    brackets), and default − random per seed: a paired difference, both strategies' runs of a seed on one code."""
    rows = ["| set | strategy | " + " | ".join(f"{size} labels" for size in CHECKPOINTS) + " |",
            "|---|---|" + "---|" * len(CHECKPOINTS)]
    seeds = sorted({int(key.split("/")[2]) for key in real})

    def cell(name: str, strategy: str, size: int) -> list:
        return [real.get(f"{name}/{strategy}/{seed}/{size}", {}).get("accuracy") for seed in seeds]

    for name in SETS:
        if not any(key.startswith(name + "/") for key in real):
            continue
        for strategy in STRATEGIES:
            texts = []
            for size in CHECKPOINTS:
                values = cell(name, strategy, size)
                known = [v for v in values if v is not None]
                per_seed = ", ".join("—" if v is None else f"{v:.3f}" for v in values)
                texts.append(f"{np.mean(known):.3f} ({per_seed})" if known else "—")
            rows.append(f"| {TITLES[name]} | {strategy} | " + " | ".join(texts) + " |")
        texts = []
        for size in CHECKPOINTS:
            pairs = [(d, r) for d, r in zip(cell(name, "default", size), cell(name, "random", size))
                     if d is not None and r is not None]
            diffs = [100 * (d - r) for d, r in pairs]
            texts.append(f"{np.mean(diffs):+.1f} ({', '.join(f'{x:+.1f}' for x in diffs)})" if diffs else "—")
        rows.append(f"| {TITLES[name]} | default − random (points) | " + " | ".join(texts) + " |")
    return "\n".join(rows)


def save(results: dict) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
    os.replace(tmp, RESULTS)


def main() -> None:
    global REAL_RESULTS  # --real-results moves where --real keeps its runs
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data")
    parser.add_argument("--only", default=",".join(SETS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--budget", type=int, default=500)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--extend", default="",
                        help="longer runs past the budget to find the labels to 95 %%, e.g. trec=2000,amazon=1500")
    parser.add_argument("--speed", action="store_true", help="time the refit (fit + predict 10k + estimate + rank)")
    parser.add_argument("--plot", action="store_true", help="draw docs/labelling_curves.png from the results")
    parser.add_argument("--table", action="store_true", help="print the tables for docs/labelling.md")
    parser.add_argument("--real", action="store_true",
                        help="only train the workbench's default run on the first 100/200/500 labels, each seed")
    parser.add_argument("--real-results", type=Path, default=None, help="where --real keeps its results")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.table:
        print(tables(load()))
        real = args.real_results or REAL_RESULTS
        if real.exists():
            print("\n" + real_table(json.loads(real.read_text())))
        return
    data = data_folder(args.data)
    if args.real:
        if args.real_results:
            REAL_RESULTS = args.real_results
        for seed in [int(s) for s in args.seeds.split(",")]:
            for name in [n for n in args.only.split(",") if n]:
                real_runs(data, name, seed)
        return
    results = load()
    results["setup"] = {"budget": args.budget, "batch": args.batch, "random_share": 0.1,
                        "model": "all-MiniLM-L6-v2 (packaged), frozen, mean-pooled, L2-normalised",
                        "fast_model": "jobs.labelling.fast_model.FastModel (logistic regression, C = 40,000 / labels in [10, 1000])",
                        "target": f"{TARGET:.0%} of the same fast model fitted on the whole pool"}
    if args.speed:
        results["refit_speed"] = refit_speed(data)
        save(results)
        log.info("refit speed: %s", json.dumps(results["refit_speed"], indent=1))
    for name in [n for n in args.only.split(",") if n]:
        pool, pool_labels = embedded(data, name, "train")
        test, test_labels = embedded(data, name, "test")
        classes = sorted(set(pool_labels))
        test_gold = np.array([classes.index(label) for label in test_labels])
        if name not in results["full"]:
            results["full"][name] = {**full_pool_score(pool, pool_labels, test, test_gold, classes),
                                     "pool": len(pool), "test": len(test), "classes": classes}
            save(results)
        for seed in [int(s) for s in args.seeds.split(",")]:
            for strategy in STRATEGIES:
                key = f"{name}/{strategy}/{seed}"
                if key in results["runs"]:
                    continue
                started = time.perf_counter()
                results["runs"][key] = simulate(pool, pool_labels, test, test_gold, classes, strategy, seed,
                                                args.budget, args.batch)
                last = results["runs"][key][-1]
                log.info("%s: %.3f at %d labels (%.0f s)", key, last["accuracy"], last["labels"],
                         time.perf_counter() - started)
                results["summary"] = summarise(results)
                save(results)
    for item in [x for x in args.extend.split(",") if x]:
        name, budget = item.split("=")
        extend(results, data, name, int(budget), [int(s) for s in args.seeds.split(",")], args.batch)
    results["summary"] = summarise(results)
    results["summary_long"] = summarise_long(results)
    save(results)
    if args.plot:
        plot(results)
    print(json.dumps(results["summary"], indent=1))


if __name__ == "__main__":
    main()
