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
    "deberta-v2": ["query_proj", "value_proj"],
}

_HEADS = {  # (task, model_type) → head modules trained in full and saved with the adapter
    # BERT-style classifiers read the pooler, which checkpoints trained without NSP (such as the
    # packaged sentence-transformers MiniLM) lack: a frozen random pooler left LoRA at the majority class.
    "text-classification": {"distilbert": ["pre_classifier", "classifier"], "bert": ["pooler", "classifier"],
                            "albert": ["pooler", "classifier"]},
    "token-classification": {},
    "question-answering": {},
    "masked-lm": {"bert": ["cls"], "roberta": ["lm_head"], "xlm-roberta": ["lm_head"], "albert": ["predictions"],
                  "distilbert": ["vocab_transform", "vocab_layer_norm", "vocab_projector"]},
}
_DEFAULT_HEAD = {"text-classification": ["classifier"], "token-classification": ["classifier"],
                 "question-answering": ["qa_outputs"], "masked-lm": ["cls"]}


def target_modules(model_type: str) -> list[str]:
    """Attention query/value projections, named as each architecture names them."""
    return list(_TARGETS.get(model_type, ["query", "value"]))


def head_modules(task: str, model_type: str) -> list[str]:
    """The task head: randomly initialised, so it must train in full, not through an adapter."""
    return list(_HEADS[task].get(model_type, _DEFAULT_HEAD[task]))


def wrap(model, task: str, model_type: str, r: int, alpha: int, dropout: float, targets=None):
    """The model with LoRA adapters (peft); only adapters and the head are trainable."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=targets or target_modules(model_type),
                        modules_to_save=head_modules(task, model_type))
    return get_peft_model(model, config)
