"""A labelling project's two background jobs, run by the job process (``jobs.process.run_job``) like any run.

- **label-embed** embeds the pool's texts not yet in the cache (``jobs.labelling.cache``), in position order and
  in chunks: each chunk goes to the cache first, then its rows are marked ``embedded``, so a job killed at any
  moment resumes where the cache ends. Then, while no refit has ranked the pool, the cold start: clusters of the
  embeddings, one item from each cluster first (``coverage_order``) with the random share mixed in, and zero-shot
  suggestions when every label has a description. Once a refit has ranked the pool, newly embedded texts are
  ranked by a refit instead.
- **label-refit** fits the fast model on the labels given so far, scores the whole pool, ranks the unlabelled
  items (the project's strategy) and writes the ranking, the suggestions and a learning-curve point
  (``LabelEstimate``) in ONE transaction: a job killed mid-refit leaves the previous ranking whole.

Neither job ever writes an item's label, ``labelled_by``/``labelled_at``, claim or ``relabel``: those belong to
the labellers, who keep labelling while a job runs.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
from sqlalchemy import func, select, update
from threadpoolctl import threadpool_limits

from jobs.labelling.cache import EmbeddingCache, load_array, normalise, save_array
# Imported here, not where they are used: threadpoolctl limits only the BLAS / OpenMP libraries loaded already.
from jobs.labelling.coverage import cluster_pool, coverage_order, zero_shot
from jobs.labelling.curve import agreement, estimate
from jobs.labelling.fast_model import FastModel
from jobs.labelling.strategies import rank_pool
from jobs.progress import Cancelled, report_phase
from storage.context import Workbench
from storage.cells import unescape_cell
from storage.errors import TrainingError, WorkbenchError
from storage.models import (KIND_LABEL_EMBED, KIND_LABEL_REFIT, LabelClass, LabelEstimate, LabelItem, LabelProject)

log = logging.getLogger(__name__)

Embedder = Callable[[Sequence[str]], np.ndarray]
PREDICTIONS = "predictions.npy"
# A real run's scores over the pool (a prediction job of its model): probabilities (rows = positions, NaN where
# the run scored no text), and which run they came from. While they exist they drive the suggestions and the
# queries; the fast model still gives the learning curve.
RUN_SCORES, RUN_SCORES_META = "run_scores.npy", "run_scores.json"
# Texts embedded between two writes of the cache (what a kill can cost), and per call of the encoder (how
# often progress is reported and a cancel is heard).
CHUNK_ROWS = 2048
BATCH_ROWS = 64
# A multi-label suggestion holds every label whose probability reaches this.
THRESHOLD = 0.5
EMBEDDING, RANKING = "embedding", "ranking"
# BLAS / OpenMP threads for the clustering, the fast model and the ranking. These jobs run beside training runs
# (the worker's short-job lane), and on two busy cores two spinning threads each made them 10-20 times slower
# than one (k-means on 10,000 x 384: 30 s against 1.4 s; the fit on 1,000 labels: 1.4 s against 0.1 s).
NUMERIC_THREADS = 1


@dataclasses.dataclass(frozen=True)
class Project:
    id: int
    folder: Path
    model: str
    multi_label: bool
    strategy: str
    random_share: float
    refit_every: int
    classes: tuple[str, ...]
    descriptions: tuple[str, ...]


def run_label_job(wb: Workbench, run_id: int, kind: str, spec: Mapping[str, Any], output_dir: Path, reporter,
                  device: str = "cpu", embedder: Optional[Embedder] = None) -> dict[str, Any]:
    """Run one label-embed or label-refit job for the project ``spec["project_id"]``; the result is recorded as
    the run's metrics. ``embedder`` (texts -> vectors) replaces the project's frozen encoder (tests)."""
    project = load_project(wb, int(spec["project_id"]))
    log.info("run %s: %s for labelling project %s", run_id, kind, project.id)
    if kind == KIND_LABEL_EMBED:
        return embed_pool(wb, project, reporter, device=device, embedder=embedder,
                          chunk_rows=int(spec.get("chunk_rows") or CHUNK_ROWS))
    if kind == KIND_LABEL_REFIT:
        with threadpool_limits(limits=NUMERIC_THREADS):
            return refit(wb, project, reporter)
    raise TrainingError(f"run {run_id} is a {kind!r} job, which is no labelling job",
                        "queue label-embed or label-refit jobs only")


def load_project(wb: Workbench, project_id: int) -> Project:
    with wb.db.session() as session:
        row = session.get(LabelProject, project_id)
        if row is None:
            raise TrainingError(f"labelling project {project_id} no longer exists (it was deleted)",
                                "nothing to do: its jobs can be removed")
        classes = session.execute(select(LabelClass.name, LabelClass.description)
                                  .where(LabelClass.project_id == project_id).order_by(LabelClass.position)).all()
        return Project(id=row.id, folder=Path(row.folder), model=row.model, multi_label=bool(row.multi_label),
                       strategy=row.strategy, random_share=float(row.random_share), refit_every=int(row.refit_every),
                       classes=tuple(c.name for c in classes), descriptions=tuple(c.description or "" for c in classes))


# ------------------------------------------------------------------ label-embed

def embed_pool(wb: Workbench, project: Project, reporter, *, device: str = "cpu",
               embedder: Optional[Embedder] = None, chunk_rows: int = CHUNK_ROWS) -> dict[str, Any]:
    """Embed the items past the cache's end, then rank the pool (the cold start, or a refit once one ran)."""
    cache = EmbeddingCache(project.folder)
    key = _model_path(project.model, must_exist=embedder is None)  # the cache says which model made it
    rows = cache.rows(key)
    if rows == 0 and cache.meta().get("rows"):
        log.warning("project %s: the cache was made by another model; embedding the pool again", project.id)
        cache.reset()
    with wb.db.session() as session:
        _mark_embedded(session, project.id, rows)
        total = session.scalar(select(func.count()).where(LabelItem.project_id == project.id)) or 0
    pending, done, started = total - rows, 0, time.monotonic()
    report_phase(reporter, EMBEDDING, 0, pending)
    reporter.progress(0, max(pending, 1), 0.0)
    while rows < total:
        chunk = _texts_from(wb, project.id, rows, chunk_rows)
        if not chunk:
            break
        if embedder is None:
            embedder = _encoder(key, device)
        vectors, cancelled = [], False
        for begin in range(0, len(chunk), BATCH_ROWS):
            vectors.append(np.asarray(embedder(chunk[begin:begin + BATCH_ROWS]), dtype=np.float32))
            done += len(vectors[-1])
            reporter.progress(done, pending, done / pending)
            report_phase(reporter, EMBEDDING, done, pending)
            if reporter.cancel_requested():
                cancelled = True
                break
        block = np.vstack(vectors)
        new_rows = cache.append(rows, block, key)  # the cache first, then the rows that say so
        with wb.db.session() as session:
            _mark_embedded(session, project.id, new_rows, since=rows)
        rows = new_rows
        if cancelled:
            raise Cancelled()
    result: dict[str, Any] = {"embedded": rows, "newly_embedded": done,
                              "embed_seconds": round(time.monotonic() - started, 3)}
    if rows == 0:
        return result
    with threadpool_limits(limits=NUMERIC_THREADS):
        if _refitted(wb, project.id):  # texts added to a ranked pool: ranked by the fast model, no new curve point
            result.update(refit(wb, project, reporter, curve_point=False))
        else:
            result.update(cold_start(wb, project, reporter, embedder or _lazy_encoder(key, device)))
    return result


