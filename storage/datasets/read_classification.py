"""Text classification from CSV, TSV or JSON Lines: one text (or a text pair) and one or more labels."""
from __future__ import annotations

import csv
import sys
from typing import Any, Iterator, Sequence, TextIO

from storage.cells import unescape_cell, unescape_row
from storage.datasets.columns import ColumnMapping, detect
from storage.datasets.problems import ProblemLog
from storage.datasets.records import Record, as_label, iter_json_lines

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


class LabelReader:
    """Turns a raw label cell into ``str`` or ``list[str]`` and keeps single- and multi-label apart."""

    def __init__(self, separator: str | None):
        self.separator = separator
        self.multi: bool | None = True if separator else None

    def parse(self, value: Any) -> str | list[str] | None:
        """None means blank. Raises ValueError when a list appears in a single-label file."""
        if isinstance(value, list):
            if self.multi is False:
                raise ValueError("this label is a list, but earlier rows have a single label")
            self.multi = True
            labels = [as_label(v) for v in value if v is not None and as_label(v)]
            return labels or None
        if value is None or as_label(value) == "":
            return None
        text = as_label(value)
        if self.separator:
            labels = [part.strip() for part in text.split(self.separator) if part.strip()]
            return labels or None
        if self.multi is None:
            self.multi = False
        return [text] if self.multi else text


class DelimitedRows:
    """(first line, fields) of each data row of a CSV/TSV ``reader`` after its header: blank rows are skipped,
    a row that cannot be parsed or has another number of fields than the header is reported to ``log`` and
    skipped, and after 100 unparseable rows reading stops. ``seen`` counts the non-blank rows, ragged ones
    included. The Data tab and prediction files (``jobs.predict.inputs``) read rows through this one loop,
    which undoes the formula escaping of the workbench's own CSV outputs (``storage.cells``) in every cell."""

    def __init__(self, reader, width: int, name: str, log: ProblemLog, delimiter: str):
        self.reader, self.width, self.name, self.log, self.delimiter = reader, width, name, log, delimiter
        self.seen = 0

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        reader, name, log = self.reader, self.name, self.log
        previous_end, failures = reader.line_num, 0
        while failures <= 100:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                failures += 1
                log.error(name, f"cannot parse this row: {exc}", line=previous_end + 1,
                          hint="close the quotes of a quoted field, or quote fields that contain quotes")
                previous_end = reader.line_num
                continue
            start, previous_end = previous_end + 1, reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            self.seen += 1
            if len(row) != self.width:
                log.error(name, f"ragged row: {len(row)} field(s), but the header has {self.width}", line=start,
                          hint=f"quote fields that contain {'a tab' if self.delimiter == chr(9) else 'a comma'}, "
                               "or add/remove delimiters so every row has one field per column")
                continue
            yield start, unescape_row(row)


def _mapping_problems(name: str, names: Sequence[str], mapping: ColumnMapping, log: ProblemLog,
                      line: int = 1) -> bool:
    """Report missing columns; True when the mapping is usable."""
    present = ", ".join(repr(n) for n in names) or "none"
    ok = True
    for role, column, option in (("text", mapping.text, "--text-column"), ("label", mapping.label, "--label-column"),
                                 ("text pair", mapping.text_pair, "--text-pair-column")):
        if column is None and role != "text pair":
            log.error(name, f"missing column: no {role} column found (columns: {present})", line=line,
                      hint=f"rename the column to '{'text' if role == 'text' else 'label'}' or choose it with {option}")
            ok = False
        elif column is not None and column not in names:
            log.error(name, f"missing column: {role} column {column!r} is not in the file (columns: {present})",
                      line=line, column=column, hint=f"check the spelling, or choose another column with {option}")
            ok = False
    return ok


