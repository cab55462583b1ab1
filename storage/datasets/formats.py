"""The formats each task accepts, and detection from the file name and its first lines."""
from __future__ import annotations

import json
from pathlib import Path

from storage.errors import ConfigError

TASKS = ("text-classification", "token-classification", "question-answering", "masked-lm")
FORMATS_BY_TASK: dict[str, tuple[str, ...]] = {
    "text-classification": ("csv", "tsv", "jsonl"),
    "token-classification": ("conll", "jsonl"),
    "question-answering": ("squad", "jsonl"),
    # "text" guesses the layout from the first 64 kB; the other two force it.
    "masked-lm": ("text", "text-lines", "text-blocks"),
}
SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
            ".conll": "conll", ".bio": "conll", ".iob": "conll", ".txt": "text"}


def check_task(task: str) -> str:
    if task not in FORMATS_BY_TASK:
        raise ConfigError(f"unknown task {task!r}; choose one of: {', '.join(TASKS)}")
    return task


def check_format(task: str, fmt: str) -> str:
    allowed = FORMATS_BY_TASK[check_task(task)]
    if fmt not in allowed:
        raise ConfigError(f"format {fmt!r} does not fit task {task!r}; it accepts: {', '.join(allowed)}")
    return fmt


def detect_format(task: str, path: Path, head: str) -> str:
    """Best guess among the task's formats; the caller validates the content, so a wrong guess shows up there."""
    allowed = FORMATS_BY_TASK[check_task(task)]
    if len(allowed) == 1:
        return allowed[0]
    by_suffix = SUFFIXES.get(path.suffix.lower())
    sniffed = _sniff(task, head)
    if by_suffix in allowed and not (by_suffix == "csv" and sniffed == "tsv"):
        return by_suffix
    return sniffed if sniffed in allowed else allowed[0]


def _sniff(task: str, head: str) -> str:
    lines = [line for line in head.splitlines() if line.strip()][:20]
    first = lines[0].lstrip("\ufeff").strip() if lines else ""
    if first.startswith("{"):
        if task == "question-answering" and not _is_json_object(first):
            return "squad"
        if task == "question-answering" and '"paragraphs"' in head and '"data"' in head and len(lines) < 3:
            return "squad"
        return "jsonl"
    if task == "token-classification":
        return "conll"
    if lines and all("\t" in line for line in lines):
        return "tsv"
    return "csv"


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
