"""Which attention kernel a run uses, and padding-free batches for the models that can take them.

ModernBERT (and mmBERT, which shares its architecture) is fastest with
``flash_attention_2`` on a batch flattened into one row: no compute is spent on
padding, and flash-attn's variable-length kernel keeps the sequences apart
through the position ids (they restart at 0 where a sequence starts). That path
needs a CUDA GPU with the ``flash-attn`` package; everywhere else the model runs
with PyTorch's SDPA on dynamically padded batches, as every other model does.

Flattening is only used for tasks whose labels are per token (token
classification, masked-LM): a sequence-level head (classification pools the
first token, QA's start/end positions index each sequence) needs the batch
dimension, so those tasks get flash attention on padded batches.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Callable, Optional

log = logging.getLogger(__name__)

FLASH_MODEL_TYPES = {"modernbert"}
PER_TOKEN_TASKS = {"token-classification", "masked-lm"}


@dataclasses.dataclass(frozen=True)
class AttentionPath:
    """The kernel and the batch layout a run trains with; recorded in the run's metrics."""

    implementation: str  # "flash_attention_2", "sdpa" or "eager"
    padding_free: bool
    reason: str

    def as_metrics(self) -> dict:
        return {"attention": self.implementation, "padding": "free" if self.padding_free else "dynamic",
                "attention_reason": self.reason}


def flash_attention_available() -> bool:
    """flash-attn 2 importable and usable with this torch and GPU (transformers' own check)."""
    try:
        from transformers.utils import is_flash_attn_2_available
    except ImportError:  # pragma: no cover - transformers always has it
        return False
    return bool(is_flash_attn_2_available())


def choose_attention(model_type: str, task: str, device: str, precision_is_half: bool,
                     flash_available: Optional[Callable[[], bool]] = None, supports_sdpa: bool = True) -> AttentionPath:
    """The fastest path this model, task and machine allow.

    ``flash_available`` is injectable so the choice is tested without a GPU;
    it is only called for a ModernBERT-type model on CUDA.
    """
    fallback = "sdpa" if supports_sdpa else "eager"
    if model_type not in FLASH_MODEL_TYPES:
        return AttentionPath(fallback, False, f"{model_type or 'this model'}: {fallback} with dynamic padding")
    if not device.startswith("cuda"):
        return AttentionPath(fallback, False, "no CUDA device: sdpa with dynamic padding")
    if not precision_is_half:
        return AttentionPath(fallback, False, "flash attention needs bf16/fp16; the run is fp32")
    if not (flash_available or flash_attention_available)():
        return AttentionPath(fallback, False, "flash-attn is not installed: sdpa with dynamic padding "
                                              "(pip install flash-attn for the padding-free path)")
    if task in PER_TOKEN_TASKS:
        return AttentionPath("flash_attention_2", True, "flash_attention_2 on flattened (padding-free) batches")
    return AttentionPath("flash_attention_2", False,
                         "flash_attention_2 on padded batches (a sequence-level head needs the batch dimension)")


def flatten_batch(batch: dict) -> dict:
    """A padded batch (tensors with ``attention_mask``) → one row of real tokens, with restarting position ids.

    Per-token keys (input_ids, labels, token_type_ids) keep only the positions
    the mask marks; the first label of each sequence is set to -100 so no loss
    crosses from one sequence into the next. The mask itself is dropped: flash
    attention reads the sequence boundaries from ``position_ids``.
    """
    import torch

    mask = batch["attention_mask"].bool()
    lengths = mask.sum(dim=1)
    out = {}
    for key, value in batch.items():
        if key == "attention_mask":
            continue
        if torch.is_tensor(value) and value.shape[:2] == mask.shape:
            out[key] = value[mask].unsqueeze(0)
        else:
            out[key] = value
    out["position_ids"] = torch.cat([torch.arange(int(n)) for n in lengths]).unsqueeze(0)
    if "labels" in out:
        starts = torch.cumsum(lengths, 0) - lengths
        out["labels"][0, starts] = -100
    return out


class PaddingFreeCollator:
    """Wraps a task's padding collator; training batches come out flattened, evaluation batches padded.

    Evaluation maps logits back to records row by row, so the trainer switches
    flattening off around ``evaluate``/``predict`` with ``padded()``.
    """

    def __init__(self, inner: Callable):
        self.inner = inner
        self.flatten = True

    def __call__(self, features: list[dict]) -> dict:
        batch = self.inner(features)
        return flatten_batch(batch) if self.flatten else batch

    @contextlib.contextmanager
    def padded(self):
        previous, self.flatten = self.flatten, False
        try:
            yield
        finally:
            self.flatten = previous


def attention_path(model, config, task: str, device: str, precision: str, prepared):
    """Pick the attention kernel (and padding-free batches) for this model and machine; applies the choice."""
    from jobs.training.trainer import precision_flags

    current = getattr(model.config, "_attn_implementation", None) or "eager"
    if config.model_type not in FLASH_MODEL_TYPES:
        return AttentionPath(current, False, f"{config.model_type}: the model's default attention, dynamic padding")
    half = any(precision_flags(device, precision).values())
    path = choose_attention(config.model_type, task, device, half,
                            supports_sdpa=bool(getattr(model, "_supports_sdpa", True)))
    if path.implementation != current:
        model.set_attn_implementation(path.implementation)
    if path.padding_free:
        prepared.collator = PaddingFreeCollator(prepared.collator)
    log.info("attention: %s", path.reason)
    return path
