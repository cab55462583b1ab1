"""Reading the pool of a labelling project: a file of texts to label (CSV, TSV, JSON Lines or plain text, one
text a line), with an optional id column and optional labels already given.

One streaming pass yields one ``PoolRow`` per text; problems go to a ``ProblemLog`` with the file, the line and
how to fix them, as for dataset uploads (the caller raises ``DataValidationError`` when it has errors). Memory
holds the ids seen (to refuse a repeated id), never the texts.
"""
from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Sequence, TextIO

from storage.datasets.columns import TEXT_NAMES
from storage.datasets.problems import ProblemLog
from storage.datasets.read_classification import DelimitedRows, delimited_reader, read_header
from storage.datasets.records import as_label, iter_json_lines
from storage.datasets.source import open_text, read_head, scan

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

POOL_FORMATS = ("csv", "tsv", "jsonl", "text")
SUFFIXES = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".txt": "text"}
ID_NAMES = ("id", "external_id", "item_id", "uid", "guid", "key", "idx")
# Only these are taken for labels already given without --label-column: a pool's other columns (a category,
# a tag of the export it came from) are often not answers in the project's label set.
POOL_LABEL_NAMES = ("label", "labels")
MAX_ID_CHARS = 200  # label_items.external_id
# Splits a multi-label cell of a CSV/TSV file ("billing|refund"); JSON Lines give a list instead.
LABEL_SEPARATOR = "|"


class PoolRow(NamedTuple):
    """One text of the pool: its line in the file, its id (the id column, else the line), the text, and the
    label given in the file (None: unlabelled; a class name, or a list of names for a multi-label file)."""

    line: int
    external_id: str
    text: str
    label: Any


@dataclasses.dataclass(frozen=True)
class PoolColumns:
    """The columns (or JSON keys) to read; None means detect: the text from common names (or the only
    column), the id from ``ID_NAMES``, the labels from ``POOL_LABEL_NAMES`` (absent: no labels)."""

    text: str | None = None
    id: str | None = None
    label: str | None = None


def detect_pool_format(path: Path, head: str) -> str:
    """``csv``, ``tsv``, ``jsonl`` or ``text``: by the file's suffix, else by its first lines."""
    by_suffix = SUFFIXES.get(path.suffix.lower())
    lines = [line for line in head.splitlines() if line.strip()][:20]
    first = lines[0].lstrip("\ufeff").strip() if lines else ""
    if by_suffix == "csv" and lines and all("\t" in line for line in lines):
        return "tsv"
    if by_suffix:
        return by_suffix
    if first.startswith("{"):
        return "jsonl"
    return "text"


def read_pool(path: Path, log: ProblemLog, *, columns: PoolColumns | None = None, multi_label: bool = False,
              fmt: str | None = None, max_bytes: int = 2048 * 10**6) -> Iterator[PoolRow]:
    """Every text of ``path`` as a ``PoolRow``, in file order; errors and warnings go to ``log`` and the rows
    they concern are left out (a caller stores nothing when ``log.has_errors`` after the last row)."""
    info = scan(path, log, max_bytes=max_bytes)
    if info.encoding is None:
        return
    fmt = fmt or detect_pool_format(path, read_head(info))
    if fmt not in POOL_FORMATS:
        log.error(path.name, f"unknown pool format {fmt!r}", hint=f"choose one of {', '.join(POOL_FORMATS)}")
        return
    columns = columns or PoolColumns()
    if fmt == "text" and (columns.id or columns.label or columns.text):
        log.error(path.name, "a plain-text file has no columns to choose",
                  hint="give a CSV, TSV or JSON Lines file to name an id, text or label column")
        return
    ids = _Ids(path.name, log)
    with open_text(info) as stream:
        if fmt == "text":
            rows = _plain(stream, path.name, log)
        elif fmt == "jsonl":
            rows = _jsonl(stream, path.name, columns, multi_label, log)
        else:
            rows = _delimited(stream, path.name, columns, multi_label, log, "," if fmt == "csv" else "\t")
        count = 0
        for row in rows:
            if ids.fresh(row):
                count += 1
                yield row
    if count == 0 and not log.has_errors:
        log.error(path.name, "the file contains no text to label", hint="write one text per line or per row")


class _Ids:
    """Refuses a repeated or over-long id (the id says which item a label belongs to on export and import)."""

    def __init__(self, name: str, log: ProblemLog):
        self.name, self.log, self.first_line = name, log, {}

    def fresh(self, row: PoolRow) -> bool:
        if len(row.external_id) > MAX_ID_CHARS:
            self.log.error(self.name, f"the id has {len(row.external_id)} characters; at most {MAX_ID_CHARS} are "
                           "kept", line=row.line, column="id", hint="shorten the ids, or leave the id column out "
                           "(each text is then named by its line)")
            return False
        first = self.first_line.setdefault(row.external_id, row.line)
        if first != row.line:
            self.log.error(self.name, f"the id {row.external_id!r} is repeated (first on line {first})",
                           line=row.line, column="id", hint="give every text its own id")
            return False
        return True


def _plain(stream: TextIO, name: str, log: ProblemLog) -> Iterator[PoolRow]:
    for number, raw in enumerate(stream, 1):
        text = raw.strip().lstrip("\ufeff").strip()
        if text:
            yield PoolRow(number, str(number), text, None)


