"""Reads an upload into normalized JSON Lines in two streaming passes.

Pass 1 validates every record, writes ``all.jsonl`` and keeps three small numbers per record
(split key, duplicate digest, line). Between the passes duplicates and the validation split are
chosen with numpy. Pass 2 re-reads ``all.jsonl``, drops duplicates (a test set, ``keep_duplicates``, keeps
them: it is scored as given), writes ``train.jsonl`` and ``validation.jsonl`` and gathers the statistics. Memory grows by about 20 bytes per record, never
with the size of the texts.
"""
from __future__ import annotations

import array
import collections
import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from storage.datasets import read_classification, read_qa, read_text, read_tokens
from storage.datasets.columns import ColumnMapping
from storage.datasets.formats import check_format, check_task, detect_format
from storage.datasets.problems import ProblemLog
from storage.datasets.records import Record
from storage.datasets.source import SourceInfo, open_text, read_head, scan
from storage.datasets.split import MIN_VALIDATION, effective_fraction, validation_mask
from storage.datasets.stats import SAMPLE_SIZE, LabelStats, Reservoir, length_summary, load_tokenizer, token_lengths
from storage.errors import ConfigError, DataValidationError, Problem

log = logging.getLogger(__name__)
PREVIEW_ROWS = 20
SPLIT_MODE = {"text-classification": "stratified", "question-answering": "grouped",
              "token-classification": "random", "masked-lm": "random"}


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How to read and split an upload. Part of the content address, so keep it small and JSON-friendly."""

    task: str
    format: str | None = None
    columns: ColumnMapping | None = None
    validation_fraction: float = 0.1
    seed: int = 13
    # the fewest validation examples a split holds out where that is at most a quarter of the data
    # (storage.datasets.split)
    min_validation: int = MIN_VALIDATION
    # A test set is scored as given: its repeated rows are kept (and counted), where training data drops them
    keep_duplicates: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = {"task": self.task, "format": self.format or "auto",
               "columns": self.columns.to_dict() if self.columns else {},
               "validation_fraction": self.validation_fraction, "min_validation": self.min_validation,
               "seed": self.seed}
        if self.keep_duplicates:  # only when set: the content address of a training upload does not carry it
            out["keep_duplicates"] = True
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "ReadOptions":
        """The options a stored dataset was read with (``to_dict``'s form, kept in its ``stats``); a dataset
        stored before the validation floor existed was split without one (``min_validation`` 0)."""
        columns = raw.get("columns") or {}
        fmt = raw.get("format")
        return cls(task=raw["task"], format=None if fmt in (None, "auto") else fmt,
                   columns=ColumnMapping(**columns) if columns else None,
                   validation_fraction=float(raw.get("validation_fraction", 0.1)), seed=int(raw.get("seed", 13)),
                   min_validation=int(raw.get("min_validation", 0)),
                   keep_duplicates=bool(raw.get("keep_duplicates", False)))


@dataclasses.dataclass
class DatasetReport:
    """What reading an upload found: counts, labels, token lengths, warnings and a preview.

    The normalized records are in ``train.jsonl`` and ``validation.jsonl`` of the output folder.
    """

    task: str
    format: str
    files: list[str]
    columns: dict[str, str]
    examples: int
    train: int
    validation: int
    labels: dict[str, int] | None
    token_stats: dict[str, Any] | None
    details: dict[str, Any]
    warnings: list[Problem]
    warning_counts: dict[str, int]
    preview: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """JSON form; ``labels`` only where the task has labels, warnings as one line each."""
        out: dict[str, Any] = {"task": self.task, "format": self.format, "examples": self.examples}
        if self.labels is not None:
            out["labels"] = self.labels
        out.update(warnings=[str(w) for w in self.warnings], warning_counts=self.warning_counts, files=self.files,
                   columns=self.columns, train=self.train, validation=self.validation, token_stats=self.token_stats,
                   details=self.details, preview=self.preview)
        return out


@dataclasses.dataclass
class _Pass1:
    keys: array.array = dataclasses.field(default_factory=lambda: array.array("q"))
    digests: array.array = dataclasses.field(default_factory=lambda: array.array("q"))
    lines: array.array = dataclasses.field(default_factory=lambda: array.array("q"))
    key_ids: dict[str, int] = dataclasses.field(default_factory=dict)
    classes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    # where each tag first occurs (file, line, token index where a line holds many), to name a once-only tag's line
    first_tag: dict[str, tuple[str, int | None, int | None]] = dataclasses.field(default_factory=dict)


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def _records(info: SourceInfo, task: str, fmt: str, columns: ColumnMapping | None, log_: ProblemLog,
             details: dict[str, Any]) -> Iterator[Record]:
    name = info.path.name
    if fmt.startswith("text"):
        layout = {"text-lines": "lines", "text-blocks": "blocks"}.get(fmt) or read_text.detect_layout(read_head(info))
        details["documents"] = "blank-line separated" if layout == "blocks" else "one per line"
    with open_text(info) as stream:
        if fmt in ("csv", "tsv"):
            yield from read_classification.read_delimited(stream, name, columns, log_, "," if fmt == "csv" else "\t",
                                                          details)
        elif fmt == "jsonl" and task == "text-classification":
            yield from read_classification.read_jsonl(stream, name, columns, log_, details)
        elif fmt == "jsonl" and task == "token-classification":
            yield from read_tokens.read_jsonl(stream, name, columns, log_, details)
        elif fmt == "conll":
            yield from read_tokens.read_conll(stream, name, log_, details)
        elif fmt == "squad":
            yield from read_qa.read_squad(stream, name, log_, info.size)
        elif fmt == "jsonl":
            yield from read_qa.read_jsonl(stream, name, log_)
        else:
            yield from read_text.read_text(stream, name, log_, layout)


def read_records(path: Path, options: ReadOptions) -> Iterator[tuple[int | None, dict[str, Any]]]:
    """Every record of ``path`` as the import reads it, with its line in that file (None where the format has
    none): what a message about an example needs to name the user's own file, not the stored copy."""
    problems = ProblemLog()
    info = scan(path, problems, max_bytes=1 << 62)  # the file was stored already: its size was checked then
    if problems.has_errors:
        raise DataValidationError(problems.errors())
    fmt = check_format(options.task, options.format) if options.format else detect_format(options.task, path,
                                                                                          read_head(info))
    for record in _records(info, options.task, fmt, options.columns, problems, {}):
        yield record.line, record.data


def _first_pass(info: SourceInfo, options: ReadOptions, fmt: str, log_: ProblemLog, out, state: _Pass1,
                details: dict[str, Any]) -> int:
    count = 0
    for record in _records(info, options.task, fmt, options.columns, log_, details):
        state.classes.update(_classes_of(options.task, record.data))
        if options.task == "token-classification":
            _note_first_tags(state.first_tag, info.path.name, record)
        if log_.has_errors:
            continue  # keep reading to report every error, but write nothing more
        out.write(json.dumps(record.data, ensure_ascii=False) + "\n")
        state.keys.append(state.key_ids.setdefault(record.key, len(state.key_ids)))
        state.digests.append(_digest(record.dedupe))
        state.lines.append(record.line if record.line is not None else -1)
        count += 1
    return count


def _classes_of(task: str, data: dict[str, Any]) -> list[str]:
    """The labels (or tags) an example contributes; none for QA and MLM."""
    if task == "text-classification":
        return data["label"] if isinstance(data["label"], list) else [data["label"]]
    if task == "token-classification":
        return data["tags"]
    return []


def _note_first_tags(first_tag: dict[str, tuple[str, int | None, int | None]], name: str, record: Record) -> None:
    """Remember where each tag first occurs: its own line (CoNLL), else the record's line and the token."""
    for i, tag in enumerate(record.data["tags"]):
        if tag not in first_tag:
            first_tag[tag] = ((name, record.token_lines[i], None) if record.token_lines
                              else (name, record.line, i))


def _check_tag_scheme(state: _Pass1, problems: ProblemLog) -> None:
    """Warn, once per tag, about tags that break a BIO file's scheme; needs the counts of the whole upload."""
    for tag, (what, hint) in read_tokens.scheme_slips(state.classes).items():
        name, line, token = state.first_tag[tag]
        problems.warning("odd tag", name, what if token is None else f"token {token + 1}: {what}", line=line,
                         column=None if token is None else "tags", hint=hint)


def _duplicates(digests: np.ndarray) -> np.ndarray:
    """For each record the index of its first identical record, or -1 (stable: the earliest copy is kept)."""
    first = np.full(len(digests), -1, dtype=np.int64)
    if len(digests) < 2:
        return first
    order = np.argsort(digests, kind="stable")
    ordered = digests[order]
    same = np.flatnonzero(ordered[1:] == ordered[:-1]) + 1
    if len(same):
        run_start = np.maximum.accumulate(np.where(np.r_[True, ordered[1:] != ordered[:-1]],
                                                   np.arange(len(ordered)), 0))
        first[order[same]] = order[run_start[same]]
    return first


def _plan(state: _Pass1, options: ReadOptions, boundary: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first copy of each duplicate or -1, duplicates with another label, validation mask).

    ``boundary`` is where the separate validation file starts; None means split the one file.
    """
    keys = np.frombuffer(state.keys, dtype=np.int64) if len(state.keys) else np.zeros(0, dtype=np.int64)
    digests = np.frombuffer(state.digests, dtype=np.int64) if len(state.digests) else np.zeros(0, dtype=np.int64)
    first = _duplicates(digests)
    # Same text, other label: still dropped (the first copy wins) but said differently, since it is a labelling slip.
    conflicting = (first >= 0) & (keys != keys[np.maximum(first, 0)]) if options.task == "text-classification" \
        else np.zeros(len(first), dtype=bool)
    if boundary is not None:
        return first, conflicting, np.arange(len(keys)) >= boundary
    keep = first < 0
    in_validation = np.zeros(len(keys), dtype=bool)
    fraction = effective_fraction(int(keep.sum()), options.validation_fraction, options.min_validation)
    in_validation[keep] = validation_mask(keys[keep], fraction, options.seed, SPLIT_MODE[options.task])
    if options.keep_duplicates:  # a kept copy goes where its first copy went: no text on both sides of the split
        copies = ~keep
        in_validation[copies] = in_validation[first[copies]]
    return first, conflicting, in_validation


def _check_classes(task: str, classes: set[str], name: str, log_: ProblemLog) -> None:
    if task in ("text-classification", "token-classification") and len(classes) < 2:
        what = "label" if task == "text-classification" else "tag"
        found = ", ".join(sorted(classes)) or "none"
        log_.error(name, f"fewer than 2 classes: every example has the same {what} ({found})",
                   column="label" if task == "text-classification" else "tags",
                   hint=f"a classifier needs examples of at least two different {what}s")


def prepare(path: Path, options: ReadOptions, out_dir: Path, *, validation_path: Path | None = None,
            max_bytes: int, tokenizer: Any = None, max_length: int = 128,
            sample_size: int = SAMPLE_SIZE) -> DatasetReport:
    """Validate ``path`` (and ``validation_path``) and write ``train.jsonl``/``validation.jsonl`` into ``out_dir``.

    Raises DataValidationError with every error found; ``tokenizer=False`` skips token statistics.
    """
    check_task(options.task)
    if not 0 <= options.validation_fraction < 1:
        raise ConfigError(f"validation fraction must be at least 0 and below 1, got {options.validation_fraction}")
    problems = ProblemLog()
    sources = [scan(p, problems, max_bytes=max_bytes) for p in [path] + ([validation_path] if validation_path else [])]
    if problems.has_errors:
        raise DataValidationError(problems.errors())
    formats = [check_format(options.task, options.format) if options.format
               else detect_format(options.task, s.path, read_head(s)) for s in sources]
    details: dict[str, Any] = {"encoding": sources[0].encoding}
    state = _Pass1()
    all_path = out_dir / "all.jsonl"
    with all_path.open("w", encoding="utf-8") as out:
        counts = [_first_pass(source, options, fmt, problems, out, state, details)
                  for source, fmt in zip(sources, formats)]
    boundary = counts[0]
    if state.classes or not problems.has_errors:
        _check_classes(options.task, state.classes, path.name, problems)
    if options.task == "token-classification":
        _check_tag_scheme(state, problems)
    if problems.has_errors:
        all_path.unlink(missing_ok=True)
        raise DataValidationError(problems.errors())
    first, conflicting, in_validation = _plan(state, options, boundary if validation_path else None)
    repeats = int((first >= 0).sum())
    details["duplicates_dropped"] = 0 if options.keep_duplicates else repeats
    if options.keep_duplicates:
        details["duplicates_kept"] = repeats
    names = [s.path.name for s in sources]
    result = _second_pass(all_path, out_dir, options, first, conflicting, in_validation, boundary, names,
                          state.lines, problems, sample_size)
    all_path.unlink()
    if not result["train"]:
        problems.error(path.name, "no training examples are left after removing duplicates and the validation part",
                       hint="upload more examples")
        raise DataValidationError(problems.errors())
    if validation_path is None and options.validation_fraction > 0 and not result["validation"]:
        problems.warning("split", path.name, "too few examples for a validation part; validation is empty",
                         hint="upload more examples or a separate validation file")
    labels: LabelStats = result["labels"]
    token_stats = _token_stats(tokenizer, options, result["sample"], max_length, problems, path.name)
    details.update(labels.details())
    if validation_path is not None:
        details["validation_format"] = formats[1]
        unseen = set(result["validation_labels"]) - set(result["train_labels"])
        if unseen:
            problems.warning("unseen label", names[1], f"labels only in the validation file: {sorted(unseen)[:20]}",
                             hint="the model cannot predict labels it never saw in training")
    return DatasetReport(
        task=options.task, format=formats[0], files=names, columns=details.pop("columns", {}),
        examples=result["train"] + result["validation"], train=result["train"], validation=result["validation"],
        labels=labels.label_counts(), token_stats=token_stats, details=details, warnings=problems.warnings(),
        warning_counts=problems.warning_counts(), preview=result["preview"])


def _second_pass(all_path: Path, out_dir: Path, options: ReadOptions, first: np.ndarray, conflicting: np.ndarray,
                 in_validation: np.ndarray, boundary: int, names: list[str], lines: array.array, problems: ProblemLog,
                 sample_size: int) -> dict[str, Any]:
    labels = LabelStats(options.task)
    originals = {int(k): "" for k in np.unique(first[first >= 0])}
    train_labels: set[str] = set()
    validation_labels: set[str] = set()
    sample = Reservoir(sample_size, options.seed)
    preview: list[dict[str, Any]] = []
    counts = {"train": 0, "validation": 0}
    with all_path.open(encoding="utf-8") as src, (out_dir / "train.jsonl").open("w", encoding="utf-8") as train, \
            (out_dir / "validation.jsonl").open("w", encoding="utf-8") as valid:
        for i, raw in enumerate(src):
            data = json.loads(raw)
            if i in originals:
                originals[i] = str(data.get("id", ""))
            if first[i] >= 0:
                _duplicate_warning(problems, i, int(first[i]), bool(conflicting[i]), boundary, names, lines, data,
                                   originals, kept=options.keep_duplicates)
                if not options.keep_duplicates:
                    continue
            part = "validation" if in_validation[i] else "train"
            (valid if part == "validation" else train).write(raw)
            counts[part] += 1
            labels.add(data)
            (validation_labels if part == "validation" else train_labels).update(_classes_of(options.task, data))
            sample.add(data)
            if len(preview) < PREVIEW_ROWS:
                preview.append(_shorten(data))
    return {**counts, "labels": labels, "sample": sample, "preview": preview,
            "train_labels": train_labels, "validation_labels": validation_labels}


def _duplicate_warning(problems: ProblemLog, i: int, original: int, conflict: bool, boundary: int, names: list[str],
                       lines: array.array, data: dict[str, Any], originals: dict[int, str], *,
                       kept: bool = False) -> None:
    """One warning per repeated example: dropped (training data, the first copy kept) or ``kept`` (a test set)."""
    file_of = lambda k: names[0] if k < boundary or len(names) == 1 else names[1]  # noqa: E731
    line = lines[i] if lines[i] >= 0 else None
    where = (f"line {lines[original]}" if lines[original] >= 0
             else f"question {originals[original]}" if originals.get(original) else "an earlier example")
    if file_of(original) != file_of(i):
        where += f" of {file_of(original)}"
    fate = "kept and scored: a test set is scored as given" if kept else "dropped"
    if conflict:
        problems.warning("conflicting duplicate", file_of(i), f"same text as {where} but another label; {fate}",
                         line=line, column="label",
                         hint="decide on one label for this text" + ("" if kept else " (kept: the first copy)"))
        return
    problems.warning("duplicate", file_of(i), f"duplicate of {where}; {fate}", line=line,
                     record=data.get("id") if line is None else None,
                     hint="remove repeated examples" + ("" if kept else " (kept: the first copy)"))


def _shorten(data: dict[str, Any], limit: int = 300) -> dict[str, Any]:
    return {k: (v[:limit] + "…" if isinstance(v, str) and len(v) > limit else v) for k, v in data.items()}


def _token_stats(tokenizer: Any, options: ReadOptions, sample: Reservoir, max_length: int, problems: ProblemLog,
                 name: str) -> dict[str, Any] | None:
    if tokenizer is False:
        return None
    try:
        loaded, label = load_tokenizer(tokenizer)
        lengths = token_lengths(loaded, options.task, sample.items)
    except Exception as exc:  # noqa: BLE001 - statistics are optional; an import must not fail for them
        log.warning("token statistics skipped: %s", exc)
        problems.warning("tokenizer", name, f"token lengths were not computed: the tokenizer {tokenizer!r} could "
                         f"not be loaded offline ({type(exc).__name__})",
                         hint="choose a local tokenizer or model folder")
        return None
    return length_summary(lengths, max_length, tokenizer=label, sampled=sample.seen > len(sample.items),
                          population=sample.seen, windows=options.task == "text-classification")