def _model_path(name: str, must_exist: bool = True) -> str:
    """The folder (or hub id) the project's model loads from; its name as given when it cannot be found and
    ``must_exist`` is off (an embedder was handed in)."""
    from jobs.labelling.encoder import model_path

    try:
        return model_path(name)
    except WorkbenchError:
        if must_exist:
            raise
        return name


def _encoder(path: str, device: str) -> Embedder:
    from jobs.labelling.encoder import load_encoder  # torch, only when there is something to embed

    return load_encoder(path, device)


def _lazy_encoder(path: str, device: str) -> Embedder:
    loaded: list[Embedder] = []

    def embed(texts: Sequence[str]) -> np.ndarray:
        if not loaded:
            loaded.append(_encoder(path, device))
        return loaded[0](texts)

    return embed


def _texts_from(wb: Workbench, project_id: int, start: int, limit: int) -> list[str]:
    """The texts at positions ``start``, ``start + 1``, … (at most ``limit``); positions are dense from 0."""
    with wb.db.session() as session:
        found = session.execute(select(LabelItem.position, LabelItem.text)
                                .where(LabelItem.project_id == project_id, LabelItem.position >= start)
                                .order_by(LabelItem.position).limit(limit)).all()
    for offset, row in enumerate(found):
        if row.position != start + offset:
            raise TrainingError(f"labelling project {project_id} has no item at position {start + offset}",
                                "positions must run 0, 1, 2, … in the order the texts were added")
    return [row.text for row in found]


