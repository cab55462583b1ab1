"""Masked-LM domain adaptation (BERT's objective): 15% of tokens selected, 80/10/10 mask/random/keep.

Special tokens are found with the tokenizer's own special-tokens mask, never by id.
The validation split is masked once with a fixed seed, so perplexity before and
after training is measured on the same masked positions.
"""
from __future__ import annotations

import json
import math
from typing import Optional, Sequence

import numpy as np

from jobs.tasks.common import Evaluation, Prepared, keep_columns, model_uses_token_type_ids, read_jsonl

MAIN_METRIC = "loss"
REQUIRED = ("text",)
IGNORE = -100


def read(path):
    return read_jsonl(path, REQUIRED)


def mask_tokens(input_ids: np.ndarray, special_mask: np.ndarray, rng: np.random.Generator, vocab_size: int,
                mask_id: int, prob: float = 0.15, word_ids: Optional[np.ndarray] = None):
    """BERT masking of a (batch, length) id matrix. Returns (new input ids, labels with -100 where not selected).

    ``special_mask`` is 1 where a token may never be selected (special tokens and padding).
    With ``word_ids`` (same shape, -1 for specials) whole words are selected together.
    """
    input_ids = np.array(input_ids, dtype=np.int64, copy=True)
    special = np.asarray(special_mask).astype(bool)
    if word_ids is None:
        selected = (rng.random(input_ids.shape) < prob) & ~special
    else:
        word_ids = np.asarray(word_ids)
        selected = np.zeros(input_ids.shape, dtype=bool)
        for row in range(input_ids.shape[0]):
            words = np.unique(word_ids[row][(word_ids[row] >= 0) & ~special[row]])
            chosen = words[rng.random(len(words)) < prob]
            selected[row] = np.isin(word_ids[row], chosen) & ~special[row]
    labels = np.where(selected, input_ids, IGNORE)
    action = rng.random(input_ids.shape)
    to_mask = selected & (action < 0.8)
    to_random = selected & (action >= 0.8) & (action < 0.9)
    input_ids[to_mask] = mask_id
    input_ids[to_random] = rng.integers(0, vocab_size, size=int(to_random.sum()))
    return input_ids, labels


def word_ids_of(encoding_word_ids: Sequence[Optional[int]]) -> list[int]:
    return [-1 if w is None else int(w) for w in encoding_word_ids]


class MaskingCollator:
    """Pads a batch and masks it (features that already carry labels, the fixed validation set, are only padded)."""

    def __init__(self, tokenizer, prob: float = 0.15, whole_word: bool = False, seed: int = 0):
        self.tokenizer = tokenizer
        self.prob = prob
        self.whole_word = whole_word
        self.rng = np.random.default_rng(seed)

    def __call__(self, features: list[dict]) -> dict:
        import torch

        length = max(len(f["input_ids"]) for f in features)
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        def pad(key, value):
            return np.array([list(f[key]) + [value] * (length - len(f[key])) for f in features], dtype=np.int64)
        ids = pad("input_ids", pad_id)
        batch = {"attention_mask": pad("attention_mask", 0)}
        for key in ("token_type_ids",):
            if key in features[0]:
                batch[key] = pad(key, 0)
        if "labels" in features[0]:
            batch["input_ids"], batch["labels"] = ids, pad("labels", IGNORE)
        else:
            special = pad("special_tokens_mask", 1)
            words = pad("word_ids", -1) if self.whole_word and "word_ids" in features[0] else None
            batch["input_ids"], batch["labels"] = mask_tokens(ids, special, self.rng, len(self.tokenizer),
                                                              self.tokenizer.mask_token_id, self.prob, words)
        for key in ("next_sentence_label",):
            if key in features[0]:
                batch[key] = np.array([f[key] for f in features], dtype=np.int64)
        return {k: torch.as_tensor(v) for k, v in batch.items()}


def tokenize_documents(batch: dict, tokenizer, max_length: int) -> dict:
    """Documents cut into windows of ``max_length`` tokens, with special-token masks and word ids."""
    encoded = tokenizer(batch["text"], truncation=True, max_length=max_length, return_overflowing_tokens=True,
                        return_special_tokens_mask=True)
    encoded.pop("overflow_to_sample_mapping", None)
    if getattr(tokenizer, "is_fast", False):
        encoded["word_ids"] = [word_ids_of(encoded.word_ids(i)) for i in range(len(encoded["input_ids"]))]
    return encoded


