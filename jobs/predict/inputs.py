"""The rows of a prediction job's input file, streamed, with the Data tab's checks but no labels needed.

A file is opened in two passes. ``open_input`` scans the bytes (``storage.datasets.source.scan``: encoding,
binary content, emptiness), detects the format, checks that it fits the run's task and reads every row
once, counting them (the job's progress is "rows done of N") and collecting every problem, so a bad file
is refused before anything is predicted or written. ``iter_rows`` then streams the rows again, from any
row on (a resumed job skips the rows of its finished chunks). Memory stays flat in the number of rows,
except for SQuAD JSON, which is one JSON document (the Data tab's reader, bounded by its size limit).

Each ``InputRow`` has the input's own ``columns`` (carried to the output unchanged) and the ``features``
the predictor reads, by task:

- text classification: ``{"text"}`` or ``{"text", "text_pair"}``
- token classification: ``{"text"}`` (words split as the playground splits them) or ``{"tokens"}``
  (pre-split words: CoNLL, or a JSON Lines list)
- question answering: ``{"question", "context"}``
- masked LM: ``{"text"}``

Formats by task: CSV, TSV and JSON Lines for every task; TXT (one text per line) for all but QA; CoNLL
for token classification; SQuAD JSON for QA. Columns are found as the Data tab finds them
(``storage.datasets.columns.detect``); a label column is not needed and, like every column, is kept.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, TextIO

from jobs.predict.spec import PredictSpec
from storage.cells import unescape_cell
from storage.datasets import read_qa, read_text, read_tokens
from storage.datasets.columns import ColumnMapping, detect
from storage.datasets.formats import SUFFIXES
from storage.datasets.problems import ProblemLog
from storage.datasets.read_classification import DelimitedRows
from storage.datasets.records import iter_json_lines
from storage.datasets.source import SourceInfo, open_text, read_head, scan
from storage.errors import ConfigError, DataValidationError

log = logging.getLogger(__name__)

TEXT, TOKENS, QA, MLM = "text-classification", "token-classification", "question-answering", "masked-lm"
FORMATS_BY_TASK = {
    TEXT: ("csv", "tsv", "jsonl", "txt"),
    TOKENS: ("conll", "jsonl", "csv", "tsv", "txt"),
    QA: ("squad", "jsonl", "csv", "tsv"),
    MLM: ("txt", "csv", "tsv", "jsonl"),
}
WHAT_FITS = {
    TEXT: "a CSV/TSV/JSON Lines file with a text column (and a text_pair column for pairs), or a TXT file "
          "with one text per line",
    TOKENS: "a CoNLL file (one token per line, a blank line between sentences), JSON Lines with a tokens list "
            "or a text, a CSV/TSV with a text column, or a TXT file with one text per line",
    QA: "a SQuAD JSON file, or JSON Lines/CSV/TSV with question and context columns",
    MLM: "a TXT file with one text per line, or a CSV/TSV/JSON Lines file with a text column",
}
FORMAT_NAMES = {"csv": "a CSV file", "tsv": "a TSV file", "jsonl": "a JSON Lines file", "txt": "a TXT file",
                "conll": "a CoNLL file (tokens and tags)", "squad": "a SQuAD JSON file (questions and contexts)"}
QUESTION_NAMES = ("question", "query", "q")
CONTEXT_NAMES = ("context", "passage", "paragraph", "document", "text")
NO_SIZE_LIMIT = 1 << 62  # the service bounds uploads; a job reads what it was given


@dataclasses.dataclass(frozen=True)
class InputRow:
    """One row: its place in the file (``index`` from 0; ``line`` for messages), its columns, what the model reads."""

    index: int
    line: Optional[int]
    columns: dict[str, Any]
    features: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class InputFile:
    """An input file checked and counted by ``open_input``."""

    info: SourceInfo
    task: str
    format: str
    columns: tuple[str, ...]  # the input's own columns, in order: the output's first columns
    mapping: dict[str, str]  # which columns the model reads: {"text": ..., "text_pair": ...} / question, context
    rows: int
    given: Optional[ColumnMapping] = None  # the columns the user named (the spec's ``columns``)
    pairs: Optional[bool] = None  # text classification: the model reads pairs of texts (PredictSpec.pairs)
    warnings: tuple[str, ...] = ()
    shown: str = ""  # the file's name as the user gave it

    @property
    def name(self) -> str:
        return self.shown or self.info.path.name


def open_input(spec: PredictSpec, task: str) -> InputFile:
    """Check ``spec.input_path`` for a run of ``task`` and count its rows; raises DataValidationError/ConfigError."""
    path = Path(spec.input_path)
    if not path.is_file():
        raise ConfigError(f"the input file {spec.input_name or path.name} is missing ({path})")
    if task not in FORMATS_BY_TASK:
        raise ConfigError(f"prediction files are not supported for the task {task!r}")
    shown = spec.input_name or path.name  # the stored copy's name means nothing to the user
    problems = ProblemLog()
    info = scan(path, problems, max_bytes=NO_SIZE_LIMIT)
    if problems.has_errors:
        raise _invalid(problems, path.name, shown)
    fmt = spec.input_format or detect_input_format(task, Path(shown), read_head(info))
    check_shape(task, fmt, shown, pairs=spec.pairs)
    draft = InputFile(info, task, fmt, (), {}, 0, _given(spec), pairs=spec.pairs)
    columns: dict[str, None] = {}  # an ordered set: the union of the rows' columns (JSON Lines rows may differ)
    rows = 0
    found: dict[str, Any] = {}
    for row in _rows(draft, problems, found):
        columns.update(dict.fromkeys(row.columns))
        rows += 1
    if problems.has_errors:
        raise _invalid(problems, path.name, shown)
    mapping = found.get("mapping", {})
    warnings = tuple(str(dataclasses.replace(w, file=shown) if w.file == path.name else w)
                     for w in problems.warnings()) + tuple(read_from(mapping, draft.given))
    for warning in warnings:
        log.warning("%s", warning)
    return dataclasses.replace(draft, columns=tuple(columns), mapping=mapping, rows=rows,
                               warnings=warnings, shown=shown)


def read_from(mapping: dict[str, str], given: Optional[ColumnMapping]) -> list[str]:
    """What the job says about a column it picked itself: ``the text is read from the column 'review'``."""
    guessed = guessed_columns(TEXT, mapping, given)
    return [f"the {role.replace('_', ' ')} is read from the column {column!r} (no column is named {role!r}; name "
            f"another with {ROLE_OPTIONS[role]})" for role, column in guessed.items()]


def _given(spec: PredictSpec) -> Optional[ColumnMapping]:
    known = {f.name for f in dataclasses.fields(ColumnMapping)}
    unknown = sorted(set(spec.columns) - known)
    if unknown:
        raise ConfigError(f"unknown column role(s) {', '.join(unknown)}; name columns as {', '.join(sorted(known))}")
    return ColumnMapping(**spec.columns) if spec.columns else None


def _invalid(problems: ProblemLog, name: str, shown: str) -> DataValidationError:
    """The problems, naming the file as the user named it."""
    return DataValidationError([dataclasses.replace(p, file=shown) if p.file == name else p for p in problems.errors()])


def iter_rows(source: InputFile, start: int = 0) -> Iterator[InputRow]:
    """The rows of a file ``open_input`` accepted, from row ``start`` on (the rows before are read and skipped)."""
    problems = ProblemLog()
    for row in _rows(source, problems, {}):
        if problems.has_errors:  # the file changed since it was counted
            raise _invalid(problems, source.info.path.name, source.name)
        if row.index >= start:
            yield row
    if problems.has_errors:
        raise _invalid(problems, source.info.path.name, source.name)


# ---------------------------------------------------------------- formats and shapes

def detect_input_format(task: str, path: Path, head: str) -> str:
    """The format by the file's suffix (as the Data tab names them), else by its first lines."""
    suffix = path.suffix.lower()
    by_suffix = "txt" if SUFFIXES.get(suffix) == "text" else SUFFIXES.get(suffix)
    if suffix == ".json":
        by_suffix = "squad" if _looks_like_squad(head) else "jsonl"
    if by_suffix == "txt" and _looks_like_conll(head):
        return "conll"  # token<TAB>tag lines saved as .txt: for tagging, or refused as the wrong shape
    if by_suffix:
        return by_suffix
    lines = [line for line in head.splitlines() if line.strip()][:20]
    first = lines[0].lstrip("\ufeff").strip() if lines else ""
    if first.startswith("{"):
        return "squad" if _looks_like_squad(head) else "jsonl"
    if _looks_like_conll(head):
        return "conll"
    if lines and all("\t" in line for line in lines):
        return "tsv"
    return "csv" if task != MLM or "," in first else "txt"