def _pick(names: Sequence[str], given: str | None, wanted: Sequence[str], role: str, option: str, name: str,
          log: ProblemLog, line: int) -> tuple[bool, str | None]:
    """(usable, column): the named column when it exists, else the first of ``wanted`` found."""
    if given is not None:
        if given in names:
            return True, given
        present = ", ".join(repr(n) for n in names) or "none"
        log.error(name, f"missing column: {role} column {given!r} is not in the file (columns: {present})",
                  line=line, column=given, hint=f"check the spelling, or choose another column with {option}")
        return False, None
    lowered = {n.strip().lower(): n for n in names}
    return True, next((lowered[w] for w in wanted if w in lowered), None)


def _mapping(names: Sequence[str], columns: PoolColumns, name: str, log: ProblemLog,
             line: int) -> tuple[str, str | None, str | None] | None:
    """(text, id, label) columns of a header, or None after reporting why there is no text column."""
    ok_id, id_col = _pick(names, columns.id, ID_NAMES, "id", "--id-column", name, log, line)
    ok_label, label_col = _pick([n for n in names if n != id_col], columns.label, POOL_LABEL_NAMES, "label",
                                "--label-column", name, log, line)
    ok_text, text_col = _pick([n for n in names if n not in (id_col, label_col)], columns.text, TEXT_NAMES, "text",
                              "--text-column", name, log, line)
    if not (ok_id and ok_label and ok_text):
        return None
    if text_col is None:
        rest = [n for n in names if n not in (id_col, label_col)]
        if len(rest) != 1:
            present = ", ".join(repr(n) for n in names) or "none"
            log.error(name, f"missing column: no text column found (columns: {present})", line=line,
                      hint="rename the column of the texts to 'text' or choose it with --text-column")
            return None
        text_col = rest[0]
        log.warning("header", name, f"the column {text_col!r} was taken for the texts: its first row is read as "
                    "the column names, not as a text", line=line, column=text_col,
                    hint="add a header row ('text'), or give a plain-text file (.txt): one text a line")
    return text_col, id_col, label_col


def _label(raw: Any, multi_label: bool, name: str, line: int, column: str, log: ProblemLog) -> tuple[bool, Any]:
    """(ok, label): None for a blank cell; a name, or a sorted list of names for a multi-label project."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return True, None
    if isinstance(raw, list):
        if not multi_label:
            log.error(name, "this label is a list, but the project is single-label", line=line, column=column,
                      hint="give one label per text, or create a multi-label project")
            return False, None
        return True, sorted({as_label(v) for v in raw if v is not None and as_label(v)})
    if isinstance(raw, dict):
        log.error(name, "this label is a JSON object", line=line, column=column,
                  hint="give a label name (or a list of names for a multi-label project)")
        return False, None
    text = as_label(raw)
    if multi_label:
        return True, sorted({part.strip() for part in text.split(LABEL_SEPARATOR) if part.strip()})
    return True, text


def _row(name: str, line: int, text: Any, raw_id: Any, raw_label: Any, mapping: tuple[str, str | None, str | None],
         multi_label: bool, log: ProblemLog) -> PoolRow | None:
    text_col, id_col, label_col = mapping
    if text is None or not str(text).strip():
        log.warning("blank text", name, "blank text; the row was skipped", line=line, column=text_col,
                    hint="fill in the text or delete the row")
        return None
    if id_col is not None and (raw_id is None or not str(raw_id).strip()):
        log.error(name, "blank id", line=line, column=id_col, hint="give every row an id, or leave the id column "
                  "out (each text is then named by its line)")
        return None
    external_id = str(line) if id_col is None else as_label(raw_id)
    ok, label = _label(raw_label, multi_label, name, line, label_col or "label", log) if label_col else (True, None)
    if not ok:
        return None
    return PoolRow(line, external_id, str(text), label)


def _delimited(stream: TextIO, name: str, columns: PoolColumns, multi_label: bool, log: ProblemLog,
               delimiter: str) -> Iterator[PoolRow]:
    reader = delimited_reader(stream, delimiter)
    header = read_header(reader, name, log, "give a file with a header row and one text per row")
    if header is None:
        return
    header_line = reader.line_num
    mapping = _mapping(header, columns, name, log, header_line)
    if mapping is None:
        return
    where = [header.index(c) if c is not None else None for c in mapping]
    rows = DelimitedRows(reader, len(header), name, log, delimiter)
    for start, cells in rows:
        values = [cells[i] if i is not None else None for i in where]
        row = _row(name, start, values[0], values[1], values[2], mapping, multi_label, log)
        if row is not None:
            yield row


def _jsonl(stream: TextIO, name: str, columns: PoolColumns, multi_label: bool, log: ProblemLog) -> Iterator[PoolRow]:
    mapping: tuple[str, str | None, str | None] | None = None
    for line, obj in iter_json_lines(stream, name, log):
        if mapping is None:
            mapping = _mapping(list(obj), columns, name, log, line)
            if mapping is None:
                return
        if mapping[0] not in obj:
            log.error(name, f"missing key {mapping[0]!r}", line=line, column=mapping[0],
                      hint="every line needs the same keys as the first line")
            continue
        row = _row(name, line, obj[mapping[0]], obj.get(mapping[1]) if mapping[1] else None,
                   obj.get(mapping[2]) if mapping[2] else None, mapping, multi_label, log)
        if row is not None:
            yield row
