"""LoRA choices per architecture: which linear layers get adapters, which head stays fully trainable."""
from __future__ import annotations

_TARGETS = {
    "bert": ["query", "value"],
    "roberta": ["query", "value"],
    "xlm-roberta": ["query", "value"],
    "camembert": ["query", "value"],
    "electra": ["query", "value"],
    "albert": ["query", "value"],
    "distilbert": ["q_lin", "v_lin"],
    "deberta-v2": ["query_proj", "value_proj"],  # DeBERTa-v3 and mDeBERTa-v3 are model_type deberta-v2
    # ModernBERT fuses q/k/v into one projection, so the adapter sits on it and on the attention's output
    # projection; "attn." keeps it off the MLP's own Wo (peft matches a name by its dotted suffix)
    "modernbert": ["attn.Wqkv", "attn.Wo"],
}

_HEADS = {  # (task, model_type) → head modules trained in full and saved with the adapter
    # BERT-style classifiers read the pooler, which checkpoints trained without NSP (such as the
    # packaged sentence-transformers MiniLM) lack: a frozen random pooler left LoRA at the majority class.
    # DeBERTa's ContextPooler and ModernBERT's prediction head ("head") are new for every task in the same way.
    "text-classification": {"distilbert": ["pre_classifier", "classifier"], "bert": ["pooler", "classifier"],
                            "albert": ["pooler", "classifier"], "deberta-v2": ["pooler", "classifier"],
                            "modernbert": ["head", "classifier"]},
    "token-classification": {"modernbert": ["head", "classifier"]},
    "question-answering": {"modernbert": ["head", "classifier"]},  # ModernBERT's QA layer is "classifier"
    "masked-lm": {"bert": ["cls"], "roberta": ["lm_head"], "xlm-roberta": ["lm_head"], "albert": ["predictions"],
                  "distilbert": ["vocab_transform", "vocab_layer_norm", "vocab_projector"],
                  # the decoder is tied to the input embeddings, so only the transform before it is saved
                  "modernbert": ["head"],
                  "deberta-v2": ["cls", "lm_predictions"]},  # legacy head / the newer one: whichever exists
}
_DEFAULT_HEAD = {"text-classification": ["classifier"], "token-classification": ["classifier"],
                 "question-answering": ["qa_outputs"], "masked-lm": ["cls"]}


def target_modules(model_type: str) -> list[str]:
    """Attention query/value projections, named as each architecture names them."""
    return list(_TARGETS.get(model_type, ["query", "value"]))


def head_modules(task: str, model_type: str) -> list[str]:
    """The task head: randomly initialised, so it must train in full, not through an adapter."""
    return list(_HEADS[task].get(model_type, _DEFAULT_HEAD[task]))


def present_modules(model, names: list[str]) -> list[str]:
    """The names that match a module of ``model`` the way peft matches them (the full name or its last parts)."""
    found = [module_name for module_name, _ in model.named_modules()]
    return [name for name in names if any(m == name or m.endswith("." + name) for m in found)]


def wrap(model, task: str, model_type: str, r: int, alpha: int, dropout: float, targets=None):
    """The model with LoRA adapters (peft); only adapters and the head are trainable.

    A target that names no module of this model is a TrainingError: peft would
    otherwise train adapters on only some of them, or fail with its own message.
    """
    from peft import LoraConfig, get_peft_model

    from storage.errors import TrainingError

    targets = list(targets or target_modules(model_type))
    missing = [t for t in targets if not present_modules(model, [t])]
    if missing:
        raise TrainingError(f"LoRA target module(s) {', '.join(missing)} do not exist in this {model_type} model",
                            "leave the LoRA target modules empty to use the architecture's defaults")
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets,
                        modules_to_save=present_modules(model, head_modules(task, model_type)))
    return get_peft_model(model, config)