def _looks_like_squad(head: str) -> bool:
    start = head.lstrip("\ufeff \r\n\t")
    if not start.startswith("{") or '"data"' not in head:
        return False
    first_line = start.split("\n", 1)[0]
    try:
        json.loads(first_line)
    except ValueError:
        return True  # a JSON document over several lines (or longer than the head): not JSON Lines
    return '"paragraphs"' in first_line


def _looks_like_conll(head: str) -> bool:
    """Token<TAB>tag lines in sentences: every line in the head has the same 2-4 tab-separated short fields."""
    lines = head.splitlines()[:200]
    filled = [line for line in lines if line.strip() and not line.startswith("-DOCSTART-")]
    if len(filled) < 2 or not any(not line.strip() for line in lines[:len(lines) - 1]):
        return False
    counts = {len(line.split("\t")) for line in filled}
    return len(counts) == 1 and 2 <= counts.pop() <= 4 and all(
        " " not in line.split("\t")[-1].strip() and len(line.split("\t")[0]) <= 40 for line in filled)


def check_shape(task: str, fmt: str, name: str, *, pairs: Optional[bool] = None) -> None:
    """Refuse a format that cannot hold this task's inputs, saying what would."""
    if fmt not in FORMATS_BY_TASK[task]:
        raise ConfigError(f"{name}: {FORMAT_NAMES.get(fmt, fmt)} does not fit a {task} run; it predicts from "
                          f"{WHAT_FITS[task]}")
    if task == TEXT and pairs and fmt == "txt":
        raise ConfigError(f"{name}: a TXT file holds one text per line, and the run was trained on pairs of texts; "
                          "give a CSV/TSV/JSON Lines file with a text and a text_pair column")


