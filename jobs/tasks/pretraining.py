"""BERT's pre-training objective, MLM + next-sentence prediction, for BERT-architecture models.

Documents are split into sentences; each pair is ``[CLS] A [SEP] B [SEP]`` with
segment ids 0/1, where B is the true next sentence half of the time and a
sentence from another document otherwise (``next_sentence_label`` 0 = next, 1 = random,
as BertForPreTraining expects).
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from jobs.tasks.common import Evaluation, Prepared, keep_columns, read_jsonl
from jobs.tasks.mlm import IGNORE, MaskingCollator, mask_tokens
from storage.errors import TrainingError

MAIN_METRIC = "loss"
REQUIRED = ("text",)
IS_NEXT, IS_RANDOM = 0, 1
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def read(path):
    return read_jsonl(path, REQUIRED)


def split_sentences(text: str) -> list[str]:
    """A simple sentence splitter (end punctuation followed by space, or a line break)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def build_nsp_pairs(documents: Sequence[Sequence[str]], rng: np.random.Generator) -> list[tuple[str, str, int]]:
    """(A, B, label) for every consecutive sentence pair; half get B from another document instead."""
    if sum(1 for d in documents if d) < 2:
        raise TrainingError("next-sentence prediction needs at least 2 documents with text",
                            "add more documents or use the plain masked-LM objective")
    pairs = []
    for index, sentences in enumerate(documents):
        for i in range(len(sentences) - 1):
            if rng.random() < 0.5:
                pairs.append((sentences[i], sentences[i + 1], IS_NEXT))
                continue
            other = index
            while other == index or not documents[other]:
                other = int(rng.integers(len(documents)))
            pairs.append((sentences[i], documents[other][int(rng.integers(len(documents[other])))], IS_RANDOM))
    if not pairs:
        raise TrainingError("no document has two sentences, so no next-sentence pairs can be built",
                            "use documents of several sentences")
    return pairs


def tokenize_pairs(batch: dict, tokenizer, max_length: int) -> dict:
    encoded = tokenizer(batch["a"], batch["b"], truncation="longest_first", max_length=max_length,
                        return_special_tokens_mask=True, return_token_type_ids=True)
    encoded["next_sentence_label"] = batch["label"]
    return encoded


def pairs_dataset(records: list[dict], tokenizer, max_length: int, seed: int):
    from datasets import Dataset

    documents = [split_sentences(r["text"]) for r in records]
    pairs = build_nsp_pairs(documents, np.random.default_rng(seed))
    ds = Dataset.from_list([{"a": a, "b": b, "label": y} for a, b, y in pairs])
    return ds.map(tokenize_pairs, batched=True, fn_kwargs={"tokenizer": tokenizer, "max_length": max_length},
                  remove_columns=["a", "b", "label"])


def prepare(train: list[dict], validation: list[dict], tokenizer, config, hp: dict) -> Prepared:
    if getattr(config, "model_type", "") != "bert":
        raise TrainingError(f"the MLM+NSP objective needs a BERT-architecture model, not {config.model_type!r}",
                            "use the plain masked-LM objective for this model")
    train_ds = pairs_dataset(train, tokenizer, hp["max_length"], hp["seed"])
    eval_ds = pairs_dataset(validation, tokenizer, hp["max_length"], hp["seed"] + 1)
    rng = np.random.default_rng(hp["seed"] + 2)
    def apply(example):
        ids, labels = mask_tokens(np.array([example["input_ids"]]), np.array([example["special_tokens_mask"]]), rng,
                                  len(tokenizer), tokenizer.mask_token_id, hp["mlm_probability"])
        return {"input_ids": ids[0].tolist(), "labels": labels[0].tolist()}
    eval_ds = eval_ds.map(apply)
    base = ["input_ids", "attention_mask", "token_type_ids", "next_sentence_label"]
    return Prepared(
        train_dataset=keep_columns(train_ds, base + ["special_tokens_mask"]),
        eval_dataset=keep_columns(eval_ds, base + ["labels"]),
        collator=MaskingCollator(tokenizer, hp["mlm_probability"], False, hp["seed"]),
        validation_records=validation, main_metric="loss", greater_is_better=False,
        label_names=["labels", "next_sentence_label"],
    )


def build_model(path: str, prepared: Prepared, config):
    from transformers import BertForPreTraining

    return BertForPreTraining.from_pretrained(path)


def evaluate_model(trainer, prepared: Prepared) -> Evaluation:
    """MLM loss on the fixed masked positions and NSP accuracy, over the validation pairs in order."""
    import torch

    model = trainer.model.eval()
    loader = torch.utils.data.DataLoader(prepared.eval_dataset, batch_size=trainer.args.per_device_eval_batch_size,
                                         shuffle=False, collate_fn=prepared.collator)
    total_loss, total_tokens, correct, count = 0.0, 0, 0, 0
    with torch.no_grad():
        for batch in loader:
            batch = {k: v.to(model.device) for k, v in batch.items()}
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        token_type_ids=batch["token_type_ids"])
            labels = batch["labels"]
            loss = torch.nn.functional.cross_entropy(out.prediction_logits.float().view(-1, out.prediction_logits.shape[-1]),
                                                     labels.view(-1), ignore_index=IGNORE, reduction="sum")
            total_loss += float(loss)
            total_tokens += int((labels != IGNORE).sum())
            correct += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
            count += int(labels.shape[0])
    mlm_loss = total_loss / max(total_tokens, 1)
    from jobs.tasks.mlm import perplexity

    return Evaluation({"mlm_loss": mlm_loss, "perplexity": perplexity(mlm_loss), "nsp_accuracy": correct / max(count, 1)},
                      {}, [])
