"""Converters from the files in ../shared/data to the normalized JSONL contract, for the benchmarks.

Self-contained so the benchmarks do not depend on the dataset store's import path.
"""
from __future__ import annotations

import csv
import json
import random
from pathlib import Path

# ../shared/data beside the checkout, as the project is laid out for its developers.
DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def write_jsonl(path: Path, records: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return str(path)


def read_csv(path: Path, limit: int | None = None) -> list[dict]:
    with path.open(encoding="utf-8", newline="") as handle:
        rows = [{"text": r["text"], "label": r["label"]} for r in csv.DictReader(handle)]
    return rows[:limit] if limit else rows


def read_conll(path: Path, limit: int | None = None) -> list[dict]:
    sentences, tokens, tags = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if tokens:
                sentences.append({"tokens": tokens, "tags": tags})
            tokens, tags = [], []
            continue
        token, tag = line.rsplit("\t", 1)
        tokens.append(token)
        tags.append(tag)
    if tokens:
        sentences.append({"tokens": tokens, "tags": tags})
    return sentences[:limit] if limit else sentences


def squad_split(path: Path, validation_share: float = 0.2, seed: int = 13) -> tuple[list[dict], list[dict]]:
    """SQuAD questions split by paragraph, so no context is seen in both splits."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    paragraphs = []
    for article in data:
        for paragraph in article["paragraphs"]:
            records = []
            for qa in paragraph["qas"]:
                records.append({"id": qa["id"], "title": article["title"], "context": paragraph["context"],
                                "question": qa["question"],
                                "answers": {"text": [a["text"] for a in qa["answers"]],
                                            "answer_start": [a["answer_start"] for a in qa["answers"]]}})
            paragraphs.append(records)
    random.Random(seed).shuffle(paragraphs)
    n_val = max(1, round(len(paragraphs) * validation_share))
    flatten = lambda groups: [r for g in groups for r in g]  # noqa: E731
    return flatten(paragraphs[n_val:]), flatten(paragraphs[:n_val])
