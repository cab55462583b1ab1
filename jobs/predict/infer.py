"""The torch side of a prediction job: a run's saved model as a ``jobs.predict.job.Predictor``.

Fast by construction: ``jobs.predict.job`` hands over batches of rows of about one length (sorted within
a chunk), each batch is padded only to its own longest row (dynamic padding), the model runs under
``torch.inference_mode`` with SDPA attention (no attention weights held), and a batch is cut into
forward passes that hold a bounded amount of activations (``jobs.evaluation.postprocess.rows_per_pass``), so a batch of
long rows never runs the device out of memory. Inputs are truncated to the run's ``max_length`` (the
length it was trained at, within the model's limit) and each truncated row is flagged.

Per task (the result shapes are in ``jobs.predict.job``): text classification (single texts, pairs,
multi-label, SetFit runs; with the run's temperature and decision thresholds, ``jobs.evaluation.postprocess.Calibration``),
token classification (free text split into words as the playground does, or pre-split CoNLL tokens
tokenized as training tokenizes them), extractive QA (long contexts in overlapping windows, an empty answer
where the null span beats every span) and masked LM (the top fills of each ``[MASK]``, or the
pseudo-perplexity of a text without one: each token masked in turn).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from jobs.export.runtime import PYTORCH, check_runtime, variant_path
from jobs.evaluation.postprocess import (MASK_PLACEHOLDER, PASS_FLOATS, QA_STRIDE, TOP_K, Calibration, apply_calibration,
                            best_span, floats_per_token, group_entities, join_tokens, load_calibration,
                            pseudo_perplexity, replace_nth, rows_per_pass, softmax, split_words, top_fills,
                            word_ids_from_offsets, word_labels)
from jobs.predict.inputs import MLM, QA, TEXT, TOKENS
from jobs.predict.spec import ModelRef
from jobs.training import chunking as chunks
from jobs.training.sentence_model import is_setfit_model, load_classifier
from storage.errors import ConfigError, TrainingError

log = logging.getLogger(__name__)

CPU_BATCH, GPU_BATCH = 64, 256
# Windows of long documents split and held at once (``TorchPredictor._document_logits``); the forward passes over
# them hold ``PASS_FLOATS`` activations whatever this is.
WINDOWS_PER_READ = 256
_MODEL_CLASSES = {TEXT: "AutoModelForSequenceClassification", TOKENS: "AutoModelForTokenClassification",
                  QA: "AutoModelForQuestionAnswering", MLM: "AutoModelForMaskedLM"}
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def load_predictor(model: ModelRef, device: str = "auto", runtime: str = PYTORCH) -> "TorchPredictor":
    """The run's model (``model.model_dir``: a Trainer-saved folder or a SetFit run's) ready to predict; with
    an ONNX ``runtime``, that variant of the run's newest export (``model.onnx_dir``) answers the forward
    passes, and the tokenizer, lengths and calibration stay the run's."""
    from jobs.training.trainer import pick_device  # torch and transformers load only when a model does

    model_dir = Path(model.model_dir)
    if not (model_dir / "config.json").is_file():
        raise TrainingError(f"run {model.run_id} has no saved model in {model_dir}",
                            "predict with a run that succeeded and kept its model")
    hp = model.hyperparameters or {}
    device = pick_device(device)
    return TorchPredictor(model_dir, model.task, device=device, max_length=hp.get("max_length"),
                          doc_stride=hp.get("doc_stride"), multi_label=bool(hp.get("multi_label")),
                          model=_variant(model, runtime, device))


def _variant(model: ModelRef, runtime: str, device: str):
    """The ONNX variant ``runtime`` names (None for PyTorch); a TrainingError when the export is gone."""
    runtime = check_runtime(runtime)
    if runtime == PYTORCH:
        return None
    path = variant_path(model.onnx_dir, runtime) if model.onnx_dir else None
    if path is None or not path.is_file():
        raise TrainingError(f"run {model.run_id} has no {runtime} export any more "
                            f"({path or 'no succeeded export job'}): it was deleted after this job was queued",
                            f"export run {model.run_id} again (`workbench export {model.run_id}`), or queue the "
                            "prediction with the pytorch runtime")
    from jobs.export.runtime import load_onnx_model

    log.info("predicting with %s (%s)", runtime, path)
    return load_onnx_model(model.model_dir, model.onnx_dir, runtime, device=device)


