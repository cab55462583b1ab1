"""Prediction over a saved model folder, one code path per task, batch first.

The post-processing (word grouping for NER/POS, answer spans for QA) is done
by module-level pure functions over offsets, so it is unit-tested on hand-made
inputs without a model. Inputs are validated before any model work; a bad
input raises ``InvalidInput`` (HTTP 422 at the edge) with a message that says
what shape was expected.
"""
from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from jobs.setfit_method import is_setfit_model, load_classifier
from workbench.errors import ConfigError

log = logging.getLogger(__name__)

TEXT, PAIR, TOKENS, QA, MLM = (
    "text-classification", "text-pair-classification", "token-classification", "question-answering", "masked-lm")
KINDS = (TEXT, PAIR, TOKENS, QA, MLM)
MAX_BATCH = 64
MAX_CHARS = 20_000
TOP_K = 5
MASK_PLACEHOLDER = "[MASK]"
QA_MAX_LENGTH, QA_STRIDE, QA_MAX_ANSWER_TOKENS = 384, 128, 30


class InvalidInput(ConfigError):
    """The request's inputs do not fit the playground's task (HTTP 422)."""


def resolve_kind(task: str, examples: Sequence[dict] = ()) -> str:
    """The widget/predictor kind of a run: text classification splits into single texts and pairs."""
    if task == TEXT and any(e.get("text_pair") for e in examples):
        return PAIR
    if task not in KINDS:
        raise ConfigError(f"playgrounds do not support the task {task!r}")
    return task


# ---------------------------------------------------------------- input validation

_EXPECTED = {
    TEXT: 'a string, or {"text": str}',
    PAIR: '{"text": str, "text_pair": str} or a 2-item list [text, text_pair]',
    TOKENS: 'a string, or {"text": str}',
    QA: '{"question": str, "context": str}',
    MLM: f'a string containing {MASK_PLACEHOLDER}, or {{"text": str}}',
}
_FIELDS = {TEXT: ("text",), PAIR: ("text", "text_pair"), TOKENS: ("text",), QA: ("question", "context"),
           MLM: ("text",)}


def _one(kind: str, raw: Any, where: str) -> dict[str, str]:
    fields = _FIELDS[kind]
    if isinstance(raw, str) and len(fields) == 1:
        item = {fields[0]: raw}
    elif isinstance(raw, (list, tuple)) and kind == PAIR and len(raw) == 2:
        item = dict(zip(fields, raw))
    elif isinstance(raw, dict):
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            raise InvalidInput(f"{where}: unknown field(s) {', '.join(unknown)}; expected {_EXPECTED[kind]}")
        item = {f: raw.get(f) for f in fields}
    else:
        raise InvalidInput(f"{where}: expected {_EXPECTED[kind]}, got {type(raw).__name__}")
    for name, value in item.items():
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput(f"{where}: {name!r} must be a non-empty string; expected {_EXPECTED[kind]}")
        if len(value) > MAX_CHARS:
            raise InvalidInput(f"{where}: {name!r} has {len(value)} characters; the limit is {MAX_CHARS}")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInput(f"{where}: {name!r} holds a lone surrogate {value[exc.start]!r} at character "
                                   f"{exc.start}; send valid Unicode text") from None
    if kind == MLM and MASK_PLACEHOLDER not in item["text"]:
        raise InvalidInput(f"{where}: the text has no {MASK_PLACEHOLDER}; put {MASK_PLACEHOLDER} where a word "
                           "should be filled in")
    return item


