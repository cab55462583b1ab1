"""Prediction over a saved model folder, one code path per task, batch first.

The post-processing (word grouping for NER/POS, answer spans for QA) is done
by module-level pure functions over offsets, in ``jobs.evaluation.postprocess`` where the
prediction jobs share them, so it is unit-tested on hand-made inputs without a
model. Inputs are validated before any model work; a bad input raises
``InvalidInput`` (HTTP 422 at the edge) with a message that says what shape
was expected.
"""
from __future__ import annotations

import copy
import logging
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from workbench.errors import ConfigError
from workbench.services.serving import (  # noqa: F401 - re-exported: the playground's names for the shared functions
    MASK_PLACEHOLDER, PASS_FLOATS, PYTORCH, QA_MAX_ANSWER_TOKENS, QA_STRIDE, TOP_K, Calibration, apply_calibration,
    best_span, check_runtime, floats_per_token, group_entities, is_setfit_model, load_calibration, load_classifier,
    load_chunking, load_onnx_model, outputs_of, pooled, replace_nth, rows_per_pass, scoring_model, softmax,
    split_windows, split_words, window_batch, word_ids_from_offsets, word_labels)

log = logging.getLogger(__name__)

TEXT, PAIR, TOKENS, QA, MLM = (
    "text-classification", "text-pair-classification", "token-classification", "question-answering", "masked-lm")
KINDS = (TEXT, PAIR, TOKENS, QA, MLM)
MAX_BATCH = 64
MAX_CHARS = 20_000
# a run trained on long documents reads every window of a text (within the request's token budget), so it takes
# longer texts: 100,000 characters is about 18,000 words
LONG_MAX_CHARS = 100_000
MAX_MASKS = 5  # fills per text: each candidate repeats the whole text, so they are bounded too
MODEL_LIMIT = 512  # the most tokens a playground reads per input, whatever the run says
MAX_TOKENS = 64 * MODEL_LIMIT  # tokens per request after truncation, unless the server says otherwise


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


def expected_inputs(kind: str) -> str:
    """What ``inputs`` holds for one input of a playground of ``kind`` (a list of those is a batch)."""
    return _EXPECTED.get(kind, "a string")


FIELDS = {TEXT: ("text",), PAIR: ("text", "text_pair"), TOKENS: ("text",), QA: ("question", "context"),
          MLM: ("text",)}


def _one(kind: str, raw: Any, where: str, max_chars: int = MAX_CHARS) -> dict[str, str]:
    fields = FIELDS[kind]
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
        if len(value) > max_chars:
            raise InvalidInput(f"{where}: {name!r} has {len(value)} characters; the limit is {max_chars}")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInput(f"{where}: {name!r} holds a lone surrogate {value[exc.start]!r} at character "
                                   f"{exc.start}; send valid Unicode text") from None
    if kind == MLM and MASK_PLACEHOLDER not in item["text"]:
        raise InvalidInput(f"{where}: the text has no {MASK_PLACEHOLDER}; put {MASK_PLACEHOLDER} where a word "
                           "should be filled in")
    if kind == MLM and item["text"].count(MASK_PLACEHOLDER) > MAX_MASKS:
        raise InvalidInput(f"{where}: the text has {item['text'].count(MASK_PLACEHOLDER)} {MASK_PLACEHOLDER}s; "
                           f"the limit is {MAX_MASKS} per text")
    return item


def normalize_inputs(kind: str, raw: Any, max_chars: int = MAX_CHARS) -> tuple[list[dict[str, str]], bool]:
    """The validated items and whether the request was a batch (a JSON list is always a batch); ``max_chars``
    per text (``LONG_MAX_CHARS`` for a run that reads long documents in windows)."""
    if raw is None:
        raise InvalidInput(f'missing "inputs"; expected {expected_inputs(kind)} or a list of those')
    if isinstance(raw, list) and not (kind == PAIR and len(raw) == 2 and all(isinstance(x, str) for x in raw)):
        if not raw:
            raise InvalidInput("the batch is empty")
        if len(raw) > MAX_BATCH:
            raise InvalidInput(f"the batch has {len(raw)} inputs; the limit is {MAX_BATCH}")
        return [_one(kind, item, f"inputs[{i}]", max_chars) for i, item in enumerate(raw)], True
    return [_one(kind, raw, "inputs", max_chars)], False


# ---------------------------------------------------------------- the predictor