def _mark_embedded(session, project_id: int, rows: int, since: int = 0) -> None:
    """``embedded`` says what the cache holds: positions ``since``..rows-1 are in, those past it are not."""
    session.execute(update(LabelItem).where(LabelItem.project_id == project_id, LabelItem.position >= since,
                                            LabelItem.position < rows, LabelItem.embedded.is_(False))
                    .values(embedded=True).execution_options(synchronize_session=False))
    session.execute(update(LabelItem).where(LabelItem.project_id == project_id, LabelItem.position >= rows,
                                            LabelItem.embedded.is_(True))
                    .values(embedded=False).execution_options(synchronize_session=False))


def _refitted(wb: Workbench, project_id: int) -> bool:
    with wb.db.session() as session:
        return session.scalar(select(LabelEstimate.id).where(LabelEstimate.project_id == project_id).limit(1)) \
            is not None


@dataclasses.dataclass
class Pool:
    """The embedded items, row i at position i: ids, current labels (None while unlabelled), random picks and
    clusters (-1 where none is stored yet)."""
    ids: np.ndarray
    labels: list[Any]
    random_pick: np.ndarray
    clusters: np.ndarray

    @property
    def labelled(self) -> np.ndarray:
        return np.array([label is not None for label in self.labels], dtype=bool)


def read_pool(wb: Workbench, project_id: int, rows: int) -> Pool:
    with wb.db.session() as session:
        found = session.execute(select(LabelItem.id, LabelItem.label, LabelItem.random_pick, LabelItem.cluster)
                                .where(LabelItem.project_id == project_id, LabelItem.position < rows)
                                .order_by(LabelItem.position)).all()
    return Pool(ids=np.array([r.id for r in found], dtype=np.int64), labels=[r.label for r in found],
                random_pick=np.array([bool(r.random_pick) for r in found], dtype=bool),
                clusters=np.array([-1 if r.cluster is None else r.cluster for r in found], dtype=np.int64))


