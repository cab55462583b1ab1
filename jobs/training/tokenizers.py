"""Loading a run's tokenizer, with the fix byte-level BPE tokenizers need for pre-split words."""
from __future__ import annotations

import json

# byte-level BPE tokenizers (ModernBERT's is GPT-NeoX's) mark a word start with a space; pre-split words need it
PREFIX_SPACE_TYPES = {"roberta", "xlm-roberta", "longformer", "bart", "camembert", "gpt2", "deberta", "modernbert"}


def load_tokenizer(path: str, config, task: str):
    from transformers import AutoTokenizer

    kwargs = {}
    if task == "token-classification" and getattr(config, "model_type", "") in PREFIX_SPACE_TYPES:
        kwargs["add_prefix_space"] = True  # byte-level BPE needs it for pre-split words
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    if kwargs.get("add_prefix_space"):
        _byte_level_prefix_space(tokenizer)
    return tokenizer


def _byte_level_prefix_space(tokenizer) -> None:
    """Switch on add_prefix_space inside a byte-level pre-tokenizer.

    RoBERTa's tokenizer class applies the keyword itself; a generic fast tokenizer
    (ModernBERT ships one) only stores it, so pre-split words after the first
    would be encoded as word-internal pieces (no leading Ġ) unlike running text.
    """
    from tokenizers import Tokenizer

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return
    state = json.loads(backend.to_str())
    pre = state.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    changed = False
    for part in parts:
        if part.get("type") == "ByteLevel" and not part.get("add_prefix_space"):
            part["add_prefix_space"] = True
            changed = True
    if changed:
        tokenizer._tokenizer = Tokenizer.from_str(json.dumps(state))
