"""What every reader yields, and the JSON Lines helper the readers share."""
from __future__ import annotations

import json
from typing import Any, Iterator, NamedTuple, TextIO

from storage.datasets.problems import ProblemLog


class Record(NamedTuple):
    """One normalized example.

    ``key`` groups examples for the split (the first label, or the QA paragraph); ``dedupe`` is the
    text whose repetition makes an example a duplicate; ``token_lines`` is the line of each token
    where a file has one token per line (CoNLL).
    """

    line: int | None
    data: dict[str, Any]
    key: str
    dedupe: str
    record: str | None = None
    token_lines: tuple[int, ...] | None = None


def iter_json_lines(stream: TextIO, name: str, log: ProblemLog) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line; broken lines become errors and are skipped."""
    for number, raw in enumerate(stream, 1):
        line = raw.strip().lstrip("\ufeff")
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            col = getattr(exc, "colno", None)
            log.error(name, f"broken JSON on line {number}: {getattr(exc, 'msg', exc)}"
                      + (f" at character {col}" if col else ""), line=number,
                      hint="each line must be one complete JSON object, e.g. {\"text\": \"...\", \"label\": \"...\"}")
            continue
        if not isinstance(obj, dict):
            log.error(name, f"line {number} is a JSON {type(obj).__name__}, not an object", line=number,
                      hint="write one JSON object per line")
            continue
        yield number, obj


def as_label(value: Any) -> str:
    """Labels are stored as strings: ``1`` and ``"1"`` are the same class."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()