def _load_model(model_dir: Path, task: str):
    """The task's model class with SDPA attention (eager only where an architecture has no SDPA path)."""
    import transformers

    if task == TEXT and is_setfit_model(model_dir):
        return load_classifier(model_dir, attn_implementation="sdpa")
    model_class = getattr(transformers, _MODEL_CLASSES[task])
    try:
        model = model_class.from_pretrained(str(model_dir), attn_implementation="sdpa")
    except (ValueError, ImportError) as exc:
        log.warning("SDPA attention is not available for this model (%s); using its default attention", exc)
        model = model_class.from_pretrained(str(model_dir))
    # a run that pools its windows by attention also answers each window's score (jobs.training.chunking)
    return chunks.scoring_model(model, chunks.load_config(model_dir)) if task == TEXT else model


def run_abstains(model_dir: str | Path) -> bool:
    """Whether the model's run was trained and validated with "no answer" allowed (SQuAD v2): its tables.json,
    beside the model folder, has ``by_kind``."""
    path = Path(model_dir).parent / "tables.json"
    try:
        return bool(json.loads(path.read_text(encoding="utf-8")).get("by_kind")) if path.is_file() else False
    except (OSError, ValueError, AttributeError):
        log.warning("unreadable %s: the run is taken to have never abstained", path)
        return False


def run_reads_pairs(model_dir: str | Path, look: int = 1000) -> Optional[bool]:
    """Whether a text-classification run was trained on pairs of texts: its validation predictions
    (``predictions.jsonl`` beside the model folder) carry ``text_pair``. None when they cannot tell (no file,
    no records): the input's columns decide then."""
    path = Path(model_dir).parent / "predictions.jsonl"
    seen = False
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle):
                if number >= look:
                    break
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and "text" in record:
                    seen = True
                    if record.get("text_pair"):
                        return True
    except OSError:
        return None
    return False if seen else None