def normalize_inputs(kind: str, raw: Any) -> tuple[list[dict[str, str]], bool]:
    """The validated items and whether the request was a batch (a JSON list is always a batch)."""
    if raw is None:
        raise InvalidInput(f'missing "inputs"; expected {_EXPECTED[kind]} or a list of those')
    if isinstance(raw, list) and not (kind == PAIR and len(raw) == 2 and all(isinstance(x, str) for x in raw)):
        if not raw:
            raise InvalidInput("the batch is empty")
        if len(raw) > MAX_BATCH:
            raise InvalidInput(f"the batch has {len(raw)} inputs; the limit is {MAX_BATCH}")
        return [_one(kind, item, f"inputs[{i}]") for i, item in enumerate(raw)], True
    return [_one(kind, raw, "inputs")], False


# ---------------------------------------------------------------- pure post-processing

def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    z = x - x.max(axis=axis, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


_WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def split_words(text: str) -> list[tuple[int, int]]:
    """Character spans of words, with punctuation as words of its own (as CoNLL-style data is tokenized)."""
    return [m.span() for m in _WORD.finditer(text)]


def word_ids_from_offsets(offsets: Sequence[tuple[int, int]], words: Sequence[tuple[int, int]]) -> list[Optional[int]]:
    """For each sub-token, the index of the word its characters fall in; None for special tokens."""
    out: list[Optional[int]] = []
    w = 0
    for start, end in offsets:
        if start == end:
            out.append(None)
            continue
        while w < len(words) and words[w][1] <= start:
            w += 1
        out.append(w if w < len(words) and words[w][0] < end else None)
    return out


def word_labels(word_ids: Sequence[Optional[int]], token_label_ids: Sequence[int], token_scores: Sequence[float],
                n_words: int) -> list[Optional[tuple[int, float]]]:
    """(label id, score) per word, taken from its FIRST sub-token — the sub-token training labelled."""
    out: list[Optional[tuple[int, float]]] = [None] * n_words
    for position, word in enumerate(word_ids):
        if word is not None and word < n_words and out[word] is None:
            out[word] = (int(token_label_ids[position]), float(token_scores[position]))
    return out


def _split_tag(tag: str) -> tuple[str, str]:
    """('B', 'PER') for 'B-PER'; ('', 'NOUN') for a plain tag such as a POS tag."""
    if len(tag) > 2 and tag[1] in "-_" and tag[0] in "BIESLU":
        return tag[0], tag[2:]
    return "", tag


def group_entities(text: str, words: Sequence[tuple[int, int]], labels: Sequence[Optional[tuple[str, float]]]
                   ) -> list[dict[str, Any]]:
    """Merge labelled words into spans: B-X I-X I-X is one X entity; a plain tag (POS) is one span per word.

    ``O`` words and words without a prediction (truncated) are left out; a span's
    score is the mean of its words' scores.
    """
    spans: list[dict[str, Any]] = []
    current: Optional[dict[str, Any]] = None
    for (start, end), label in zip(words, labels):
        if label is None or label[0] in ("O", ""):
            current = None
            continue
        prefix, kind = _split_tag(label[0])
        continues = (current is not None and prefix in ("I", "E", "L") and current["entity"] == kind)
        if continues:
            current["end"] = end
            current["scores"].append(label[1])
        else:
            current = {"entity": kind, "start": start, "end": end, "scores": [label[1]]}
            spans.append(current)
        if prefix in ("E", "L", "S", "U", ""):
            current = None
    return [{"entity": s["entity"], "word": text[s["start"]:s["end"]], "start": s["start"], "end": s["end"],
             "score": round(float(np.mean(s.pop("scores"))), 4)} for s in spans]


def best_span(start_logits: np.ndarray, end_logits: np.ndarray, context_mask: np.ndarray,
              max_answer_tokens: int = QA_MAX_ANSWER_TOKENS) -> tuple[int, int, float, float]:
    """Best (start token, end token, score, null score) of one QA feature.

    Probabilities are a softmax over the context tokens plus the first ([CLS])
    token; the score of a span is p(start) * p(end), the null score is that of
    ([CLS], [CLS]). Spans run forward and are at most ``max_answer_tokens`` long.
    """
    allowed = context_mask.astype(bool).copy()
    allowed[0] = True
    masked_start = np.where(allowed, start_logits, -1e9)
    masked_end = np.where(allowed, end_logits, -1e9)
    p_start, p_end = softmax(masked_start), softmax(masked_end)
    null = float(p_start[0] * p_end[0])
    ctx = context_mask.astype(bool)
    scores = np.outer(np.where(ctx, p_start, 0.0), np.where(ctx, p_end, 0.0))
    scores = np.triu(scores) - np.triu(scores, k=max_answer_tokens)
    if scores.max() <= 0:
        return 0, 0, 0.0, null
    s, e = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return int(s), int(e), float(scores[s, e]), null


# ---------------------------------------------------------------- the predictor

_MODEL_CLASSES = {TEXT: "AutoModelForSequenceClassification", PAIR: "AutoModelForSequenceClassification",
                  TOKENS: "AutoModelForTokenClassification", QA: "AutoModelForQuestionAnswering",
                  MLM: "AutoModelForMaskedLM"}


class Predictor:
    """A loaded model and tokenizer for one kind of prediction.

    Loaded with eager attention so the same weights also give attention maps
    (SDPA returns none); on CPU the two are equally fast for these encoders.
    The fast tokenizer is not safe to call from several threads at once, so a
    lock guards it; forward passes run concurrently.
    """

    def __init__(self, model_dir: Path, kind: str, device: str = "cpu"):
        import torch
        import transformers

        if kind not in KINDS:
            raise ConfigError(f"unknown playground kind {kind!r}")
        self.kind, self.device, self.model_dir = kind, device, Path(model_dir)
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
        if kind == TEXT and is_setfit_model(model_dir):
            self.model = load_classifier(model_dir, attn_implementation="eager").to(device).eval()
        else:
            model_class = getattr(transformers, _MODEL_CLASSES[kind])
            self.model = model_class.from_pretrained(str(model_dir), attn_implementation="eager").to(device).eval()
        self.max_length = int(min(512, self.tokenizer.model_max_length or 512,
                                  getattr(self.model.config, "max_position_embeddings", 512) or 512))
        self.id2label = {int(k): v for k, v in (self.model.config.id2label or {}).items()}
        self.multi_label = self.model.config.problem_type == "multi_label_classification"
        self._tok_lock = threading.Lock()
        self._torch = torch

    @property
    def nbytes(self) -> int:
        """Bytes held by the weights and buffers (what the cache's memory bound counts)."""
        tensors = list(self.model.parameters()) + list(self.model.buffers())
        return sum(t.numel() * t.element_size() for t in tensors)

    def label(self, index: int) -> str:
        return self.id2label.get(index, f"LABEL_{index}")

    def encode(self, *texts: Any, max_length: Optional[int] = None, **kwargs: Any):
        """Tokenize (padded, truncated to the model's limit or ``max_length``) under the tokenizer lock."""
        kwargs.setdefault("truncation", True)
        with self._tok_lock:
            return self.tokenizer(*texts, max_length=min(max_length or self.max_length, self.max_length),
                                  padding=True, return_tensors="pt", **kwargs)

    def forward(self, enc, **kwargs: Any):
        model_inputs = {k: v.to(self.device) for k, v in enc.items()
                        if k in ("input_ids", "attention_mask", "token_type_ids")}
        with self._torch.inference_mode():
            return self.model(**model_inputs, **kwargs)

    def predict(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        """One result per validated item (see ``normalize_inputs``)."""
        return {TEXT: self._classify, PAIR: self._classify, TOKENS: self._tokens, QA: self._qa,
                MLM: self._fill}[self.kind](items)

    def model_text(self, text: str) -> str:
        """The text as the model reads it: ``[MASK]`` becomes this tokenizer's mask token."""
        mask = self.tokenizer.mask_token
        return text.replace(MASK_PLACEHOLDER, mask) if mask and mask != MASK_PLACEHOLDER else text

    def _classify(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        texts = [i["text"] for i in items]
        pairs = [i["text_pair"] for i in items] if self.kind == PAIR else None
        enc = self.encode(texts, pairs) if pairs else self.encode(texts)
        logits = self.forward(enc).logits.float().cpu().numpy()
        probs = 1 / (1 + np.exp(-logits)) if self.multi_label else softmax(logits)
        out = []
        for row in probs:
            scores = {self.label(j): round(float(p), 6) for j, p in enumerate(row)}
            top = int(np.argmax(row))
            out.append({"label": self.label(top), "score": round(float(row[top]), 6), "scores": scores})
        return out

    def _tokens(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        texts = [i["text"] for i in items]
        enc = self.encode(texts, return_offsets_mapping=True)
        probs = softmax(self.forward(enc).logits.float().cpu().numpy())
        out = []
        for row, text in enumerate(texts):
            words = split_words(text)
            offsets = [tuple(o) for o in enc["offset_mapping"][row].tolist()]
            word_ids = word_ids_from_offsets(offsets, words)
            per_word = word_labels(word_ids, probs[row].argmax(-1), probs[row].max(-1), len(words))
            labels = [None if p is None else (self.label(p[0]), p[1]) for p in per_word]
            out.append({"text": text, "entities": group_entities(text, words, labels)})
        return out

    def _qa(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        questions = [i["question"] for i in items]
        contexts = [i["context"] for i in items]
        enc = self.encode(questions, contexts, truncation="only_second", stride=QA_STRIDE,
                          return_overflowing_tokens=True, return_offsets_mapping=True)
        out = self.forward(enc)
        starts, ends = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
        sample_of = enc["overflow_to_sample_mapping"].tolist()
        best: dict[int, dict[str, Any]] = {}
        for feature, sample in enumerate(sample_of):
            sequence_ids = enc.sequence_ids(feature)
            context_mask = np.array([sid == 1 for sid in sequence_ids])
            s, e, score, null = best_span(starts[feature], ends[feature], context_mask)
            offsets = enc["offset_mapping"][feature].tolist()
            current = best.get(sample)
            if current is None or score > current["score"]:
                start_char, end_char = offsets[s][0], offsets[e][1]
                best[sample] = {"answer": contexts[sample][start_char:end_char], "start": start_char,
                                "end": end_char, "score": round(score, 6), "no_answer_score": round(null, 6)}
        return [best.get(i, {"answer": "", "start": 0, "end": 0, "score": 0.0, "no_answer_score": 1.0})
                for i in range(len(items))]

    def _fill(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        texts = [self.model_text(i["text"]) for i in items]
        enc = self.encode(texts)
        logits = self.forward(enc).logits.float().cpu().numpy()
        mask_id = self.tokenizer.mask_token_id
        out = []
        for row, item in enumerate(items):
            positions = np.nonzero(enc["input_ids"][row].numpy() == mask_id)[0]
            masks = []
            for n, position in enumerate(positions):
                probs = softmax(logits[row, position])
                probs[self.tokenizer.all_special_ids] = 0.0  # never offer [CLS], [MASK], ... as a fill
                top = np.argsort(-probs)[:TOP_K]
                candidates = []
                for token_id in top:
                    token = self.tokenizer.decode([int(token_id)]).strip()
                    candidates.append({"token": token, "score": round(float(probs[token_id]), 6),
                                       "sequence": _replace_nth(item["text"], MASK_PLACEHOLDER, n, token)})
                masks.append({"mask": n, "candidates": candidates})
            if not masks:
                raise InvalidInput("the mask was cut off: put [MASK] nearer the start of a long text")
            out.append({"text": item["text"], "masks": masks})
        return out


def _replace_nth(text: str, needle: str, n: int, replacement: str) -> str:
    parts = text.split(needle)
    return needle.join(parts[:n + 1]) + replacement + needle.join(parts[n + 1:])