def premask(dataset, tokenizer, prob: float, seed: int, whole_word: bool):
    """Mask the validation windows once, so every evaluation scores the same positions."""
    rng = np.random.default_rng(seed)
    def apply(example):
        words = np.array([example["word_ids"]]) if whole_word and "word_ids" in example else None
        ids, labels = mask_tokens(np.array([example["input_ids"]]), np.array([example["special_tokens_mask"]]), rng,
                                  len(tokenizer), tokenizer.mask_token_id, prob, words)
        return {"input_ids": ids[0].tolist(), "labels": labels[0].tolist()}
    return dataset.map(apply)


def prepare(train: list[dict], validation: list[dict], tokenizer, config, hp: dict) -> Prepared:
    from datasets import Dataset

    kwargs = dict(tokenizer=tokenizer, max_length=hp["max_length"])
    whole = bool(hp.get("whole_word_masking"))
    def build(records):
        return Dataset.from_list([{"text": r["text"]} for r in records if r["text"].strip()]).map(
            tokenize_documents, batched=True, fn_kwargs=kwargs, remove_columns=["text"])
    train_ds = build(train)
    eval_ds = premask(build(validation), tokenizer, hp["mlm_probability"], hp["seed"] + 1, whole)
    # DeBERTa-v3's tokenizer emits segment ids its model has no embedding for (type_vocab_size 0): dropped
    base = ["input_ids", "attention_mask"] + (["token_type_ids"] if model_uses_token_type_ids(tokenizer, config) else [])
    return Prepared(
        train_dataset=keep_columns(train_ds, base + ["special_tokens_mask", "word_ids"]),
        eval_dataset=keep_columns(eval_ds, base + ["labels"]),
        collator=MaskingCollator(tokenizer, hp["mlm_probability"], whole, hp["seed"]),
        validation_records=validation, main_metric="loss", greater_is_better=False,
        extra={"measure_perplexity_before": True},
    )


def build_model(path: str, prepared: Prepared, config):
    from transformers import AutoModelForMaskedLM

    return AutoModelForMaskedLM.from_pretrained(path)


def perplexity(loss: float) -> float:
    return float(math.exp(loss)) if loss < 50 else float("inf")


def evaluate_model(trainer, prepared: Prepared) -> Evaluation:
    """Perplexity = exp(mean loss on the fixed masked validation positions); with each block's summed loss
    and masked-token count as its outcomes (``jobs.evaluation.outcomes``: the perplexity's interval, paired comparisons)."""
    loss = float(trainer.evaluate(prepared.eval_dataset)["eval_loss"])
    metrics = {"perplexity": perplexity(loss), "mlm_loss": loss}
    if "perplexity_before" in prepared.extra:  # measured by the engine before the first step
        metrics["perplexity_before"] = prepared.extra["perplexity_before"]
    return Evaluation(metrics, {}, [], outcomes=block_outcomes(trainer, prepared.eval_dataset))


def block_outcomes(trainer, dataset) -> Optional[dict]:
    """Per validation block: a digest of its tokens and masked positions (``ids``), the summed cross-entropy of
    its masked tokens (``loss_sum``) and their count (``tokens``); blocks with no masked token are left out.

    One more pass over the blocks than ``Trainer.evaluate``, which keeps only the mean of its batches' losses.
    """
    import hashlib

    import torch

    model = trainer.model
    model.eval()
    ids, sums, counts = [], [], []
    with torch.inference_mode():
        for batch in trainer.get_eval_dataloader(dataset):
            batch = trainer._prepare_inputs(batch)
            labels = batch.pop("labels")
            logits = model(**{k: v for k, v in batch.items() if k in ("input_ids", "attention_mask",
                                                                         "token_type_ids")}).logits
            token_loss = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), labels,
                                                           ignore_index=-100, reduction="none")
            scored = labels != -100
            sums.extend((token_loss * scored).sum(dim=1).tolist())
            counts.extend(scored.sum(dim=1).tolist())
            for row, row_labels in zip(batch["input_ids"].tolist(), labels.tolist()):
                ids.append(hashlib.sha1(json.dumps([row, row_labels]).encode()).hexdigest()[:16])
    keep = [i for i, n in enumerate(counts) if n > 0]
    if not keep:
        return None
    seen: dict[str, int] = {}
    unique = []
    for i in keep:  # a repeated block gets #2, #3... as jobs.evaluation.outcomes.unit_ids does
        seen[ids[i]] = seen.get(ids[i], 0) + 1
        unique.append(ids[i] if seen[ids[i]] == 1 else f"{ids[i]}#{seen[ids[i]]}")
    return {"task": np.asarray("masked-lm"), "ids": np.asarray(unique),
            "loss_sum": np.asarray([sums[i] for i in keep], dtype=np.float64),
            "tokens": np.asarray([counts[i] for i in keep], dtype=np.int64)}