def cold_start(wb: Workbench, project: Project, reporter, embedder: Embedder) -> dict[str, Any]:
    """Rank a pool no refit has ranked: one item from each cluster first, the random share mixed in; zero-shot
    suggestions when every label has a description (none otherwise)."""
    report_phase(reporter, RANKING)
    started = time.perf_counter()
    cache = EmbeddingCache(project.folder)
    rows = cache.rows()
    emb = np.asarray(cache.load(rows))
    pool = read_pool(wb, project.id, rows)
    clusters = cluster_pool(emb, seed=0)
    unlabelled = ~pool.labelled
    coverage = np.asarray(coverage_order(emb, clusters, seed=0))
    order, picks = mix_random_share(coverage[unlabelled[coverage]], project.random_share, seed=0)
    suggestions: list[Any] = [None] * rows
    confidence = np.full(rows, np.nan)
    if project.classes and all(d.strip() for d in project.descriptions):
        class_emb = normalise(embedder(list(project.descriptions)))
        suggestions, confidence = suggest(zero_shot(emb, class_emb), project.classes, project.multi_label)
    with wb.db.session() as session:
        _write_ranking(session, pool, order, picks, suggestions, confidence, clusters=clusters)
        _set_ranked(session, project.id, int(pool.labelled.sum()))
    log.info("project %s: cold start ranked %d items in %d clusters", project.id, len(order),
             len(np.unique(clusters)))
    return {"ranked": len(order), "clusters": int(len(np.unique(clusters))), "labels": int(pool.labelled.sum()),
            "zero_shot": suggestions[0] is not None if rows else False,
            "cold_start_seconds": round(time.perf_counter() - started, 3)}