# ---------------------------------------------------------------- readers

def _rows(source: InputFile, problems: ProblemLog, found: dict[str, Any]) -> Iterator[InputRow]:
    name, given = source.info.path.name, source.given
    with open_text(source.info) as stream:
        if source.format in ("csv", "tsv"):
            rows = _read_delimited(stream, name, source.task, given, problems, found,
                                   "," if source.format == "csv" else "\t", pairs=source.pairs)
        elif source.format == "jsonl":
            rows = _read_jsonl(stream, name, source.task, given, problems, found, pairs=source.pairs)
        elif source.format == "txt":
            rows = ((r.line, {"text": r.data["text"]}) for r in read_text.read_text(stream, name, problems, "lines"))
            found["mapping"] = {"text": "text"}
        elif source.format == "conll":
            rows = ((r.line, dict(r.data)) for r in read_tokens.read_conll(stream, name, problems, tags_optional=True))
            found["mapping"] = {"tokens": "tokens"}
        else:
            rows = ((r.line, _squad_columns(r.data)) for r in read_qa.read_squad(stream, name, problems,
                                                                                   source.info.size))
            found["mapping"] = {"question": "question", "context": "context"}
        for index, (line, columns) in enumerate(rows):
            yield InputRow(index, line, columns, _features(source.task, source.format, columns, found["mapping"]))


def _squad_columns(data: dict[str, Any]) -> dict[str, Any]:
    """A SQuAD question's columns; its gold answers only where it has some."""
    out = {k: data[k] for k in ("id", "title", "question", "context")}
    if data["answers"]["text"]:
        out["answers"] = data["answers"]["text"]
    return out


