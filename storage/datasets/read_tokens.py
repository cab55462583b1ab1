"""Token classification from CoNLL (token first, tag last, blank line between sentences) or JSON Lines."""
from __future__ import annotations

import collections
import difflib
import re
from typing import Iterator, Mapping, Sequence, TextIO

from storage.datasets.columns import ColumnMapping
from storage.datasets.problems import ProblemLog
from storage.datasets.records import Record, as_label, iter_json_lines

_PREFIXED = re.compile(r"^([BIES])-(.+)$")
TOKEN_KEYS = ("tokens", "words", "token", "sentence", "text")
TAG_KEYS = ("tags", "ner_tags", "labels", "label", "pos_tags", "ner", "tag", "upos")


def _list_key(obj: dict, given: str | None, candidates: tuple[str, ...]) -> str | None:
    """The key the user named, else the first candidate whose value is a list (a raw ``text`` string is skipped)."""
    if given is not None:
        return given if given in obj else None
    lowered = {k.lower(): k for k in obj}
    return next((lowered[c] for c in candidates if c in lowered and isinstance(obj[lowered[c]], list)), None)


def repair_iob(tags: Sequence[str]) -> tuple[list[str], list[int]]:
    """Turn an ``I-X`` that does not continue an ``X`` entity into ``B-X``; returns (tags, repaired positions).

    Files in IOB1 or with hand-made slips start entities with ``I-``; training expects IOB2.
    """
    out = list(tags)
    fixed = []
    previous_type = None
    for i, tag in enumerate(out):
        match = _PREFIXED.match(tag)
        if match is None:
            previous_type = None
            continue
        prefix, kind = match.groups()
        if prefix == "I" and previous_type != kind:
            out[i] = f"B-{kind}"
            fixed.append(i)
        previous_type = None if prefix in ("E", "S") else kind
    return out, fixed


def scheme_slips(counts: Mapping[str, int]) -> dict[str, tuple[str, str]]:
    """Tags that look like slips in a BIO-tagged file, each with (what is wrong, how to fix it).

    A slip is a tag outside the B-/I-/E-/S- scheme (``junk``, ``LOC``), or the only tag of an entity
    type whose name is close to a type used more often (``B-LCO`` next to ``LOC``); a lone tag of a
    type unlike any other is taken as a rare entity. Files whose non-O tags are not mostly prefixed
    are not checked: a POS tag set such as Brown's has 100+ tags, many used once, and no scheme.
    """
    outside = {tag: n for tag, n in counts.items() if tag != "O"}
    prefixed = {tag: n for tag, n in outside.items() if _PREFIXED.match(tag)}
    if sum(prefixed.values()) * 2 <= sum(outside.values()):
        return {}
    types: collections.Counter[str] = collections.Counter()
    for tag, n in prefixed.items():
        types[tag[2:]] += n
    known = sorted(kind for kind, n in types.items() if n > 1)
    slips = {}
    for tag, n in outside.items():
        kind = tag[2:] if tag in prefixed else tag
        close = difflib.get_close_matches(kind, known, n=1)
        if tag not in prefixed:
            what = f"tag {tag!r} is not O and has no B-/I- prefix like the file's other tags"
            what += "; it occurs only here, so it may be a typo" if n == 1 else f" (used {n} times, first here)"
        elif types[kind] == 1 and close:
            what = f"tag {tag!r} is the only one of entity type {kind!r} in the file; it may be a typo"
        else:
            continue
        prefix = tag[:2] if tag in prefixed else "B-"
        slips[tag] = (what, f"did you mean {prefix}{close[0]}?" if close
                      else "use O or a B-/I- tag of an entity type the file uses")
    return slips


def _sentence(name: str, line: int, tokens: list[str], tags: list[str], log: ProblemLog,
              tag_lines: Sequence[int] | None) -> Record:
    tags, fixed = repair_iob(tags)
    for i in fixed:
        where = tag_lines[i] if tag_lines else line
        log.warning("IOB", name, f"tag I-{tags[i][2:]} does not continue an entity (token {i + 1}, "
                    f"{tokens[i]!r}); changed to {tags[i]}", line=where, column="tags" if not tag_lines else None,
                    hint="start every entity with B-; I- only continues the entity before it")
    return Record(line, {"tokens": tokens, "tags": tags}, "", "\x00".join(tokens),
                  token_lines=tuple(tag_lines) if tag_lines else None)


def _column_count_error(name: str, number: int, line: str, count: int, separator: str,
                        first: tuple[int, int, str], log: ProblemLog) -> None:
    """A line with more or fewer columns than the first one: its tag would be read from the wrong column."""
    first_line, first_count, first_separator = first
    hint = ("give every line the same columns as the rest of the file"
            + ("; this file separates them with tabs, so write TOKEN<TAB>TAG (a line without a tab is split at "
               "every space)" if first_separator == "tab" else ""))
    log.error(name, f"found {count} {separator}-separated columns in {line!r}, but the first line of the file "
              f"(line {first_line}) has {first_count} {first_separator}-separated ones", line=number, hint=hint)


