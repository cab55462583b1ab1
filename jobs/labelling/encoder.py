"""The frozen encoder that embeds a labelling project's pool: a catalogue model loaded once, then called on
batch after batch of texts (``jobs.training.sentence_model.frozen_embeddings`` loads the model on each call,
which a pool embedded in hundreds of batches cannot afford). Pooled as that function pools; torch is imported
only when an encoder is built."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from jobs.training.catalogue import load_path, resolve_model

Embedder = Callable[[Sequence[str]], np.ndarray]
# Tokens kept of each text, as the frozen baselines keep (jobs.evaluation.baselines.FROZEN_MAX_LENGTH): a sentence
# encoder is trained on sentences, and the pool may hold pages.
MAX_LENGTH = 128
BATCH = 32


def model_path(name: str) -> str:
    """What to load for the project's ``model`` (a catalogue name, a local folder or a hub id)."""
    return load_path(resolve_model(name))


def load_encoder(path: str, device: str = "cpu", batch_size: int = BATCH) -> Embedder:
    """A function from texts to their (un-normalised) sentence embeddings, one row each, in their order."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from jobs.training.sentence_model import pool, sentence_layout
    from storage.errors import TrainingError

    try:
        mode = (sentence_layout(path) or ("mean", False))[0]
    except TrainingError:  # a pooling SetFit does not support: the masked mean still gives features
        mode = "mean"
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).to(device).eval()
    limit = min(MAX_LENGTH, getattr(tokenizer, "model_max_length", MAX_LENGTH) or MAX_LENGTH)

    def embed(texts: Sequence[str]) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # similar lengths pad little
        out = None
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chunk = order[start:start + batch_size]
                encoded = tokenizer([str(texts[i]) for i in chunk], padding=True, truncation=True,
                                    max_length=limit, return_tensors="pt").to(device)
                pooled = pool(model(**encoded).last_hidden_state, encoded["attention_mask"], mode)
                if out is None:
                    out = np.zeros((len(texts), pooled.shape[-1]), dtype=np.float32)
                out[chunk] = pooled.float().cpu().numpy()
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)

    return embed