def _features(task: str, fmt: str, columns: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    if "tokens" in mapping:
        return {"tokens": [str(t) for t in columns[mapping["tokens"]]]}
    if task == QA:
        return {"question": _text(columns[mapping["question"]]), "context": _text(columns[mapping["context"]])}
    features = {"text": _text(columns[mapping["text"]])}
    if mapping.get("text_pair"):
        features["text_pair"] = _text(columns[mapping["text_pair"]])
    return features


def _text(value: Any) -> str:
    """A cell as text: a blank or missing cell is the empty text (the row is kept and still predicted)."""
    return "" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def resolve_mapping(task: str, names: Sequence[str], given: Optional[ColumnMapping],
                    sample: Optional[dict] = None, *, pairs: Optional[bool] = None
                    ) -> tuple[dict[str, str], list[tuple[str, Optional[str], str]]]:
    """Which columns the model reads, and the (role, column, option) of each one that is missing.

    The Data tab's detection, with the label optional; a file with one column reads it as the text. For QA
    the mapping's ``text`` names the question column and ``text_pair`` the context column. ``pairs`` (text
    classification): True when the model was trained on pairs of texts, so the second text is needed;
    False when it reads single texts, so a detected second-text column is not read (naming one is an
    error); None (jobs queued before runs recorded it): read a second text when one is found.
    """
    given = given or ColumnMapping()
    if task == QA:
        question = given.text or _first(names, QUESTION_NAMES)
        context = given.text_pair or _first([n for n in names if n != question], CONTEXT_NAMES)
        mapping = {"question": question, "context": context}
        options = {"question": "--text-column", "context": "--text-pair-column"}
        return _checked(mapping, names, options)
    if task == TOKENS and sample is not None and given.text is None:
        key = read_tokens._list_key(sample, None, read_tokens.TOKEN_KEYS)
        if key is not None:
            return {"tokens": key}, []
    detected = detect(names, ColumnMapping(text=given.text, label=given.label, text_pair=given.text_pair))
    text = detected.text
    if text is None and len([n for n in names if n != detected.label]) == 1:
        text = next(n for n in names if n != detected.label)
    mapping = {"text": text}
    if task == TEXT and pairs is False and given.text_pair:
        raise ConfigError(f"the run was trained on single texts; it does not read a second text, so the column "
                          f"{given.text_pair!r} named as the second text (--text-pair-column) cannot be used: "
                          "leave it out, or predict with a run trained on pairs of texts")
    if task == TEXT and (pairs or (pairs is None and (given.text_pair or detected.text_pair))):
        mapping["text_pair"] = given.text_pair or detected.text_pair
    if task == TOKENS and sample is not None and given.text and isinstance(sample.get(given.text), list):
        return {"tokens": given.text}, []
    return _checked(mapping, names, {"text": "--text-column", "text_pair": "--text-pair-column"})


def _first(names: Sequence[str], wanted: Sequence[str]) -> Optional[str]:
    lowered = {n.strip().lower(): n for n in names}
    return next((lowered[w] for w in wanted if w in lowered), None)


def _checked(mapping: dict[str, Optional[str]], names: Sequence[str], options: dict[str, str]
             ) -> tuple[dict[str, str], list[tuple[str, Optional[str], str]]]:
    missing = [(role, column, options[role]) for role, column in mapping.items()
               if column is None or column not in names]
    return {role: column for role, column in mapping.items() if column is not None}, missing


# A column the reader picked itself (no column has the role's name, and none was named) is refused when more
# than this share of its filled cells are numbers: ids, scores or counts, not text a model was trained to read.
MOSTLY_NUMBERS = 0.5
ROLE_OPTIONS = {"text": "--text-column", "text_pair": "--text-pair-column", "question": "--text-column",
                "context": "--text-pair-column"}


def guessed_columns(task: str, mapping: dict[str, str], given: Optional[ColumnMapping]) -> dict[str, str]:
    """The columns of ``mapping`` the user did not name, by role: the reader picked them. A column named
    exactly as its role (``text``) is no guess; tokens lists are checked as lists elsewhere."""
    named = {c for c in ((given.text, given.text_pair) if given else ()) if c}
    return {role: column for role, column in mapping.items()
            if role in ROLE_OPTIONS and column not in named and column.strip().lower() != role}


def is_number(value: Any) -> bool:
    """A cell that holds a number (``3``, ``-0.5``, ``1e3``), not text."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if not isinstance(value, str) or not value.strip():
        return False
    try:
        float(value.strip())
    except ValueError:
        return False
    return True


class NumberCount:
    """How many filled cells of each guessed column hold numbers (``guessed_columns``), to refuse a column of
    numbers read as the text; ``report`` adds the error, on the line of the header (or first row)."""

    def __init__(self, guessed: dict[str, str]):
        self.guessed = guessed
        self.filled = {column: 0 for column in guessed.values()}
        self.numbers = dict(self.filled)

    def add(self, row: dict[str, Any]) -> None:
        for column in self.filled:
            value = row.get(column)
            if value is not None and str(value).strip():
                self.filled[column] += 1
                self.numbers[column] += is_number(value)

    def report(self, name: str, line: int, problems: ProblemLog, what: str = "column") -> None:
        for role, column in self.guessed.items():
            filled, numbers = self.filled[column], self.numbers[column]
            if filled and numbers / filled > MOSTLY_NUMBERS:
                problems.error(name, f"the {what} {column!r}, which would be read as the {role} (no {what} is named "
                               f"{role!r}), holds numbers in {numbers} of {filled} rows, not text", line=line,
                               column=column, hint=f"name the {what} with the text with {ROLE_OPTIONS[role]} "
                               f"(Text column in the Predict tab), or rename it to {role!r}")


def missing_why(role: str) -> str:
    """What a missing column is for, where the role's name does not say it."""
    return " — the run was trained on pairs of texts, so each row needs its second text" if role == "text_pair" else ""


def _report_missing(name: str, line: int, names: Sequence[str], missing: list, problems: ProblemLog,
                    what: str = "column") -> None:
    present = ", ".join(repr(n) for n in names) or "none"
    for role, column, option in missing:
        if column is None:
            problems.error(name, f"missing {what}: no {role} {what} found ({what}s: {present}){missing_why(role)}",
                           line=line,
                           hint=f"name the {role} {what} with {option}, or rename it to {role!r}")
        else:
            problems.error(name, f"missing {what}: the {role} {what} {column!r} is not in the file "
                           f"({what}s: {present})", line=line, column=column,
                           hint=f"check the spelling, or choose another {what} with {option}")


def _read_delimited(stream: TextIO, name: str, task: str, given: Optional[ColumnMapping], problems: ProblemLog,
                    found: dict[str, Any], delimiter: str, *, pairs: Optional[bool] = None
                    ) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of a CSV (RFC 4180 quoting) or TSV (no quoting) file with a header row, read as the Data tab reads them."""
    reader = csv.reader(stream, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
    header = _header(reader, name, problems)
    if header is None:
        return
    header_line = reader.line_num
    mapping, missing = resolve_mapping(task, header, given, pairs=pairs)
    if missing:
        _report_missing(name, header_line, header, missing, problems)
        return
    found["mapping"] = mapping
    numbers = NumberCount(guessed_columns(task, mapping, given))
    rows = DelimitedRows(reader, len(header), name, problems, delimiter)
    for start, row in rows:
        columns = dict(zip(header, row))
        numbers.add(columns)
        yield start, columns
    numbers.report(name, header_line, problems)
    if rows.seen == 0 and not problems.has_errors:
        problems.error(name, "the file has a header row but no rows to predict", line=header_line,
                       hint="add one row per text below the header")


def _header(reader, name: str, problems: ProblemLog) -> Optional[list[str]]:
    header: list[str] = []
    try:
        while not any(cell.strip() for cell in header):
            header = [unescape_cell(h.strip().lstrip("\ufeff")) for h in next(reader)]
    except StopIteration:
        problems.error(name, "the file is empty", hint="give a file with a header row and one row per text")
        return None
    except csv.Error as exc:
        problems.error(name, f"cannot read the header row: {exc}", line=reader.line_num,
                       hint="save the file as CSV UTF-8")
        return None
    return header


def _read_jsonl(stream: TextIO, name: str, task: str, given: Optional[ColumnMapping], problems: ProblemLog,
                found: dict[str, Any], *, pairs: Optional[bool] = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """One JSON object per line; the keys the model reads are found in the first object and needed in every one."""
    mapping: Optional[dict[str, str]] = None
    numbers = NumberCount({})
    first_line = 1
    rows = 0
    for line, obj in iter_json_lines(stream, name, problems):
        rows += 1
        if mapping is None:
            mapping, missing = resolve_mapping(task, list(obj), given, sample=obj, pairs=pairs)
            if missing:
                _report_missing(name, line, list(obj), missing, problems, what="key")
                return
            found["mapping"] = mapping
            numbers, first_line = NumberCount(guessed_columns(task, mapping, given)), line
        numbers.add(obj)
        absent = [key for key in mapping.values() if key not in obj]
        wrong = [key for key in mapping.values() if key in obj and not _fits(mapping, key, obj[key])]
        if absent or wrong:
            key = (absent or wrong)[0]
            problems.error(name, f"missing key {key!r}" if absent else f"{key!r} is a JSON "
                           f"{type(obj[key]).__name__}, not {'a list' if 'tokens' in mapping else 'a string'}",
                           line=line, column=key, hint="every line needs the same keys as the first line, "
                           "with the same kind of value")
            continue
        yield line, obj
    numbers.report(name, first_line, problems, what="key")
    if rows == 0 and not problems.has_errors:
        problems.error(name, "the file contains no rows to predict", hint="write one JSON object per line")


def _fits(mapping: dict[str, str], key: str, value: Any) -> bool:
    if "tokens" in mapping:
        return isinstance(value, list)
    return value is None or isinstance(value, (str, int, float))
