"""Documents longer than the model's window: read in overlapping windows, scored by pooling the windows.

A text longer than the run's ``max_length`` is cut into windows of ``max_length`` tokens that overlap by
``stride`` tokens (the tokenizer's ``return_overflowing_tokens`` with ``stride``; a pair's second text is
kept whole in every window), at most ``max_windows`` per document (the rest are dropped and counted). The
model scores every window and the document's logits pool them:

- ``mean``: the mean of the windows' logits;
- ``max``: the largest logit of each class over the windows;
- ``attention``: a weighted mean of the windows' logits, the weights a softmax over a learned score of each
  window's [CLS] vector (``AttentionPool``: one linear layer, initialised to zero, so it starts as the mean).

Training is on documents (``ChunkedClassifier``): a batch holds every window of a few documents, the loss is
on the pooled document logits. A one-window document's pooled score is the model's score of that window.
What a trained model needs to read documents again (window, stride, pooling and the attention weights) is in
``model/chunking.json`` (``save_config``/``load_config``). The window arithmetic is shared with the data
check (``storage.datasets.stats.window_count``). numpy only at import; torch loads with the module's classes.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from storage.datasets.stats import default_stride, window_count
from storage.errors import TrainingError

log = logging.getLogger(__name__)

POOLINGS = ("mean", "max", "attention")
DEFAULT_POOLING = "mean"
DEFAULT_MAX_WINDOWS = 16
CONFIG_FILE = "chunking.json"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

__all__ = ["POOLINGS", "DEFAULT_POOLING", "DEFAULT_MAX_WINDOWS", "CONFIG_FILE", "Chunking", "Windows",
           "split_windows", "pool", "load_config", "save_config", "default_stride", "window_count"]


@dataclasses.dataclass
class Chunking:
    """How a run reads long documents: the window (the run's ``max_length``), the overlap, the pooling."""

    pooling: str
    window: int
    stride: int
    max_windows: int = DEFAULT_MAX_WINDOWS
    # the attention pooling's learned scorer of a window's [CLS] vector: weight (hidden floats) and bias
    scorer: Optional[dict] = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Windows:
    """Windows of several documents, in document order: the tokenizer's features per window, the document
    each window reads, and per document the windows kept and dropped (beyond ``max_windows``)."""

    features: dict[str, list[list[int]]]
    document: list[int]
    kept: list[int]
    dropped: list[int]

    @property
    def documents(self) -> int:
        return len(self.kept)

    def of(self, index: int) -> dict[str, list[list[int]]]:
        """The features of document ``index``'s windows."""
        rows = [i for i, d in enumerate(self.document) if d == index]
        return {name: [values[i] for i in rows] for name, values in self.features.items()}


def fit_stride(tokenizer, window: int, stride: int, pair: bool) -> int:
    """``stride`` within what the tokenizer accepts: windows must advance by at least one token."""
    room = window - tokenizer.num_special_tokens_to_add(pair=pair)
    return max(0, min(stride, room // 2))


def split_windows(tokenizer, texts: Sequence[str], pairs: Optional[Sequence[Optional[str]]], window: int,
                  stride: int, max_windows: int = DEFAULT_MAX_WINDOWS, token_type_ids: bool = True) -> Windows:
    """Every document of ``texts`` (with its ``pairs`` text, kept whole in each window) as windows of at most
    ``window`` tokens overlapping by ``stride``; a document's windows beyond ``max_windows`` are dropped and
    counted. A pair too long to leave room for the first text is cut from its end."""
    has_pairs = pairs is not None and any(p for p in pairs)
    stride = fit_stride(tokenizer, window, stride, has_pairs)
    second = [p or "" for p in pairs] if has_pairs else None
    if second is not None:
        second = _fit_pairs(tokenizer, second, window, stride)
    encoded = tokenizer(list(texts), second, truncation="only_first" if has_pairs else True, max_length=window,
                        stride=stride, return_overflowing_tokens=True)
    mapping = list(encoded["overflow_to_sample_mapping"])
    names = [n for n in _INPUTS if n in encoded and (n != "token_type_ids" or token_type_ids)]
    kept, dropped = [0] * len(texts), [0] * len(texts)
    features: dict[str, list[list[int]]] = {n: [] for n in names}
    document: list[int] = []
    for row, sample in enumerate(mapping):
        if kept[sample] >= max_windows:
            dropped[sample] += 1
            continue
        kept[sample] += 1
        document.append(int(sample))
        for name in names:
            features[name].append(list(encoded[name][row]))
    return Windows(features, document, kept, dropped)


def window_counts(tokenizer, texts: Sequence[str], pairs: Optional[Sequence[Optional[str]]], window: int,
                  stride: int) -> list[int]:
    """How many windows ``split_windows`` (same arguments, no cap) makes of each text, from the texts' lengths
    (``window_count``); what a pair text takes from each window is left out, so a pair can need more."""
    has_pairs = pairs is not None and any(p for p in pairs)
    specials = tokenizer.num_special_tokens_to_add(pair=has_pairs)
    stride = fit_stride(tokenizer, window, stride, has_pairs)
    lengths = [len(ids) for ids in tokenizer(list(texts), add_special_tokens=False, truncation=False,
                                             verbose=False)["input_ids"]]
    return [window_count(n + specials, window, stride, specials) for n in lengths]


def window_groups(counts: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """Documents of ``counts`` windows cut into runs of neighbours, as (start, stop), of at most ``budget``
    windows each (a document of more makes a run alone)."""
    groups, start, held = [], 0, 0
    for index, count in enumerate(counts):
        if index > start and held + count > budget:
            groups.append((start, index))
            start, held = index, 0
        held += count
    if len(counts) > start:
        groups.append((start, len(counts)))
    return groups


def _fit_pairs(tokenizer, pairs: list[str], window: int, stride: int) -> list[str]:
    """Second texts cut so that each window keeps at least ``stride`` + 1 tokens of the first text."""
    room = window - tokenizer.num_special_tokens_to_add(pair=True) - stride - 1
    enc = tokenizer(pairs, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for text, offsets in zip(pairs, enc["offset_mapping"]):
        out.append(text[:offsets[max(room, 1) - 1][1]] if len(offsets) > room else text)
    return out


def dropped_message(windows_dropped: Sequence[int], max_windows: int) -> str:
    """What ``max_windows`` cut, for the run log and the data check; empty when nothing was dropped."""
    cut = [n for n in windows_dropped if n]
    if not cut:
        return ""
    return (f"{len(cut):,} document(s) need more than {max_windows} windows: {sum(cut):,} window(s) beyond the "
            f"first {max_windows} were dropped (raise train.max_windows to read them, at the cost of memory "
            "and time)")


def softmax_by_document(scores: np.ndarray, document: np.ndarray, n_documents: int) -> np.ndarray:
    """Per window, the softmax of ``scores`` among the windows of its document."""
    top = np.full(n_documents, -np.inf)
    np.maximum.at(top, document, scores)
    weights = np.exp(scores - top[document])
    sums = np.zeros(n_documents)
    np.add.at(sums, document, weights)
    return weights / sums[document]


def pool(logits: np.ndarray, document: Sequence[int], pooling: str, scores: Optional[np.ndarray] = None,
         n_documents: Optional[int] = None) -> np.ndarray:
    """The documents' logits from their windows' ``logits`` (windows x classes), ``document`` naming each
    window's document (0 … n-1, every one present); ``scores`` (one per window) for ``attention``."""
    logits = np.asarray(logits, dtype=np.float64)
    document = np.asarray(document, dtype=np.int64)
    n = int(n_documents if n_documents is not None else document.max() + 1)
    if pooling == "max":
        out = np.full((n, logits.shape[1]), -np.inf)
        np.maximum.at(out, document, logits)
        return out
    if pooling == "attention":
        if scores is None:
            raise TrainingError("attention pooling needs a score per window", "pass the scorer's outputs")
        weights = softmax_by_document(np.asarray(scores, dtype=np.float64), document, n)
    elif pooling == "mean":
        counts = np.bincount(document, minlength=n).astype(np.float64)
        weights = 1.0 / counts[document]
    else:
        raise TrainingError(f"unknown pooling {pooling!r}", f"choose one of {', '.join(POOLINGS)}")
    out = np.zeros((n, logits.shape[1]))
    np.add.at(out, document, logits * weights[:, None])
    return out


def window_scores(cls_vectors: np.ndarray, scorer: dict) -> np.ndarray:
    """The attention pooling's score of each window from its [CLS] vector (``Chunking.scorer``)."""
    return np.asarray(cls_vectors, dtype=np.float64) @ np.asarray(scorer["weight"]) + float(scorer["bias"])


def most_attended(document_windows: int, scores: Optional[np.ndarray], logits: np.ndarray, pooling: str) -> int:
    """The window that mattered most to one document's score: the highest attention weight, or for mean and
    max the window whose top logit is the largest (for the attention view of a long text)."""
    if document_windows <= 1:
        return 0
    if pooling == "attention" and scores is not None:
        return int(np.argmax(scores))
    return int(np.argmax(np.asarray(logits).max(axis=-1)))


def save_config(model_dir: Path, chunking: Chunking) -> None:
    (Path(model_dir) / CONFIG_FILE).write_text(json.dumps(chunking.to_dict()), encoding="utf-8")


def load_config(model_dir: str | Path) -> Optional[Chunking]:
    """The run's chunking (``model/chunking.json``); None for a run that truncates."""
    path = Path(model_dir) / CONFIG_FILE
    if not path.is_file():
        return None
    raw = json.loads(path.read_text(encoding="utf-8"))
    return Chunking(**{f.name: raw[f.name] for f in dataclasses.fields(Chunking) if f.name in raw})


# ------------------------------------------------------------------ torch: training on documents

def pool_torch(logits, document, pooling: str, scores=None):
    """``pool`` in torch, differentiable: the documents' logits from their windows' (``document``: a long tensor)."""
    import torch

    n = int(document.max().item()) + 1
    classes = logits.shape[-1]
    index = document.unsqueeze(-1).expand(-1, classes)
    if pooling == "max":
        out = torch.full((n, classes), float("-inf"), dtype=logits.dtype, device=logits.device)
        return out.scatter_reduce(0, index, logits, reduce="amax", include_self=True)
    if pooling == "attention":
        top = torch.full((n,), float("-inf"), dtype=scores.dtype, device=scores.device)
        top = top.scatter_reduce(0, document, scores, reduce="amax", include_self=True)
        weights = torch.exp(scores - top[document])
        sums = torch.zeros(n, dtype=weights.dtype, device=weights.device).index_add(0, document, weights)
        weights = weights / sums[document]
    else:
        counts = torch.bincount(document, minlength=n).to(logits.dtype)
        weights = 1.0 / counts[document]
    out = torch.zeros((n, classes), dtype=logits.dtype, device=logits.device)
    return out.index_add(0, document, logits * weights.unsqueeze(-1).to(logits.dtype))


def _modules():
    """The torch classes, built on first use so that importing this module loads no torch."""
    import torch
    from transformers.modeling_outputs import SequenceClassifierOutput

    class AttentionPool(torch.nn.Module):
        """A score per window from its [CLS] vector; zero at the start, so attention begins as the mean."""

        def __init__(self, hidden: int):
            super().__init__()
            self.score = torch.nn.Linear(hidden, 1)
            torch.nn.init.zeros_(self.score.weight)
            torch.nn.init.zeros_(self.score.bias)

        def forward(self, cls_vectors):
            return self.score(cls_vectors).squeeze(-1)

        def as_dict(self) -> dict:
            return {"weight": self.score.weight.detach().cpu().double().reshape(-1).tolist(),
                    "bias": float(self.score.bias.detach().cpu().item())}

    class ChunkedClassifier(torch.nn.Module):
        """A sequence classifier over windows, its loss on the documents' pooled logits.

        Takes the windows of a batch of documents (``document``: each window's document, 0 … n-1) and the
        documents' ``labels``; returns the documents' logits."""

        def __init__(self, model, pooling: str, multi_label: bool, class_weights: Optional[list[float]] = None,
                     scorer: Optional[dict] = None):
            super().__init__()
            self.model, self.pooling, self.multi_label = model, pooling, multi_label
            self.class_weights = class_weights
            hidden = getattr(model.config, "hidden_size", None) or model.config.dim
            self.pool = AttentionPool(hidden) if pooling == "attention" else None
            if self.pool is not None and scorer:  # a trained run's weights (chunking.json), for its evaluation
                with torch.no_grad():
                    self.pool.score.weight.copy_(torch.tensor([scorer["weight"]]))
                    self.pool.score.bias.fill_(float(scorer["bias"]))

        @property
        def config(self):
            return self.model.config

        def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, document=None, labels=None):
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                inputs["token_type_ids"] = token_type_ids
            out = self.model(**inputs, output_hidden_states=self.pool is not None)
            scores = self.pool(out.hidden_states[-1][:, 0]) if self.pool is not None else None
            if document is None:
                document = torch.arange(input_ids.shape[0], device=input_ids.device)
            logits = pool_torch(out.logits, document, self.pooling, scores)
            loss = None if labels is None else self.loss(logits, labels)
            return SequenceClassifierOutput(loss=loss, logits=logits)

        def loss(self, logits, labels):
            if self.multi_label:
                return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
            weight = (torch.tensor(self.class_weights, dtype=logits.dtype, device=logits.device)
                      if self.class_weights else None)
            return torch.nn.functional.cross_entropy(logits, labels.view(-1), weight=weight)

        def chunking(self, window: int, stride: int, max_windows: int) -> Chunking:
            return Chunking(self.pooling, window, stride, max_windows,
                            self.pool.as_dict() if self.pool is not None else None)

    class DocumentCollator:
        """Pads every window of a batch of documents and says which document each window reads."""

        def __init__(self, tokenizer):
            from transformers import DataCollatorWithPadding

            self.pad = DataCollatorWithPadding(tokenizer)

        def __call__(self, documents: list[dict]) -> dict:
            windows, document = [], []
            for index, doc in enumerate(documents):
                names = [n for n in _INPUTS if n in doc]
                for w in range(len(doc["input_ids"])):
                    windows.append({n: doc[n][w] for n in names})
                    document.append(index)
            batch = dict(self.pad(windows))
            out = {}
            if "labels" in documents[0]:  # first: the trainer counts an evaluation batch's examples by it
                labels = [doc["labels"] for doc in documents]
                dtype = torch.float32 if isinstance(labels[0], (list, tuple)) else torch.long
                out["labels"] = torch.tensor(labels, dtype=dtype)
            return {**out, **batch, "document": torch.tensor(document, dtype=torch.long)}

    return AttentionPool, ChunkedClassifier, DocumentCollator


def chunked_classifier(model, pooling: str, multi_label: bool, class_weights: Optional[list[float]] = None,
                       scorer: Optional[dict] = None):
    """``model`` (a sequence classifier) trained on documents read in windows, pooled by ``pooling``; ``scorer``:
    a trained attention pooling's weights."""
    return _modules()[1](model, pooling, multi_label, class_weights, scorer)


def document_collator(tokenizer):
    return _modules()[2](tokenizer)


def attention_pool(hidden: int):
    return _modules()[0](hidden)


# ------------------------------------------------------------------ reading documents with a trained model
#
# Every reader of a chunked run (prediction and evaluation jobs, the playground and its REST API, the ONNX
# export's parity check) splits documents with ``split_windows``, runs its own forward passes over the windows
# (``window_batch``), and pools with ``pool``. An attention-pooled run's model answers with the window scores
# beside the logits (``scoring_model``; its ONNX graph has the same second output, ``WINDOW_SCORE``).

WINDOW_SCORE = "window_score"


def outputs_of(chunking: Optional[Chunking]) -> tuple[str, ...]:
    """The outputs a chunked run's reader needs from each window."""
    return ("logits", WINDOW_SCORE) if chunking is not None and chunking.pooling == "attention" else ("logits",)


def scoring_model(model, chunking: Optional[Chunking]):
    """``model`` returning ``window_score`` (the attention pooling's score of each window, from its [CLS]
    vector) beside ``logits``; ``model`` itself unless the run pools by attention."""
    if chunking is None or chunking.pooling != "attention":
        return model
    import torch

    class ScoringModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.score = torch.nn.Linear(len(chunking.scorer["weight"]), 1)
            with torch.no_grad():
                self.score.weight.copy_(torch.tensor([chunking.scorer["weight"]]))
                self.score.bias.fill_(float(chunking.scorer["bias"]))

        @property
        def config(self):
            return self.model.config

        # named inputs: the ONNX exporter feeds the graph the inputs a model's forward names
        def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
            import types

            kwargs.pop("output_hidden_states", None)
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask, **kwargs}
            if token_type_ids is not None:
                inputs["token_type_ids"] = token_type_ids
            out = self.model(**inputs, output_hidden_states=True)
            return types.SimpleNamespace(logits=out.logits, attentions=getattr(out, "attentions", None),
                                         **{WINDOW_SCORE: self.score(out.hidden_states[-1][:, 0]).squeeze(-1)})

    return ScoringModel().to(next(model.parameters()).device).eval()


def window_batch(tokenizer, windows: Windows):
    """The windows of ``windows`` as padded tensors (``input_ids``, ``attention_mask``, ...)."""
    rows = [{name: values[i] for name, values in windows.features.items()} for i in range(len(windows.document))]
    return tokenizer.pad(rows, padding=True, return_tensors="pt")


def pooled(windows: Windows, chunking: Chunking, logits: np.ndarray, scores: Optional[np.ndarray]) -> np.ndarray:
    """The documents' logits, in document order."""
    return pool(logits, windows.document, chunking.pooling, scores, n_documents=windows.documents)


def resolve(hp: dict, tokenizer, records: Sequence[dict], task: str) -> Optional[Chunking]:
    """Settle ``hp["chunking"]`` ("auto" measured on the training ``records``) to a pooling or "off", say why in
    ``hp["why"]`` and the log, and return the run's ``Chunking`` (None when it truncates)."""
    from jobs.specs.hyperparameters import chunking_choice

    requested, window = hp.get("chunking", "off"), int(hp["max_length"])
    share = None
    if task == "text-classification" and requested != "off" and records:
        lengths = [len(ids) for ids in tokenizer([r["text"] for r in records],
                                                 [r.get("text_pair") or "" for r in records]
                                                 if any(r.get("text_pair") for r in records) else None,
                                                 truncation=False)["input_ids"]]
        share = sum(n > window for n in lengths) / len(lengths)
    pooling, why = chunking_choice(task, requested, share, window, hp.get("method", "finetune"))
    hp["chunking"] = pooling
    if pooling == "off":
        if share:
            log.info("%.0f%% of the training texts are longer than %d tokens: they are truncated (train.chunking "
                     "%s)", 100 * share, window, requested)
        return None
    stride = hp.get("chunk_stride")
    stride = default_stride(window) if stride is None else int(stride)
    hp["chunk_stride"] = stride
    hp["why"] = f"{hp.get('why', '')}; {why}" if hp.get("why") else why
    log.info("chunking: %s", why)
    return Chunking(pooling, window, stride, int(hp.get("max_windows") or DEFAULT_MAX_WINDOWS))


def describe(chunking: Optional[Chunking]) -> dict[str, Any]:
    """The chunking facts a run reports (empty when it truncates)."""
    if chunking is None:
        return {}
    return {"chunking": chunking.pooling, "chunk_window": chunking.window, "chunk_stride": chunking.stride,
            "max_windows": chunking.max_windows}
