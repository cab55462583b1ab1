"""The frozen encoder that embeds a labelling project's pool: a catalogue model loaded once, then called on
batch after batch of texts (``jobs.training.sentence_model.frozen_embeddings`` loads the model on each call,
which a pool embedded in hundreds of batches cannot afford). Pooled as that function pools; torch is imported
only when an encoder is built.

A text longer than the window is read whole, as training reads long documents (``jobs.training.chunking``):
cut into windows of ``MAX_LENGTH`` tokens overlapping by a quarter, at most ``DEFAULT_MAX_WINDOWS`` of them, and
its embedding is the mean of its windows'. On 300 long movie reviews a logistic regression on such embeddings
scored 0.760 against 0.683 on the first 128 tokens (bench/long_documents.py, frozen rows). A text that fits in
one window gets exactly the embedding it got before."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from jobs.training.catalogue import load_path, resolve_model
from jobs.training.chunking import DEFAULT_MAX_WINDOWS, split_windows

Embedder = Callable[[Sequence[str]], np.ndarray]
# Tokens kept of each text, as the frozen baselines keep (jobs.evaluation.baselines.FROZEN_MAX_LENGTH): a sentence
# encoder is trained on sentences, and the pool may hold pages.
MAX_LENGTH = 128
BATCH = 32


def model_path(name: str) -> str:
    """What to load for the project's ``model`` (a catalogue name, a local folder or a hub id)."""
    return load_path(resolve_model(name))


def load_encoder(path: str, device: str = "cpu", batch_size: int = BATCH,
                 max_windows: int = DEFAULT_MAX_WINDOWS) -> Embedder:
    """A function from texts to their (un-normalised) sentence embeddings, one row each, in their order; a long
    text's is the mean of its windows' (at most ``max_windows``)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from jobs.training.sentence_model import embed_documents, sentence_layout
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
        if not len(texts):
            return np.zeros((0, 0), dtype=np.float32)
        windows = split_windows(tokenizer, [str(t) for t in texts], None, limit, limit // 4, max_windows)
        return embed_documents(model, tokenizer, windows.features, windows.document, len(texts), mode, device,
                               batch_size)

    return embed
