"""What an evaluation says about its test set beside the scores: repeated rows and rows cut to the max length.

    test_set_facts(model, records, records_paths, hp) -> {"duplicates": 3, "truncated": 5, "max_length": 128}

Kept apart from ``jobs.predict.evaluate`` (which calls it once) so that scoring and these counts change alone.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional, Sequence

from jobs.predict.spec import ModelRef

log = logging.getLogger(__name__)

# Tasks whose rows are cut at the run's max length; QA reads a long context in overlapping windows and masked
# LM cuts a long text into consecutive windows, so no row of theirs loses tokens
CUT_TASKS = ("text-classification", "token-classification")


def test_set_facts(model: ModelRef, records: Sequence[dict], records_paths: Sequence[str | Path],
                   hp: dict) -> dict[str, Any]:
    """The counts an evaluation's ``metrics.json`` records about its test set (keys absent where unknown):

    - ``duplicates``: rows that repeat an earlier row and were kept and scored (a test set stored as given);
    - ``duplicates_dropped``: rows the import dropped as repeats (a dataset stored as training data);
    - ``truncated`` with ``max_length``: rows longer than the run's max length, cut to it before scoring.
    """
    facts = import_duplicates(records_paths)
    max_length = hp.get("max_length")
    if model.task in CUT_TASKS and max_length:
        facts["truncated"] = count_truncated(model, records, int(max_length))
        facts["max_length"] = int(max_length)
        if facts["truncated"]:
            log.warning("%d of %d test rows are longer than the run's max length (%d tokens) and were cut to it",
                        facts["truncated"], len(records), max_length)
    return facts


def import_duplicates(records_paths: Sequence[str | Path]) -> dict[str, int]:
    """What the dataset's import did with repeated rows, from the ``meta.json`` beside its records (a stored
    dataset's folder); nothing for records that are not a stored dataset's."""
    if not records_paths:
        return {}
    details = _meta(Path(records_paths[0]).parent / "meta.json").get("details") or {}
    found = {}
    for key, name in (("duplicates_kept", "duplicates"), ("duplicates_dropped", "duplicates_dropped")):
        if isinstance(details.get(key), int):
            found[name] = details[key]
    return found


def _meta(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def count_truncated(model: ModelRef, records: Sequence[dict], max_length: int,
                    tokenizer: Optional[Any] = None) -> int:
    """How many records tokenize (special tokens included, as the task module feeds them) to more than
    ``max_length`` tokens: the rows scored on a cut text."""
    from storage.datasets.stats import token_lengths

    if tokenizer is None:  # loaded as the engine loads it (a byte-level BPE tagger needs its prefix space)
        from transformers import AutoConfig

        from jobs.training.tokenizers import load_tokenizer as _load_tokenizer

        tokenizer = _load_tokenizer(model.model_dir, AutoConfig.from_pretrained(model.model_dir), model.task)
    return int((token_lengths(tokenizer, model.task, list(records)) > max_length).sum())
