"""Which columns (or JSON keys) hold the text, the optional second text and the label.

Detection looks for common names in a fixed order of preference, so ``label`` wins over
``label_fine`` (TREC) and ``sentence1``/``sentence2`` become a text pair.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

TEXT_NAMES = ("text", "sentence", "review", "content", "message", "sms", "tweet", "document", "body",
              "question", "utterance", "query", "comment", "input", "sentence1", "premise", "question1", "text_a",
              "text1", "sentence_a")
PAIR_NAMES = (("sentence1", "sentence2"), ("premise", "hypothesis"), ("question1", "question2"),
              ("text_a", "text_b"), ("text1", "text2"), ("sentence_a", "sentence_b"), ("question", "sentence"),
              ("text", "text_pair"), ("query", "passage"))
LABEL_NAMES = ("label", "labels", "class", "category", "target", "intent", "sentiment", "tag", "tags", "y",
               "gold_label", "label_coarse", "coarse_label")


@dataclasses.dataclass(frozen=True)
class ColumnMapping:
    """Names of the columns to read. ``label_separator`` splits a multi-label cell such as ``a|b``."""

    text: str | None = None
    label: str | None = None
    text_pair: str | None = None
    label_separator: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _find(names: Sequence[str], wanted: Sequence[str]) -> str | None:
    lowered = {n.strip().lower(): n for n in names}
    for candidate in wanted:
        if candidate in lowered:
            return lowered[candidate]
    return None


def detect(names: Sequence[str], given: ColumnMapping | None = None) -> ColumnMapping:
    """Fill the columns the user did not name from ``names``; unknown stays None for the caller to report."""
    given = given or ColumnMapping()
    text, pair, label = given.text, given.text_pair, given.label
    if text is None and pair is None:
        for first, second in PAIR_NAMES:
            a, b = _find(names, (first,)), _find(names, (second,))
            if a and b and a != label and b != label:
                text, pair = a, b
                break
    if text is None:
        text = _find([n for n in names if n not in (label, pair)], TEXT_NAMES)
    if label is None:
        label = _find([n for n in names if n not in (text, pair)], LABEL_NAMES)
    if text is None and label is not None:
        # Two columns with unusual names: the one that is not the label is the text.
        rest = [n for n in names if n not in (label, pair)]
        if len(rest) == 1:
            text = rest[0]
    return ColumnMapping(text=text, label=label, text_pair=pair, label_separator=given.label_separator)