def _record(name: str, line: int, text: Any, pair: Any, raw_label: Any, mapping: ColumnMapping,
            labels: LabelReader, log: ProblemLog) -> Record | None:
    if text is None or not str(text).strip():
        log.warning("blank text", name, "blank text; the row was skipped", line=line, column=mapping.text,
                    hint="fill in the text or delete the row")
        return None
    try:
        label = labels.parse(raw_label)
    except ValueError as exc:
        log.error(name, str(exc), line=line, column=mapping.label,
                  hint="use a list for every row (multi-label) or a single value for every row")
        return None
    if label is None:
        log.warning("blank label", name, "blank label; the row was skipped", line=line, column=mapping.label,
                    hint="fill in the label or delete the row")
        return None
    data: dict[str, Any] = {"text": str(text)}
    dedupe = str(text)
    if mapping.text_pair is not None:
        data["text_pair"] = "" if pair is None else str(pair)
        dedupe += "\x00" + data["text_pair"]
    data["label"] = label
    key = label[0] if isinstance(label, list) else label
    return Record(line, data, key, dedupe)


def delimited_reader(stream: TextIO, delimiter: str):
    """A CSV reader (quoted, RFC 4180) or a TSV one (no quoting)."""
    return csv.reader(stream, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)


def read_header(reader, name: str, log: ProblemLog, empty_hint: str) -> list[str] | None:
    """The first row with a non-blank cell, its cells stripped (and a byte-order mark dropped); None, with the
    problem logged, for an empty file or an unreadable row."""
    try:
        header: list[str] = []
        while not any(cell.strip() for cell in header):
            header = [unescape_cell(h.strip().lstrip("\ufeff")) for h in next(reader)]
    except StopIteration:
        log.error(name, "the file is empty", hint=empty_hint)
        return None
    except csv.Error as exc:
        log.error(name, f"cannot read the header row: {exc}", line=reader.line_num, hint="save the file as CSV UTF-8")
        return None
    return header


def read_delimited(stream: TextIO, name: str, columns: ColumnMapping | None, log: ProblemLog,
                   delimiter: str, found: dict | None = None) -> Iterator[Record]:
    """Rows of a CSV (quoted, RFC 4180) or TSV (no quoting) file with a header row.

    The columns used are put into ``found["columns"]`` for the report.
    """
    reader = delimited_reader(stream, delimiter)
    header = read_header(reader, name, log, "upload a file with a header row and examples")
    if header is None:
        return
    header_line = reader.line_num
    mapping = detect(header, columns)
    if not _mapping_problems(name, header, mapping, log, header_line):
        return
    if found is not None:
        found["columns"] = mapping.to_dict()
    where = {role: header.index(col) for role, col in
             (("text", mapping.text), ("label", mapping.label), ("pair", mapping.text_pair)) if col is not None}
    labels = LabelReader(mapping.label_separator)
    rows = DelimitedRows(reader, len(header), name, log, delimiter)
    for start, row in rows:
        pair = row[where["pair"]] if "pair" in where else None
        record = _record(name, start, row[where["text"]], pair, row[where["label"]], mapping, labels, log)
        if record is not None:
            yield record
    if rows.seen == 0:
        log.error(name, "the file has a header row but no examples", line=header_line,
                  hint="add one example per row")


def read_jsonl(stream: TextIO, name: str, columns: ColumnMapping | None, log: ProblemLog,
               found: dict | None = None) -> Iterator[Record]:
    """Objects such as ``{"text": ..., "label": ...}``; keys are detected from the first object."""
    mapping: ColumnMapping | None = None
    labels = LabelReader(columns.label_separator if columns else None)
    rows = 0
    for line, obj in iter_json_lines(stream, name, log):
        rows += 1
        if mapping is None:
            mapping = detect(list(obj), columns)
            if not _mapping_problems(name, list(obj), mapping, log, line):
                return
            if found is not None:
                found["columns"] = mapping.to_dict()
        missing = [k for k in (mapping.text, mapping.label, mapping.text_pair) if k is not None and k not in obj]
        if missing:
            log.error(name, f"missing key(s) {', '.join(map(repr, missing))}", line=line, column=missing[0],
                      hint="every line needs the same keys as the first line")
            continue
        record = _record(name, line, obj[mapping.text], obj.get(mapping.text_pair) if mapping.text_pair else None,
                         obj[mapping.label], mapping, labels, log)
        if record is not None:
            yield record
    if rows == 0 and not log.has_errors:
        log.error(name, "the file contains no examples", hint="write one JSON object per line")
