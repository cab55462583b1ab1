"""Cold start: clusters of the pool's frozen embeddings, a coverage order over them, zero-shot suggestions.

Pure numpy / scikit-learn. Embeddings are rows of a float32 matrix (one row per pool position), L2-normalised.
"""
from __future__ import annotations

import numpy as np
from sklearn.cluster import MiniBatchKMeans

MAX_CLUSTERS = 200


def default_k(n: int) -> int:
    """round(sqrt(n / 2)) clamped to [2, 200], never more than the pool holds."""
    return int(min(max(2, round((n / 2) ** 0.5)), MAX_CLUSTERS, max(n, 1)))


def cluster_pool(emb: np.ndarray, k: int | None = None, seed: int = 0) -> np.ndarray:
    """(n,) cluster ids (0..k-1) from MiniBatchKMeans over the rows of ``emb``; k defaults to ``default_k``."""
    emb = np.asarray(emb, dtype=np.float32)
    n = len(emb)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    k = default_k(n) if k is None else int(min(max(1, k), n))
    if k == 1:
        return np.zeros(n, dtype=np.int64)
    model = MiniBatchKMeans(n_clusters=k, n_init=3, random_state=seed, batch_size=min(n, 2048))
    return model.fit_predict(emb).astype(np.int64)


def coverage_order(emb: np.ndarray, clusters: np.ndarray, seed: int = 0) -> np.ndarray:
    """A permutation of range(n): the item nearest each cluster's centroid first (largest cluster first), then
    round-robin across the clusters in the same order, each cluster's other items in a seeded random order."""
    emb = np.asarray(emb, dtype=np.float32)
    clusters = np.asarray(clusters, dtype=np.int64)
    n = len(clusters)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    ids, inverse, sizes = np.unique(clusters, return_inverse=True, return_counts=True)
    by_cluster = np.argsort(inverse, kind="stable")
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    centroids = np.add.reduceat(emb[by_cluster], starts, axis=0) / sizes[:, None]
    distance = -_own_centroid_dot(emb, centroids.astype(np.float32), inverse)  # unit rows: nearer = larger dot
    rng = np.random.default_rng(seed)
    within = rng.random(n)
    within[_nearest_per_group(inverse, distance, len(ids))] = -1.0  # the nearest item leads its cluster
    cluster_turn = np.empty(len(ids), dtype=np.int64)
    cluster_turn[np.argsort(-sizes, kind="stable")] = np.arange(len(ids))
    return round_robin(inverse, within, cluster_turn)


def round_robin(groups: np.ndarray, within: np.ndarray, group_turn: np.ndarray) -> np.ndarray:
    """Indices ordered round by round: in each round one item per group (groups by ``group_turn`` ascending),
    each group's items taken by ``within`` ascending. Vectorised: sorts by (place in group, group's turn)."""
    n = len(groups)
    by_group = np.lexsort((within, groups))
    sorted_groups = groups[by_group]
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    place = np.empty(n, dtype=np.int64)
    place[by_group] = np.arange(n) - run_start
    return np.lexsort((group_turn[groups], place)).astype(np.int64)


def _own_centroid_dot(emb: np.ndarray, centroids: np.ndarray, inverse: np.ndarray, chunk: int = 8192) -> np.ndarray:
    dots = np.empty(len(emb), dtype=np.float32)
    for start in range(0, len(emb), chunk):
        rows = slice(start, start + chunk)
        dots[rows] = np.einsum("ij,ij->i", emb[rows], centroids[inverse[rows]])
    return dots


def _nearest_per_group(groups: np.ndarray, distance: np.ndarray, n_groups: int) -> np.ndarray:
    order = np.lexsort((distance, groups))
    first = np.r_[True, groups[order][1:] != groups[order][:-1]]
    return order[first]


def zero_shot(emb: np.ndarray, class_emb: np.ndarray, temperature: float = 0.05) -> np.ndarray:
    """(n, C) probabilities: softmax of the cosine similarity of each text to each class description, divided by
    ``temperature``. For multi-label the caller thresholds (or reads the columns as independent scores)."""
    emb = _normalise(np.asarray(emb, dtype=np.float64))
    class_emb = _normalise(np.asarray(class_emb, dtype=np.float64))
    logits = emb @ class_emb.T / temperature
    logits -= logits.max(axis=1, keepdims=True)
    proba = np.exp(logits)
    return proba / proba.sum(axis=1, keepdims=True)


def _normalise(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)
