"""What a playground needs to serve a run's model, from the rooms below: the runtimes (PyTorch or an ONNX
variant), loading a sentence-model classifier, and the post-processing of model outputs that prediction jobs
share (``jobs.export.runtime``, ``jobs.training.sentence_model``, ``jobs.training.chunking`` (long documents read in
windows) and ``jobs.evaluation.postprocess`` are the one definition)."""
from __future__ import annotations

from jobs.evaluation.postprocess import (
                                         MASK_PLACEHOLDER,
                                         PASS_FLOATS,
                                         QA_MAX_ANSWER_TOKENS,
                                         QA_STRIDE,
                                         TOP_K,
                                         Calibration,
                                         apply_calibration,
                                         best_span,
                                         floats_per_token,
                                         group_entities,
                                         load_calibration,
                                         replace_nth,
                                         rows_per_pass,
                                         softmax,
                                         split_words,
                                         word_ids_from_offsets,
                                         word_labels,
)
from jobs.export.runtime import PYTORCH, check_runtime, load_onnx_model, variant_path
from jobs.training.chunking import load_config as load_chunking
from jobs.training.chunking import most_attended, outputs_of, pooled, scoring_model, split_windows, window_batch
from jobs.training.sentence_model import is_setfit_model, load_classifier

__all__ = ["load_chunking", "most_attended", "outputs_of", "pooled", "scoring_model", "split_windows", "window_batch",
           "Calibration", "MASK_PLACEHOLDER", "PASS_FLOATS", "PYTORCH", "QA_MAX_ANSWER_TOKENS", "QA_STRIDE", "TOP_K", "apply_calibration", "best_span", "check_runtime", "floats_per_token", "group_entities", "is_setfit_model", "load_calibration", "load_classifier", "load_onnx_model", "replace_nth", "rows_per_pass", "softmax", "split_words", "variant_path", "word_ids_from_offsets", "word_labels"]