class TorchPredictor:
    """A loaded model and tokenizer predicting batches of rows for one task."""

    def __init__(self, model_dir: Path, task: str, *, device: str = "cpu", max_length: Optional[int] = None,
                 doc_stride: Optional[int] = None, multi_label: bool = False, batch_size: Optional[int] = None,
                 model: Any = None):
        import torch
        import transformers

        if task not in _MODEL_CLASSES:
            raise ConfigError(f"prediction files are not supported for the task {task!r}")
        self.task, self.device, self._torch = task, device, torch
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
        # ``model``: a stand-in with the torch model's call (an exported variant, jobs.export.runtime.OnnxModel)
        self.model = (model if model is not None else _load_model(Path(model_dir), task)).to(device).eval()
        config = self.model.config
        limits = (max_length, self.tokenizer.model_max_length if self.tokenizer.model_max_length < 10**6 else None,
                  getattr(config, "max_position_embeddings", None))
        self.max_length = int(min(n for n in limits if n))
        self.doc_stride = min(doc_stride or QA_STRIDE, self.max_length // 3)
        id2label = {int(k): v for k, v in (config.id2label or {}).items()}
        self.labels = tuple(id2label[i] for i in sorted(id2label)) if task in (TEXT, TOKENS) else ()
        self.multi_label = multi_label or config.problem_type == "multi_label_classification"
        # the run's temperature and decision thresholds (jobs.evaluation.postprocess.load_calibration)
        self.calibration = load_calibration(model_dir) if task == TEXT else Calibration()
        self.calibrated = self.calibration.calibrated
        # a run trained on long documents reads every window of a text and pools them (jobs.training.chunking)
        self.chunking = chunks.load_config(model_dir) if task == TEXT else None
        if self.chunking is not None:
            self.max_length = min(self.max_length, int(self.chunking.window))
        outputs = getattr(config, "vocab_size", 0) if task == MLM else max(2, len(self.labels))
        self.floats_per_token = floats_per_token(config, outputs)
        self.batch_size = batch_size or (GPU_BATCH if device.startswith("cuda") else CPU_BATCH)
        self.pass_floats = self._pass_budget()
        # A QA model abstains only when its run learnt to (trained on unanswerable questions): one that never
        # saw "no answer" has an untrained null score, which beat every span of a tiny model on all 16 rows.
        self.allow_null = task == QA and run_abstains(model_dir)

    def _pass_budget(self) -> int:
        """Activation floats per forward pass: ``PASS_FLOATS`` on a CPU, a quarter of the free memory on a GPU."""
        if not self.device.startswith("cuda"):
            return PASS_FLOATS
        free, _total = self._torch.cuda.mem_get_info(self._torch.device(self.device))
        return max(PASS_FLOATS, free // 16)

    def predict(self, rows: list[dict]) -> list[dict]:
        """One result per row (see ``jobs.predict.job`` for the shapes)."""
        if not rows:
            return []
        return {TEXT: self._classify, TOKENS: self._tag, QA: self._answer, MLM: self._fill}[self.task](rows)

    # ------------------------------------------------------------ model passes

    def _encode(self, first: Any, second: Any = None, **kwargs: Any):
        kwargs.setdefault("truncation", True)
        return self.tokenizer(first, second, max_length=self.max_length, padding=True, return_tensors="pt",
                              **kwargs)

    def _passes(self, enc):
        """(first row, outputs) of forward passes over ``enc`` of a few rows each (see ``rows_per_pass``)."""
        rows, length = enc["input_ids"].shape
        step = rows_per_pass(length, self.floats_per_token, self.pass_floats)
        with self._torch.inference_mode():
            for start in range(0, rows, step):
                inputs = {k: enc[k][start:start + step].to(self.device) for k in _MODEL_INPUTS if k in enc}
                yield start, self.model(**inputs)

    def _outputs(self, enc, *names: str) -> list[np.ndarray]:
        """The named outputs (``logits``, ``start_logits``, ...) of the passes over ``enc``, rows joined again."""
        parts = [[getattr(out, name).float().cpu().numpy() for name in names] for _, out in self._passes(enc)]
        return [np.concatenate(column) for column in zip(*parts)]

    def _picked_logits(self, enc, positions: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Per row, the vocabulary logits at its ``positions`` only: a masked LM's full output would hold
        rows x length x vocabulary floats at once."""
        out: list[np.ndarray] = []
        for start, result in self._passes(enc):
            logits = result.logits
            for offset in range(logits.shape[0]):
                wanted = list(positions[start + offset])
                out.append(logits[offset, wanted].float().cpu().numpy())
        return out

    def _overflows(self, enc, first: Sequence[Any], second: Optional[Sequence[Any]] = None,
                   **kwargs: Any) -> list[bool]:
        """Which rows were cut: only rows that fill ``max_length`` are tokenized again, without truncation."""
        full = (enc["attention_mask"].sum(1) >= self.max_length).tolist()
        flags = [False] * len(full)
        candidates = [i for i, at_limit in enumerate(full) if at_limit]
        if candidates:
            pick = lambda seq: [seq[i] for i in candidates]  # noqa: E731
            ids = self.tokenizer(pick(first), pick(second) if second is not None else None, truncation=False,
                                 **kwargs)["input_ids"]
            for i, row_ids in zip(candidates, ids):
                flags[i] = len(row_ids) > self.max_length
        return flags

    # ------------------------------------------------------------ text classification

    def _classify(self, rows: list[dict]) -> list[dict]:
        texts = [r["text"] for r in rows]
        pairs = [r.get("text_pair", "") for r in rows] if any("text_pair" in r for r in rows) else None
        kept = None
        if self.chunking is not None:
            logits, kept = self._document_logits(texts, pairs)
            truncated = [False] * len(rows)
        else:
            enc = self._encode(texts, pairs)
            truncated = self._overflows(enc, texts, pairs)
            (logits,) = self._outputs(enc, "logits")
        probs, decided = apply_calibration(logits, self.labels, self.multi_label, self.calibration)
        out = []
        for index, (row_probs, label, cut) in enumerate(zip(probs, decided, truncated)):
            scores = {name: float(p) for name, p in zip(self.labels, row_probs)}
            # the decided class's probability; a multi-label row's highest one
            score = row_probs.max() if self.multi_label else row_probs[self.labels.index(label)]
            out.append({"label": label, "score": float(score), "scores": scores, "truncated": cut})
            if kept is not None:
                out[-1]["windows"] = kept[index]
        return out

    def _document_logits(self, texts: list[str], pairs: Optional[list[str]]) -> tuple[np.ndarray, list[int]]:
        """Each document read in every one of its windows, the windows' logits pooled as the run was trained; and
        each document's number of windows.

        The documents are split into windows a group at a time, each group about ``WINDOWS_PER_READ`` windows (a
        longer document alone): a batch of the longest documents of a file would otherwise hold all their windows'
        tokens at once, and the job's memory would grow with the longest documents it meets."""
        logits: list[np.ndarray] = []
        kept: list[int] = []
        counts = chunks.window_counts(self.tokenizer, texts, pairs, self.max_length, self.chunking.stride)
        for start, stop in chunks.window_groups(counts, WINDOWS_PER_READ):
            windows = chunks.split_windows(self.tokenizer, texts[start:stop],
                                           pairs[start:stop] if pairs is not None else None, self.max_length,
                                           self.chunking.stride, max_windows=10**9)
            outputs = self._outputs(chunks.window_batch(self.tokenizer, windows),
                                    *chunks.outputs_of(self.chunking))
            scores = outputs[1] if len(outputs) > 1 else None
            logits.append(chunks.pooled(windows, self.chunking, outputs[0], scores))
            kept += windows.kept
        return np.concatenate(logits), kept

    # ------------------------------------------------------------ token classification

    def _tag(self, rows: list[dict]) -> list[dict]:
        out: list[Optional[dict]] = [None] * len(rows)
        split = [i for i, r in enumerate(rows) if "tokens" in r]
        free = [i for i, r in enumerate(rows) if "tokens" not in r]
        if split:
            for i, result in zip(split, self._tag_tokens([rows[i]["tokens"] for i in split])):
                out[i] = result
        if free:
            for i, result in zip(free, self._tag_texts([rows[i]["text"] for i in free])):
                out[i] = result
        return out  # type: ignore[return-value]

    def _word_tags(self, probs: np.ndarray, word_ids: Sequence[Optional[int]], n_words: int
                   ) -> list[Optional[tuple[str, float]]]:
        per_word = word_labels(word_ids, probs.argmax(-1), probs.max(-1), n_words)
        return [None if p is None else (self.labels[p[0]], p[1]) for p in per_word]

    def _tag_tokens(self, sentences: list[list[str]]) -> list[dict]:
        """Pre-split words (CoNLL), tokenized as training tokenized them: one tag per word, from its first sub-token."""
        enc = self._encode(sentences, is_split_into_words=True)
        probs = softmax(self._outputs(enc, "logits")[0])
        full = (enc["attention_mask"].sum(1) >= self.max_length).tolist()
        out = []
        for row, tokens in enumerate(sentences):
            text, spans = join_tokens(tokens)
            labels = self._word_tags(probs[row], enc.word_ids(row), len(tokens))
            cut = bool(full[row]) and any(label is None for label in labels)  # words past the length: tagged O
            out.append({"entities": _entities(text, spans, labels), "truncated": cut,
                        "tags": [label[0] if label else "O" for label in labels]})
        return out

    def _tag_texts(self, texts: list[str]) -> list[dict]:
        enc = self._encode(texts, return_offsets_mapping=True)
        probs = softmax(self._outputs(enc, "logits")[0])
        full = (enc["attention_mask"].sum(1) >= self.max_length).tolist()
        out = []
        for row, text in enumerate(texts):
            words = split_words(text)
            offsets = [tuple(o) for o in enc["offset_mapping"][row].tolist()]
            labels = self._word_tags(probs[row], word_ids_from_offsets(offsets, words), len(words))
            out.append({"entities": _entities(text, words, labels),
                        "truncated": bool(full[row]) and any(label is None for label in labels)})
        return out

    # ------------------------------------------------------------ question answering

    def _fit_questions(self, questions: list[str]) -> tuple[list[str], list[bool]]:
        """Questions cut to leave room for a context window beside them (the tokenizer refuses otherwise)."""
        room = self.max_length - self.tokenizer.num_special_tokens_to_add(pair=True) - self.doc_stride - 1
        enc = self.tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
        out, cut = [], []
        for question, offsets in zip(questions, enc["offset_mapping"]):
            if len(offsets) > room:
                out.append(question[:offsets[max(room, 1) - 1][1]])
                cut.append(True)
            else:
                out.append(question)
                cut.append(False)
        return out, cut

    def _answer(self, rows: list[dict]) -> list[dict]:
        questions, cut = self._fit_questions([r["question"] for r in rows])
        contexts = [r["context"] for r in rows]
        enc = self._encode(questions, contexts, truncation="only_second", stride=self.doc_stride,
                           return_overflowing_tokens=True, return_offsets_mapping=True)
        starts, ends = self._outputs(enc, "start_logits", "end_logits")
        best: dict[int, tuple[int, int, int, float]] = {}  # sample -> (feature, start token, end token, score)
        null: dict[int, float] = {}
        for feature, sample in enumerate(enc["overflow_to_sample_mapping"].tolist()):
            context_mask = np.array([sid == 1 for sid in enc.sequence_ids(feature)])
            s, e, score, null_score = best_span(starts[feature], ends[feature], context_mask)
            # the window where an answer looks likeliest speaks for the null answer (as in jobs.tasks.qa)
            null[sample] = min(null.get(sample, 1.0), null_score)
            if score > 0 and (sample not in best or score > best[sample][3]):
                best[sample] = (feature, s, e, score)
        out = []
        for sample, context in enumerate(contexts):
            found = best.get(sample)
            if found is None or (self.allow_null and null.get(sample, 1.0) > found[3]):
                out.append({"answer": "", "score": null.get(sample, 1.0), "start": None, "end": None,
                            "no_answer": True, "truncated": cut[sample]})
                continue
            feature, s, e, score = found
            offsets = enc["offset_mapping"][feature].tolist()
            start, end = offsets[s][0], offsets[e][1]
            out.append({"answer": context[start:end], "score": score, "start": start, "end": end,
                        "no_answer": False, "truncated": cut[sample]})
        return out

    # ------------------------------------------------------------ masked LM

    def _fill(self, rows: list[dict]) -> list[dict]:
        out: list[Optional[dict]] = [None] * len(rows)
        masked = [i for i, r in enumerate(rows) if MASK_PLACEHOLDER in r["text"]]
        plain = [i for i, r in enumerate(rows) if MASK_PLACEHOLDER not in r["text"]]
        if masked:
            for i, result in zip(masked, self._top_fills([rows[i]["text"] for i in masked])):
                out[i] = result
        for i in plain:
            out[i] = self._pseudo_perplexity(rows[i]["text"])
        return out  # type: ignore[return-value]

    def _model_text(self, text: str) -> str:
        mask = self.tokenizer.mask_token
        return text.replace(MASK_PLACEHOLDER, mask) if mask and mask != MASK_PLACEHOLDER else text

    def _top_fills(self, texts: list[str]) -> list[dict]:
        """The ``TOP_K`` fills of each ``[MASK]``, as the playground gives them; a mask truncation cut off has none."""
        model_texts = [self._model_text(t) for t in texts]
        enc = self._encode(model_texts)
        truncated = self._overflows(enc, model_texts)
        is_mask = (enc["input_ids"] == self.tokenizer.mask_token_id).numpy()
        picked = self._picked_logits(enc, [np.nonzero(row)[0] for row in is_mask])
        special = self.tokenizer.all_special_ids
        out = []
        for row, text in enumerate(texts):
            masks = []
            for n, logits in enumerate(picked[row]):
                top, probs = top_fills(logits, special, TOP_K)
                candidates = []
                for token_id, p in zip(top, probs):
                    token = self.tokenizer.decode([int(token_id)]).strip()
                    candidates.append({"token": token, "score": round(float(p), 6),
                                       "sequence": replace_nth(text, MASK_PLACEHOLDER, n, token)})
                masks.append({"mask": n, "candidates": candidates})
            out.append({"fills": masks, "pseudo_perplexity": None,
                        "truncated": truncated[row] or len(masks) < text.count(MASK_PLACEHOLDER)})
        return out

    def _pseudo_perplexity(self, text: str) -> dict:
        """exp(mean -log p(token | the rest)) with each token masked in turn: one copy of the text per token."""
        torch = self._torch
        enc = self._encode([text])
        truncated = self._overflows(enc, [text])[0]
        ids = enc["input_ids"][0]
        special = set(self.tokenizer.all_special_ids)
        positions = [p for p, t in enumerate(ids.tolist()) if t not in special]
        if not positions:
            return {"fills": None, "pseudo_perplexity": None, "truncated": truncated}
        batch = {k: enc[k].repeat(len(positions), 1) for k in _MODEL_INPUTS if k in enc}
        batch["input_ids"][torch.arange(len(positions)), torch.tensor(positions)] = self.tokenizer.mask_token_id
        picked = np.stack([row[0] for row in self._picked_logits(batch, [[p] for p in positions])]).astype(np.float64)
        top = picked.max(-1, keepdims=True)
        log_z = top[:, 0] + np.log(np.exp(picked - top).sum(-1))
        original = ids.numpy()[positions]
        log_probs = picked[np.arange(len(positions)), original] - log_z
        return {"fills": None, "pseudo_perplexity": pseudo_perplexity(log_probs), "truncated": truncated}


def _entities(text: str, words: Sequence[tuple[int, int]], labels: Sequence[Optional[tuple[str, float]]]
              ) -> list[dict]:
    """``jobs.evaluation.postprocess.group_entities`` spans in the output's terms: text, label, character start and end, score."""
    return [{"text": e["word"], "label": e["entity"], "start": e["start"], "end": e["end"], "score": e["score"]}
            for e in group_entities(text, words, labels)]
