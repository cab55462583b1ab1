"""Tiny models and data for the engine's end-to-end tests: built from a config, no downloads."""
from __future__ import annotations

import json
import random
from pathlib import Path

from jobs.catalogue import packaged_model_path


def tiny_bert(folder: Path) -> Path:
    """A 2-layer BERT (hidden 32) with the packaged MiniLM tokenizer, saved like any local model."""
    from transformers import AutoTokenizer, BertConfig, BertForPreTraining

    if (folder / "config.json").is_file():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertForPreTraining(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


_POS = ["great film loved it", "wonderful acting and story", "a joy to watch", "brilliant and moving"]
_NEG = ["terrible film hated it", "awful acting and story", "a pain to watch", "boring and dull"]


def classification_records(n: int, seed: int = 0, pair: bool = False, multi_label: bool = False) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        positive = i % 2 == 0
        text = rng.choice(_POS if positive else _NEG)
        record = {"text": text, "label": "pos" if positive else "neg"}
        if pair:
            record["text_pair"] = rng.choice(_POS + _NEG)
        if multi_label:
            record["label"] = ["pos"] if positive else (["neg", "long"] if i % 4 == 1 else ["neg"])
        out.append(record)
    return out


def ner_records(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    names, places = ["alice", "bob", "carol"], ["paris", "london", "new york"]
    out = []
    for _ in range(n):
        name, place = rng.choice(names), rng.choice(places)
        tokens = [name, "flew", "to"] + place.split()
        tags = ["B-PER", "O", "O"] + ["B-LOC"] + ["I-LOC"] * (len(place.split()) - 1)
        out.append({"tokens": tokens, "tags": tags})
    return out


def qa_records(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        city = rng.choice(["paris", "london", "berlin", "rome"])
        filler = " ".join(rng.choice(["the", "weather", "was", "fine", "today"]) for _ in range(rng.randint(5, 40)))
        context = f"{filler} alice lives in {city} . {filler}"
        start = context.index(f"in {city}") + 3
        out.append({"id": f"q{i}", "title": "t", "context": context, "question": "where does alice live ?",
                    "answers": {"text": [city], "answer_start": [start]}})
    return out


def documents(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    words = "the cat sat on a mat while dogs ran in parks and birds sang songs".split()
    return [{"text": " ".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 9))) + "."
                             for _ in range(rng.randint(2, 5)))} for _ in range(n)]