_MODEL_CLASSES = {TEXT: "AutoModelForSequenceClassification", PAIR: "AutoModelForSequenceClassification",
                  TOKENS: "AutoModelForTokenClassification", QA: "AutoModelForQuestionAnswering",
                  MLM: "AutoModelForMaskedLM"}
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _tensor_bytes(model) -> int:
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def eager_twin(model):
    """A copy of ``model`` that computes attention eagerly (so it returns attention maps) on the SAME tensors.

    The module tree and its config are copied, every parameter and buffer is shared: the twin
    costs no weight memory, and switching it to eager leaves the original on SDPA.
    """
    from transformers import PreTrainedModel

    shared = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    twin = copy.deepcopy(model, memo=shared)
    for module in twin.modules():
        if isinstance(module, PreTrainedModel):
            module.set_attn_implementation("eager")
    return twin


class Predictor:
    """A loaded model and tokenizer for one kind of prediction.

    Predictions run with SDPA attention, which never holds the attention weights: with eager
    attention a batch of 64 inputs of 512 tokens held a 64 x 12 x 512 x 512 tensor per layer
    and one request cost ~1.8 GB. Attention maps come from ``attention_model``, an eager twin
    sharing the weights, made on the first map asked for. With an ONNX ``runtime`` (an exported
    variant in ``onnx_dir``) the session answers every prediction, and the torch model is loaded
    (eager) only when a first attention map is asked for. Inputs are truncated to ``max_length``,
    the length the run was trained at (at most the model's limit and ``MODEL_LIMIT``); a request
    over ``max_tokens`` tokens after truncation is refused. The fast tokenizer is not safe to call
    from several threads at once, so a lock guards it; forward passes run concurrently.
    """

    def __init__(self, model_dir: Path, kind: str, device: str = "cpu", max_length: Optional[int] = None,
                 max_tokens: int = MAX_TOKENS, doc_stride: Optional[int] = None, runtime: str = PYTORCH,
                 onnx_dir: Optional[Path] = None):
        import torch
        import transformers

        from workbench.playground.cache import apply_serving_threads

        apply_serving_threads()  # the server's thread count, before the first forward pass
        if kind not in KINDS:
            raise ConfigError(f"unknown playground kind {kind!r}")
        self.kind, self.device, self.model_dir = kind, device, Path(model_dir)
        self.runtime = check_runtime(runtime)
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
        if self.runtime == PYTORCH:
            self.model = self._torch_model("sdpa")
        elif onnx_dir is None:
            raise ConfigError(f"the {self.runtime} runtime needs the run's export folder")
        else:  # the server's torch thread count holds for the session too (cache.configure_serving_threads)
            self.model = load_onnx_model(model_dir, onnx_dir, self.runtime, device=device,
                                         threads=torch.get_num_threads())
        config = self.model.config
        limits = (max_length, MODEL_LIMIT, self.tokenizer.model_max_length,
                  getattr(config, "max_position_embeddings", None))
        self.max_length = int(min(n for n in limits if n))
        self.max_tokens = int(max_tokens)
        # the engine's rule: the overlap of QA windows leaves room to advance
        self.doc_stride = min(doc_stride or QA_STRIDE, self.max_length // 3)
        self.id2label = {int(k): v for k, v in (config.id2label or {}).items()}
        self.multi_label = config.problem_type == "multi_label_classification"
        # the run's temperature and decision thresholds (jobs.evaluation.postprocess.load_calibration)
        self.calibration = load_calibration(model_dir) if kind in (TEXT, PAIR) else Calibration()
        # a run trained on long documents: every window read and pooled (jobs.training.chunking)
        self.chunking = load_chunking(model_dir) if kind in (TEXT, PAIR) else None
        if self.chunking is not None:  # the run's window, even past MODEL_LIMIT (ModernBERT): the budget bounds it
            self.max_length = int(min(n for n in (self.chunking.window, self.tokenizer.model_max_length,
                                                  getattr(config, "max_position_embeddings", None)) if n))
        outputs = getattr(config, "vocab_size", 0) if kind == MLM else max(2, len(self.id2label))
        self.floats_per_token = floats_per_token(config, outputs)
        self._tok_lock = threading.Lock()
        self._twin_lock = threading.Lock()
        self._spent = threading.local()  # tokens the current thread's prediction has passed (check_size)
        self._eager = None
        self._torch = torch

    @property
    def calibrated(self) -> bool:
        """Whether the scores this predictor returns carry the run's temperature scaling."""
        return self.calibration.calibrated

    def _torch_model(self, attention: str):
        """The run's torch model for this kind, with ``attention`` ("sdpa" or "eager"), ready on the device."""
        import transformers

        if self.kind == TEXT and is_setfit_model(self.model_dir):
            return load_classifier(self.model_dir, attn_implementation=attention).to(self.device).eval()
        model_class = getattr(transformers, _MODEL_CLASSES[self.kind])
        model = model_class.from_pretrained(str(self.model_dir), attn_implementation=attention).to(self.device).eval()
        return scoring_model(model, load_chunking(self.model_dir)) if self.kind in (TEXT, PAIR) else model

    @property
    def nbytes(self) -> int:
        """Bytes held by the weights and buffers (what the cache's memory bound counts; the eager twin shares
        them): an ONNX variant's file size, plus the torch model once attention maps have loaded it."""
        if self.runtime != PYTORCH:
            return self.model.nbytes + (_tensor_bytes(self._eager) if self._eager is not None else 0)
        return _tensor_bytes(self.model)

    def label(self, index: int) -> str:
        return self.id2label.get(index, f"LABEL_{index}")

    def encode(self, *texts: Any, max_length: Optional[int] = None, **kwargs: Any):
        """Tokenize (padded, truncated to ``max_length`` or the run's length) under the tokenizer lock."""
        kwargs.setdefault("truncation", True)
        with self._tok_lock:
            return self.tokenizer(*texts, max_length=min(max_length or self.max_length, self.max_length),
                                  padding=True, return_tensors="pt", **kwargs)

    def check_size(self, enc) -> None:
        """Refuse a request whose tokens after truncation (rows x padded length) exceed ``max_tokens``."""
        rows, length = enc["input_ids"].shape
        if rows * length > self.max_tokens:
            raise InvalidInput(f"the request is {rows} sequence(s) of {length} tokens after truncation to "
                               f"{self.max_length} tokens = {rows * length:,} tokens; the limit is "
                               f"{self.max_tokens:,} tokens per request: send fewer or shorter inputs")
        self._spent.tokens = getattr(self._spent, "tokens", 0) + rows * length

    def attention_model(self):
        """The eager twin of the model (made once, on first use): the only path that returns attention maps.
        An ONNX session returns none, so with an ONNX runtime this is the run's torch model, loaded eager."""
        with self._twin_lock:
            if self._eager is None:
                self._eager = eager_twin(self.model) if self.runtime == PYTORCH else self._torch_model("eager")
            return self._eager

    def forward(self, enc, model=None, **kwargs: Any):
        """One forward pass of ``model`` (default: the SDPA model) over all of ``enc``."""
        model_inputs = {k: v.to(self.device) for k, v in enc.items() if k in _MODEL_INPUTS}
        with self._torch.inference_mode():
            return (model or self.model)(**model_inputs, **kwargs)

    def passes(self, enc) -> Iterator[tuple[slice, Any]]:
        """(rows, outputs) of forward passes over ``enc`` of a few rows each (see ``PASS_FLOATS``)."""
        self.check_size(enc)
        rows, length = enc["input_ids"].shape
        step = rows_per_pass(length, self.floats_per_token)
        for start in range(0, rows, step):
            part = slice(start, min(rows, start + step))
            yield part, self.forward({k: enc[k][part] for k in _MODEL_INPUTS if k in enc})

    def _arrays(self, enc, *names: str) -> list[np.ndarray]:
        """The named outputs (``logits``, ``start_logits``, ...) of the passes over ``enc``, rows joined again."""
        parts = [[getattr(out, name).float().cpu().numpy() for name in names] for _, out in self.passes(enc)]
        return [np.concatenate(column) for column in zip(*parts)]

    def predict(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        """One result per validated item (see ``normalize_inputs``)."""
        return {TEXT: self._classify, PAIR: self._classify, TOKENS: self._tokens, QA: self._qa,
                MLM: self._fill}[self.kind](items)

    def predict_counted(self, items: list[dict[str, str]]) -> tuple[list[dict[str, Any]], int]:
        """``predict`` and the model input tokens it ran (rows x padded length of every pass): what a client's
        token budget is charged (``limits.ClientBounds``)."""
        self._spent.tokens = 0
        return self.predict(items), self._spent.tokens

    def model_text(self, text: str) -> str:
        """The text as the model reads it: ``[MASK]`` becomes this tokenizer's mask token."""
        mask = self.tokenizer.mask_token
        return text.replace(MASK_PLACEHOLDER, mask) if mask and mask != MASK_PLACEHOLDER else text

    def windows(self, texts: list[str], pairs: Optional[list[str]] = None):
        """The texts' windows (``jobs.training.chunking.split_windows``), every one of them, refused as a whole
        (422) when their tokens (windows x window length) exceed the request's ``max_tokens``."""
        with self._tok_lock:
            windows = split_windows(self.tokenizer, texts, pairs, self.max_length, self.chunking.stride,
                                    max_windows=10**9)
        needed = len(windows.document)
        if needed * self.max_length > self.max_tokens:
            longest = max(windows.kept)
            raise InvalidInput(f"the request needs {needed:,} windows of {self.max_length} tokens "
                               f"({needed * self.max_length:,} tokens; the longest text alone {longest:,} windows); "
                               f"the limit is {self.max_tokens:,} tokens per request, "
                               f"{self.max_tokens // self.max_length:,} windows: send shorter or fewer texts")
        return windows

    def _document_logits(self, texts: list[str], pairs: Optional[list[str]]):
        windows = self.windows(texts, pairs)
        with self._tok_lock:
            enc = window_batch(self.tokenizer, windows)
        outputs = self._arrays(enc, *outputs_of(self.chunking))
        return pooled(windows, self.chunking, outputs[0], outputs[1] if len(outputs) > 1 else None), windows

    def _classify(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        texts = [i["text"] for i in items]
        pairs = [i["text_pair"] for i in items] if self.kind == PAIR else None
        windows = None
        if self.chunking is not None:
            logits, windows = self._document_logits(texts, pairs)
        else:
            enc = self.encode(texts, pairs) if pairs else self.encode(texts)
            (logits,) = self._arrays(enc, "logits")
        names = [self.label(j) for j in range(logits.shape[-1])]
        probs, decided = apply_calibration(logits, names, self.multi_label, self.calibration)
        out = []
        for row, decision in zip(probs, decided):
            scores = {name: round(float(p), 6) for name, p in zip(names, row)}
            if self.multi_label:  # "label" stays the most probable class; "labels" are the classes decided
                top = int(np.argmax(row))
                out.append({"label": names[top], "score": round(float(row[top]), 6), "scores": scores,
                            "labels": decision})
            else:
                out.append({"label": decision, "score": scores[decision], "scores": scores})
        if windows is not None:
            for index, result in enumerate(out):
                result["windows"] = windows.kept[index]
        return out

    def _tokens(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        texts = [i["text"] for i in items]
        enc = self.encode(texts, return_offsets_mapping=True)
        probs = softmax(self._arrays(enc, "logits")[0])
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
        self._check_questions(questions)
        enc = self.encode(questions, contexts, truncation="only_second", stride=self.doc_stride,
                          return_overflowing_tokens=True, return_offsets_mapping=True)
        starts, ends = self._arrays(enc, "start_logits", "end_logits")
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

    def _check_questions(self, questions: list[str]) -> None:
        """Refuse a question too long to leave a context window beside it (the tokenizer would abort)."""
        room = self.max_length - self.tokenizer.num_special_tokens_to_add(pair=True) - self.doc_stride - 1
        with self._tok_lock:
            lengths = [len(ids) for ids in self.tokenizer(questions, add_special_tokens=False)["input_ids"]]
        for index, length in enumerate(lengths):
            if length > room:
                where = f"inputs[{index}]" if len(questions) > 1 else "inputs"
                raise InvalidInput(f"{where}: the question has {length} tokens; this model reads at most {room} "
                                   f"beside its context ({self.max_length} tokens in all): ask a shorter question")

    def _fill(self, items: list[dict[str, str]]) -> list[dict[str, Any]]:
        enc = self.encode([self.model_text(i["text"]) for i in items])
        is_mask = (enc["input_ids"] == self.tokenizer.mask_token_id).numpy()
        special = self.tokenizer.all_special_ids
        tops: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per text, per mask: the top token ids, their probs
        for part, out in self.passes(enc):  # a pass's vocabulary-wide logits are reduced before the next
            for offset, row in enumerate(range(part.start, part.stop)):
                row_tops = []
                for position in np.nonzero(is_mask[row])[0]:
                    probs = softmax(out.logits[offset, position].float().cpu().numpy())
                    probs[special] = 0.0  # never offer [CLS], [MASK], ... as a fill
                    top = np.argsort(-probs)[:TOP_K]
                    row_tops.append((top, probs[top]))
                tops.append(row_tops)
        out = []
        for item, row_tops in zip(items, tops):
            if not row_tops:
                raise InvalidInput("the mask was cut off: put [MASK] nearer the start of a long text")
            masks = []
            for n, (top, probs) in enumerate(row_tops):
                candidates = []
                for token_id, p in zip(top, probs):
                    token = self.tokenizer.decode([int(token_id)]).strip()
                    candidates.append({"token": token, "score": round(float(p), 6),
                                       "sequence": replace_nth(item["text"], MASK_PLACEHOLDER, n, token)})
                masks.append({"mask": n, "candidates": candidates})
            out.append({"text": item["text"], "masks": masks})
        return out

