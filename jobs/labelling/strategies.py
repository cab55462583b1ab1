"""What to ask next: the order of a pool's unlabelled items, with a marked random share.

Strategies (``storage.models.STRATEGIES``):
- ``margin`` (the default, "breaking ties"): smallest gap between the two most probable classes first; for
  multi-label, the class whose probability is nearest 0.5;
- ``entropy``: highest entropy first (the sum of the classes' binary entropies for multi-label);
- ``clusters``: coverage only, round-robin across the embedding clusters, the clusters with the fewest labels first;
- ``random``: a uniform random order (every item is then a random pick).
Margin and entropy add diversity: in every round of ``batch`` queries at most one item per cluster, so a round is
not ten near-duplicates. Every round keeps ~``random_share`` of its places for uniform random items, marked in
``random_pick``: they give the unbiased estimate of the score and the random-sampling control.
Pure numpy.
"""
from __future__ import annotations

import numpy as np

from jobs.labelling.coverage import round_robin

STRATEGY_NAMES = ("margin", "entropy", "random", "clusters")
HEAD_ROUNDS = 50  # rounds ordered with diversity and random picks; the rest follows by uncertainty alone
SCAN_ROUNDS = 50  # a round looks at most this many batches deep for items of clusters not yet in the round


def uncertainty(proba: np.ndarray, strategy: str = "margin", multi_label: bool = False) -> np.ndarray:
    """(n,) how uncertain the model is about each row, higher = ask sooner."""
    proba = np.asarray(proba, dtype=np.float64)
    if strategy == "entropy":
        p = np.clip(proba, 1e-12, 1.0)
        if multi_label:
            q = np.clip(1.0 - proba, 1e-12, 1.0)
            return -(p * np.log(p) + q * np.log(q)).sum(axis=1)
        return -(p * np.log(p)).sum(axis=1)
    if multi_label:
        return 1.0 - 2.0 * np.abs(proba - 0.5).min(axis=1)
    if proba.shape[1] < 2:
        return np.zeros(len(proba))
    top_two = np.partition(proba, proba.shape[1] - 2, axis=1)[:, -2:]
    return 1.0 - (top_two[:, 1] - top_two[:, 0])


def rank_pool(proba: np.ndarray | None, clusters: np.ndarray | None, unlabelled: np.ndarray, strategy: str,
              random_share: float = 0.1, seed: int = 0, batch: int = 10, multi_label: bool = False,
              head_rounds: int = HEAD_ROUNDS) -> tuple[np.ndarray, np.ndarray]:
    """(order, random_pick): the positions of the unlabelled items, best first, and which are random picks.

    ``proba`` (n, C) covers the whole pool (rows of labelled items are ignored) or is None before any model,
    which gives the clusters-only order. ``clusters`` (n,) are the embedding clusters (None: one cluster).
    """
    if strategy not in STRATEGY_NAMES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGY_NAMES)}")
    unlabelled = np.asarray(unlabelled, dtype=bool)
    clusters = np.zeros(len(unlabelled), dtype=np.int64) if clusters is None else np.asarray(clusters)
    positions = np.flatnonzero(unlabelled)
    rng = np.random.default_rng(seed)
    if strategy == "random":
        return rng.permutation(positions).astype(np.int64), np.ones(len(positions), dtype=bool)
    if proba is None or strategy == "clusters":
        base, diverse = _clusters_order(positions, clusters, unlabelled, rng), False
    else:
        scores = uncertainty(np.asarray(proba)[positions], strategy, multi_label)
        base, diverse = positions[np.lexsort((rng.random(len(positions)), -scores))], True
    return _rounds(base, clusters, batch, random_share, rng, diverse, head_rounds)


def _clusters_order(positions: np.ndarray, clusters: np.ndarray, unlabelled: np.ndarray,
                    rng: np.random.Generator) -> np.ndarray:
    ids, groups = np.unique(clusters[positions], return_inverse=True)
    sizes = np.bincount(groups, minlength=len(ids))
    labelled = np.searchsorted(ids, clusters[~unlabelled])
    known = (labelled < len(ids))
    known[known] = ids[labelled[known]] == clusters[~unlabelled][known]
    labelled_counts = np.bincount(labelled[known], minlength=len(ids))
    turn = np.empty(len(ids), dtype=np.int64)
    turn[np.lexsort((-sizes, labelled_counts))] = np.arange(len(ids))
    return positions[round_robin(groups, rng.random(len(positions)), turn)]


def _rounds(base: np.ndarray, clusters: np.ndarray, batch: int, random_share: float, rng: np.random.Generator,
            diverse: bool, head_rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``head_rounds`` rounds of ``batch``: model picks (one per cluster when ``diverse``) with random
    picks at random places; then the untaken rest of ``base`` in its order."""
    batch = max(1, int(batch))
    share = min(max(float(random_share), 0.0), 1.0)
    n = len(base)
    taken = np.zeros(n, dtype=bool)  # indexed by place in base
    shuffled = rng.permutation(n)
    order: list[int] = []
    randoms: list[bool] = []
    cursor, random_cursor = 0, 0
    for round_number in range(head_rounds):
        if len(order) >= n:
            break
        n_random = _share_count(round_number + 1, batch, share) - _share_count(round_number, batch, share)
        n_model = min(batch - n_random, n - len(order) - n_random)
        picks, cursor = _model_picks(base, clusters, taken, cursor, n_model, diverse, batch)
        round_items = [(place, False) for place in picks]
        while n_random and random_cursor < n:
            place = int(shuffled[random_cursor])
            random_cursor += 1
            if not taken[place]:
                taken[place] = True
                round_items.insert(int(rng.integers(0, len(round_items) + 1)), (place, True))
                n_random -= 1
        order.extend(place for place, _ in round_items)
        randoms.extend(flag for _, flag in round_items)
    rest = np.flatnonzero(~taken)
    order_array = np.concatenate([np.asarray(order, dtype=np.int64), rest]).astype(np.int64)
    random_pick = np.concatenate([np.asarray(randoms, dtype=bool), np.zeros(len(rest), dtype=bool)])
    return base[order_array], random_pick


def _share_count(rounds: int, batch: int, share: float) -> int:
    return int(np.floor(rounds * batch * share + 0.5))


def _model_picks(base: np.ndarray, clusters: np.ndarray, taken: np.ndarray, cursor: int, wanted: int,
                 diverse: bool, batch: int) -> tuple[list[int], int]:
    """Up to ``wanted`` untaken places from ``cursor`` on, at most one per cluster when ``diverse`` (looking at
    most SCAN_ROUNDS batches deep, then filling with the next untaken). Returns the places and the new cursor."""
    n = len(base)
    while cursor < n and taken[cursor]:
        cursor += 1
    picks: list[int] = []
    seen: set = set()
    scan = cursor
    limit = min(n, cursor + SCAN_ROUNDS * batch)
    while len(picks) < wanted and scan < limit:
        if not taken[scan]:
            cluster = int(clusters[base[scan]])
            if not diverse or cluster not in seen:
                seen.add(cluster)
                picks.append(scan)
                taken[scan] = True
        scan += 1
    scan = cursor
    while len(picks) < wanted and scan < n:  # too few clusters near the top: relax diversity
        if not taken[scan]:
            picks.append(scan)
            taken[scan] = True
        scan += 1
    return picks, cursor