def mix_random_share(order: np.ndarray, share: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``order`` with a ``share`` of its slots (evenly spaced: one in ten for 0.1) given to items drawn uniformly
    at random from the rest; returns the new order and the mask of the random picks in it."""
    order = np.asarray(order, dtype=np.int64)
    n = len(order)
    slots = np.arange(n)
    random_slot = np.floor((slots + 1) * share) > np.floor(slots * share)
    shuffled = np.random.default_rng(seed).permutation(order)
    used = np.zeros(int(order.max()) + 1 if n else 0, dtype=bool)
    out = np.empty(n, dtype=np.int64)
    next_ranked = next_random = 0
    for slot in range(n):
        source, at = (shuffled, next_random) if random_slot[slot] else (order, next_ranked)
        while used[source[at]]:
            at += 1
        out[slot] = source[at]
        used[source[at]] = True
        if random_slot[slot]:
            next_random = at + 1
        else:
            next_ranked = at + 1
    return out, random_slot


def suggest(proba: np.ndarray, classes: Sequence[str], multi_label: bool) -> tuple[list[Any], np.ndarray]:
    """Each row's suggested answer and its confidence: the likeliest class and its probability, or (multi-label)
    the sorted labels at or over ``THRESHOLD`` and the mean probability that each label's call is right."""
    names = np.array(classes, dtype=object)
    if not multi_label:
        best = proba.argmax(axis=1)
        return list(names[best]), proba[np.arange(len(proba)), best]
    chosen = proba >= THRESHOLD
    return ([sorted(names[row].tolist()) for row in chosen],
            np.where(chosen, proba, 1.0 - proba).mean(axis=1))


# ------------------------------------------------------------------ label-refit

def refit(wb: Workbench, project: Project, reporter, curve_point: bool = True) -> dict[str, Any]:
    """Fit the fast model on the labels, score and rank the pool, write it all in one transaction; with
    ``curve_point``, estimate the score and add it to the learning curve (``LabelEstimate``) too."""
    report_phase(reporter, RANKING)
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[f"{name}_seconds"] = round(now - clock, 4)
        clock = now
        if reporter.cancel_requested():
            raise Cancelled()

    cache = EmbeddingCache(project.folder)
    rows = cache.rows()
    emb = np.asarray(cache.load(rows))
    pool = read_pool(wb, project.id, rows)
    labelled = pool.labelled & _known(pool.labels, project)  # what the fast model learns from
    lap("read")
    n_labels = int(labelled.sum())
    if n_labels == 0:
        log.info("project %s: no labels yet; the ranking stays as it is", project.id)
        return {"labels": 0, "ranked": 0}
    y = [pool.labels[i] for i in np.flatnonzero(labelled)]
    model = FastModel(list(project.classes), multi_label=project.multi_label, seed=0).fit(emb[labelled], y)
    lap("fit")
    proba = model.predict_proba(emb)
    predicted = suggest(proba, project.classes, project.multi_label)[0]  # the fast model's own, for the agreement
    scored = _run_scores(project, rows)
    if scored is not None:
        proba = np.where(np.isnan(scored), proba, scored)
    suggestions, confidence = suggest(proba, project.classes, project.multi_label)
    lap("predict")
    point = None
    if curve_point:
        point = estimate(emb[labelled], y, pool.random_pick[labelled], list(project.classes), project.multi_label,
                         seed=0)
    previous = _previous_predictions(project, len(predicted))
    agreed = agreement(previous, predicted[:len(previous)]) if previous is not None else None
    lap("estimate")
    clusters = pool.clusters
    fresh_clusters = bool((clusters < 0).any())
    if fresh_clusters:
        clusters = cluster_pool(emb, seed=0)
    order, picks = rank_pool(proba, clusters, ~pool.labelled, project.strategy, random_share=project.random_share,
                             seed=n_labels, batch=project.refit_every, multi_label=project.multi_label)
    lap("rank")
    with wb.db.session() as session:
        _write_ranking(session, pool, np.asarray(order), np.asarray(picks, dtype=bool), suggestions, confidence,
                       clusters=clusters if fresh_clusters else None)
        if point is not None:
            session.add(LabelEstimate(project_id=project.id, labels=n_labels, metric=point.metric,
                                      estimate=point.estimate, low=point.low, high=point.high,
                                      majority=point.majority, source=point.source[:40], agreement=agreed))
        _set_ranked(session, project.id, n_labels)
    lap("write")
    _save_predictions(project, predicted)
    log.info("project %s: refit on %d labels, ranked %d items, estimate %s (%s)", project.id, n_labels, len(order),
             point, timings)
    scores = {"estimate": point.estimate, "low": point.low, "high": point.high, "majority": point.majority} \
        if point is not None else {}
    if scored is not None:
        scores["run_scored"] = int((~np.isnan(scored[:, 0])).sum())
    return {"labels": n_labels, "ranked": int(len(order)), **scores, "agreement": agreed, **timings}


def _known(labels: Sequence[Any], project: Project) -> np.ndarray:
    """Which labels the fast model can learn from: of the project's label set (a list of them, multi-label)."""
    names = set(project.classes)
    if project.multi_label:
        return np.array([isinstance(v, list) and set(v) <= names for v in labels], dtype=bool)
    return np.array([isinstance(v, str) and v in names for v in labels], dtype=bool)


def _write_ranking(session, pool: Pool, order: np.ndarray, picks: np.ndarray, suggestions: Sequence[Any],
                   confidence: np.ndarray, clusters: Optional[np.ndarray] = None) -> None:
    """The new rank, random pick, suggestion and confidence of every unlabelled item (and every item's cluster
    when given): one executemany by primary key, in the caller's transaction."""
    rank = np.full(len(pool.ids), -1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    pick = np.zeros(len(pool.ids), dtype=bool)
    pick[order] = picks
    unlabelled = ~pool.labelled
    values = []
    for row in range(len(pool.ids)):
        if not unlabelled[row] and clusters is None:
            continue
        value: dict[str, Any] = {"id": int(pool.ids[row])}
        if unlabelled[row]:
            sure = float(confidence[row])
            value.update(rank=int(rank[row]) if rank[row] >= 0 else None, random_pick=bool(pick[row]),
                         suggestion=suggestions[row], confidence=None if np.isnan(sure) else sure)
        if clusters is not None:
            value["cluster"] = int(clusters[row])
        values.append(value)
    # The ORM's bulk UPDATE by primary key groups rows by the columns they set: labelled rows (cluster only) and
    # unlabelled ones go as two executemany statements.
    for group in _by_keys(values):
        session.execute(update(LabelItem), group)


def _by_keys(values: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for value in values:
        groups.setdefault(tuple(sorted(value)), []).append(value)
    return list(groups.values())


def _set_ranked(session, project_id: int, labels: int) -> None:
    session.execute(update(LabelProject).where(LabelProject.id == project_id).values(ranked_at_labels=labels)
                    .execution_options(synchronize_session=False))


def _previous_predictions(project: Project, rows: int) -> Optional[list[Any]]:
    """The previous refit's predictions over the pool (its first ``rows`` items), as labels; None before it."""
    stored = load_array(project.folder / PREDICTIONS)
    if stored is None or not len(stored):
        return None
    names = np.array(project.classes, dtype=object)
    stored = stored[:rows]
    if project.multi_label:
        if stored.ndim != 2 or stored.shape[1] != len(names):
            return None
        return [sorted(names[row.astype(bool)].tolist()) for row in stored]
    if stored.ndim != 1 or stored.max(initial=0) >= len(names):
        return None
    return list(names[stored])


def _save_predictions(project: Project, suggestions: Sequence[Any]) -> None:
    index = {name: i for i, name in enumerate(project.classes)}
    if project.multi_label:
        array = np.zeros((len(suggestions), len(index)), dtype=np.uint8)
        for row, names in enumerate(suggestions):
            array[row, [index[n] for n in names]] = 1
    else:
        array = np.array([index[name] for name in suggestions], dtype=np.int32)
    save_array(project.folder / PREDICTIONS, array)


# ------------------------------------------------------------------ a real run's scores

def take_run_scores(wb: Workbench, project_id: int, run_id: int, predictions: Path, reporter) -> dict[str, Any]:
    """A prediction job of run ``run_id``'s model over the project's texts finished with ``predictions`` (the
    job's CSV or JSONL: ``id`` as the item's external id, ``prob_<label>`` per label): keep its probabilities as
    the pool's scores and rank the pool by them at once (no new curve point)."""
    project = load_project(wb, project_id)
    rows = EmbeddingCache(project.folder).rows()
    with wb.db.session() as session:
        where = {r.external_id: r.position for r in session.execute(
            select(LabelItem.external_id, LabelItem.position)
            .where(LabelItem.project_id == project_id, LabelItem.position < rows))}
    scores = np.full((rows, len(project.classes)), np.nan, dtype=np.float32)
    for record in _prediction_rows(predictions):
        key = str(record.get("id", ""))
        position = where.get(key, where.get(unescape_cell(key)))
        values = [record.get(f"prob_{name}") for name in project.classes]
        if position is None or any(v in (None, "") for v in values):
            continue
        scores[position] = [float(v) for v in values]
    scored = int((~np.isnan(scores[:, 0])).sum()) if rows else 0
    if not scored:
        raise TrainingError(f"the predictions of run {run_id} name none of project {project_id}'s texts by id, "
                            "or give no probability for its labels",
                            "predict the pool with a run trained from this project's labels")
    save_array(project.folder / RUN_SCORES, scores)
    (project.folder / RUN_SCORES_META).write_text(json.dumps({"run_id": run_id, "rows": rows, "scored": scored}))
    log.info("project %s: run %s scored %d of %d texts; they now drive the suggestions", project_id, run_id,
             scored, rows)
    with threadpool_limits(limits=NUMERIC_THREADS):
        result = refit(wb, project, reporter, curve_point=False)
    return {**result, "run_scored": scored}


def _prediction_rows(path: Path):
    """The rows of a prediction job's output, as dicts (CSV or JSONL, by the file's suffix)."""
    with open(path, encoding="utf-8", newline="") as handle:
        if path.suffix == ".jsonl":
            for line in handle:
                if line.strip():
                    yield json.loads(line)
        else:
            yield from csv.DictReader(handle)


def _run_scores(project: Project, rows: int) -> Optional[np.ndarray]:
    """The latest real run's scores over the first ``rows`` positions (NaN rows where it scored none), or None."""
    scores = load_array(project.folder / RUN_SCORES)
    if scores is None or scores.ndim != 2 or scores.shape[1] != len(project.classes):
        return None
    out = np.full((rows, len(project.classes)), np.nan, dtype=np.float32)
    kept = min(rows, len(scores))
    out[:kept] = scores[:kept]
    return out