def read_conll(stream: TextIO, name: str, log: ProblemLog, found: dict | None = None, *,
               tags_optional: bool = False) -> Iterator[Record]:
    """CoNLL: columns split by tabs (or spaces when a line has no tab); ``-DOCSTART-`` lines are skipped.

    Every line must have as many columns as the first one: in a TOKEN<TAB>TAG file a stray
    ``Berlin B-LOC extra junk`` would otherwise be read with the tag ``junk``. With ``tags_optional``
    (a prediction job's input) a file of one token per line is read too, and its records have no ``tags``.
    """
    if found is not None:
        found["columns"] = {"tokens": "first column", "tags": "last column"}
    tokens: list[str] = []
    tags: list[str] = []
    lines: list[int] = []
    broken = False
    sentences = 0
    first: tuple[int, int, str] | None = None  # (line, columns, separator) of the first data line
    for number, raw in enumerate(stream, 1):
        line = raw.rstrip("\r\n").lstrip("\ufeff")
        if not line.strip() or line.startswith("-DOCSTART-"):
            if tokens and not broken:
                sentences += 1
                yield _untagged(_sentence(name, lines[0], tokens, tags, log, lines), first)
            tokens, tags, lines, broken = [], [], [], False
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        bare = tags_optional and len(parts) == 1 and bool(parts[0].strip())  # a token without a tag
        if not bare and (len(parts) < 2 or not parts[-1].strip() or not parts[0].strip()):
            log.error(name, f"expected a token and a tag separated by a tab, found {line!r}", line=number,
                      hint="write one token per line as TOKEN<TAB>TAG, and a blank line between sentences")
            broken = True
            continue
        separator = "tab" if "\t" in line else "space"
        if first is None:
            first = (number, len(parts), separator)
        elif len(parts) != first[1]:
            _column_count_error(name, number, line, len(parts), separator, first, log)
            broken = True
            continue
        tokens.append(parts[0].strip())
        tags.append("" if bare else parts[-1].strip())
        lines.append(number)
    if tokens and not broken:
        sentences += 1
        yield _untagged(_sentence(name, lines[0], tokens, tags, log, lines), first)
    if sentences == 0 and not log.has_errors:
        log.error(name, "the file contains no sentences", hint="write one TOKEN<TAB>TAG per line")


def _untagged(record: Record, first: tuple[int, int, str] | None) -> Record:
    """A sentence of a file with one column (tokens only, read with ``tags_optional``) has no ``tags``."""
    if first is None or first[1] > 1:
        return record
    return record._replace(data={"tokens": record.data["tokens"]})


def read_jsonl(stream: TextIO, name: str, columns: ColumnMapping | None, log: ProblemLog,
               found: dict | None = None) -> Iterator[Record]:
    """``{"tokens": [...], "tags": [...]}`` per line (also ``words``/``ner_tags``/``labels``)."""
    mapping: ColumnMapping | None = None
    rows = 0
    for line, obj in iter_json_lines(stream, name, log):
        rows += 1
        if mapping is None:
            mapping = ColumnMapping(text=_list_key(obj, columns and columns.text, TOKEN_KEYS),
                                    label=_list_key(obj, columns and columns.label, TAG_KEYS))
            if mapping.text is None or mapping.label is None:
                log.error(name, f"missing key: need a tokens list and a tags list, found {sorted(obj)}", line=line,
                          hint='write {"tokens": [...], "tags": [...]} or name the keys with --text-column '
                               "and --label-column")
                return
            if found is not None:
                found["columns"] = {"tokens": mapping.text, "tags": mapping.label}
        tokens, tags = obj.get(mapping.text), obj.get(mapping.label)
        if not isinstance(tokens, list) or not isinstance(tags, list):
            log.error(name, f"{mapping.text!r} and {mapping.label!r} must both be lists", line=line,
                      column=mapping.text if not isinstance(tokens, list) else mapping.label,
                      hint='write {"tokens": ["New", "York"], "tags": ["B-LOC", "I-LOC"]}')
            continue
        if len(tokens) != len(tags):
            log.error(name, f"tokens and tags have different lengths ({len(tokens)} tokens, {len(tags)} tags)",
                      line=line, column=mapping.label, hint="give exactly one tag per token")
            continue
        if not tokens:
            log.warning("empty sentence", name, "empty sentence; skipped", line=line)
            continue
        yield _sentence(name, line, [str(t) for t in tokens], [as_label(t) for t in tags], log, None)
    if rows == 0 and not log.has_errors:
        log.error(name, "the file contains no sentences", hint='write one {"tokens": [...], "tags": [...]} per line')
