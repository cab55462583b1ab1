"""The file a prediction job reads: checked at submit, then kept under the workbench home.

A job queued on a file that cannot be read fails minutes later, on a worker, where the user no longer
looks. So before queueing, the bytes are scanned as the Data tab scans an upload (emptiness, binary
content, encoding, size limit) and the first rows are read with the job's own format and column detection
(``jobs.predict.inputs``), so that what is accepted here is what the job reads; every problem is a
``DataValidationError`` naming the file and line. Only the start of the file is parsed: the job itself
reads every row before predicting and reports a bad row further down with its line.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional

from jobs.predict import inputs
from storage.cells import unescape_cell
from storage.datasets.columns import ColumnMapping
from storage.datasets.problems import ProblemLog
from storage.datasets.source import read_head, scan
from storage.errors import ConfigError, DataValidationError, Problem

log = logging.getLogger(__name__)


class CheckedInput(NamedTuple):
    """What ``check_input`` found: the format, the digest of the bytes and which columns the model reads
    (role → column, as ``jobs.predict.inputs.resolve_mapping`` gives it; empty for TXT, CoNLL and SQuAD)."""

    format: str
    sha256: str
    mapping: dict[str, str]


def check_input(path: Path, task: str, *, name: str, input_format: Optional[str],
                columns: Optional[Mapping[str, Any]], max_bytes: int, pairs: Optional[bool] = None) -> CheckedInput:
    """The format, sha256 and column mapping of a file a ``task`` model can predict on, found as the job will
    find them (``jobs.predict.inputs``); raises ``DataValidationError`` (file and line; a column of numbers the
    reader picked as the text, in the rows of the file's start) or ``ConfigError`` (a format that cannot hold
    the task's inputs). ``pairs``: the model reads pairs of texts (``jobs.predict.inputs.resolve_mapping``)."""
    if task not in inputs.FORMATS_BY_TASK:
        raise ConfigError(f"prediction files are not supported for {task} runs")
    problems = ProblemLog()
    info = scan(path, problems, max_bytes=max_bytes)
    if problems.has_errors:
        raise DataValidationError(_renamed(problems.errors(), name))
    head = read_head(info)
    fmt = input_format or inputs.detect_input_format(task, path, head)
    inputs.check_shape(task, fmt, name, pairs=pairs)
    given = column_mapping(columns)
    mapping = _check_head(fmt, task, head, name, given, pairs)
    return CheckedInput(fmt, info.sha256, mapping)


def column_mapping(columns: Optional[Mapping[str, Any]]) -> Optional[ColumnMapping]:
    """The columns the user named, as the job reads them (``PredictSpec.columns``); None for none named."""
    if not columns:
        return None
    roles = {f.name for f in dataclasses.fields(ColumnMapping)}
    unknown = sorted(set(columns) - roles)
    if unknown:
        raise ConfigError(f"unknown column role {unknown[0]!r}; name columns as {', '.join(sorted(roles))}")
    return ColumnMapping(**{k: v for k, v in columns.items() if v})


def _renamed(problems: list[Problem], name: str) -> list[Problem]:
    """The scan names the file on disk; the user knows it by the name they gave."""
    return [Problem(p.severity, name, p.message, p.line, p.record, p.column, p.hint) for p in problems]


def _check_head(fmt: str, task: str, head: str, name: str, given: Optional[ColumnMapping],
                pairs: Optional[bool]) -> dict[str, str]:
    """The columns the model reads, checked on the rows of the file's start; {} for formats without columns."""
    lines = [(number, line) for number, line in enumerate(head.splitlines(), 1) if line.strip()]
    if not lines:
        _fail(name, "the file has no text in it", hint="give a file with one example per line or row")
    whole = _complete_lines(head)
    if fmt in ("csv", "tsv"):
        delimiter = "," if fmt == "csv" else "\t"
        number, names = _header(head, name, delimiter)
        mapping, missing = inputs.resolve_mapping(task, names, given, pairs=pairs)
        _check_columns(mapping, missing, names=names, name=name, line=number)
        numbers = inputs.NumberCount(inputs.guessed_columns(task, mapping, given))
        for row in _rows_after_header(whole, delimiter, number):
            numbers.add(dict(zip(names, row)))
        _raise_any(numbers, name, number)
        return mapping
    if fmt == "jsonl":
        number, raw = lines[0]
        first = _json_object(raw, name, number)
        mapping, missing = inputs.resolve_mapping(task, list(first), given, sample=first, pairs=pairs)
        _check_columns(mapping, missing, names=list(first), name=name, line=number)
        numbers = inputs.NumberCount(inputs.guessed_columns(task, mapping, given))
        for line in whole.splitlines():
            try:
                value = json.loads(line) if line.strip() else None
            except ValueError:
                continue  # the job reports a broken line with its number
            if isinstance(value, dict):
                numbers.add(value)
        _raise_any(numbers, name, number, what="key")
        return mapping
    if fmt == "squad" and not (head.lstrip("\ufeff \t\r\n").startswith("{") and '"data"' in head):
        _fail(name, 'this is not SQuAD JSON: it should be one object with a "data" list', line=lines[0][0],
              hint="give a SQuAD v1.1/v2.0 file, or JSON Lines with question and context")
    return {}


def _complete_lines(head: str) -> str:
    """The head without its last line when that one may be cut short (the head ends inside the file)."""
    return head if head.endswith("\n") else head.rsplit("\n", 1)[0]


def _rows_after_header(text: str, delimiter: str, header_line: int) -> list[list[str]]:
    reader = csv.reader(io.StringIO(text), delimiter=delimiter,
                        quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
    try:
        return [row for row in reader if reader.line_num > header_line]
    except csv.Error:
        return []  # the job reads every row and reports a broken one with its line


def _raise_any(numbers: "inputs.NumberCount", name: str, line: int, what: str = "column") -> None:
    problems = ProblemLog()
    numbers.report(name, line, problems, what=what)
    if problems.has_errors:
        raise DataValidationError(problems.errors())


def _header(head: str, name: str, delimiter: str) -> tuple[int, list[str]]:
    reader = csv.reader(io.StringIO(head), delimiter=delimiter,
                        quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
    try:
        for row in reader:
            if any(cell.strip() for cell in row):
                return reader.line_num, [unescape_cell(cell.strip().lstrip("\ufeff")) for cell in row]
    except csv.Error as exc:
        _fail(name, f"cannot read the header row: {exc}", line=reader.line_num, hint="save the file as CSV UTF-8")
    _fail(name, "the file has no header row", hint="put the column names on the first line")
    raise AssertionError("unreachable")


def _json_object(raw: str, name: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(raw.strip().lstrip("\ufeff"))
    except ValueError as exc:
        _fail(name, f"broken JSON on line {number}: {getattr(exc, 'msg', exc)}", line=number,
              hint="each line must be one complete JSON object, e.g. {\"text\": \"...\"}")
    if not isinstance(value, dict):
        _fail(name, f"line {number} is a JSON {type(value).__name__}, not an object", line=number,
              hint="write one JSON object per line")
    return value


def _check_columns(mapping: dict[str, str], missing: list[tuple[str, Optional[str], str]], *, names: list[str],
                   name: str, line: int) -> None:
    """The first column the model needs that is not in the file, as an error on the header's line."""
    present = ", ".join(repr(n) for n in names) or "none"
    for role, column, option in missing[:1]:
        if column is None:
            _fail(name, f"missing column: no {role} column found (columns: {present}){inputs.missing_why(role)}",
                  line=line,
                  hint=f"name the {role} column with {option}, or rename it to {role!r}")
        _fail(name, f"missing column: the {role} column {column!r} is not in the file (columns: {present})",
              line=line, column=column, hint=f"check the spelling, or choose another column with {option}")


def _fail(name: str, message: str, *, line: Optional[int] = None, column: Optional[str] = None,
          hint: str = "") -> None:
    raise DataValidationError([Problem("error", name, message, line=line, column=column, hint=hint)])


def keep_input(inputs_dir: Path, source: Path, name: str, sha256: str) -> Path:
    """A copy of ``source`` at ``inputs_dir/<sha>/<name>``: the job reads it even once the user's file has
    changed or gone, and the same bytes are kept once. Copied under a temporary name and renamed, so a
    copy cut short is never taken for the input."""
    safe = Path(name).name.strip() or "input" + source.suffix
    folder = inputs_dir / sha256[:32]
    target = folder / safe
    if target.is_file() and target.stat().st_size == source.stat().st_size:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{uuid.uuid4().hex}.part"
    try:
        shutil.copyfile(source, partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    log.info("kept prediction input %s as %s", name, target)
    return target
