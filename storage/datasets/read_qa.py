"""Extractive question answering from SQuAD v1.1/v2.0 JSON or flat JSON Lines.

SQuAD is one JSON document, so it is parsed with ``json.load`` (the upload size limit bounds it);
flat JSON Lines files stream line by line.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Iterator, TextIO

from storage.datasets.problems import ProblemLog
from storage.datasets.records import Record, iter_json_lines


# SQuAD is one JSON document; parsing it takes several times its size in memory (the official
# train set is 40 MB). Larger QA data should come as JSON Lines.
SQUAD_MAX_BYTES = 500 * 10**6


def _group(context: str) -> str:
    return hashlib.blake2b(context.encode("utf-8"), digest_size=8).hexdigest()


def normalize_answers(raw: Any) -> tuple[list[str], list[int]] | None:
    """Answers as parallel lists; accepts SQuAD's list of objects or the ``{"text": [], "answer_start": []}`` form."""
    if raw is None:
        return [], []
    if isinstance(raw, dict) and isinstance(raw.get("text"), list) and isinstance(raw.get("answer_start"), list):
        if len(raw["text"]) != len(raw["answer_start"]):
            return None
        pairs = list(zip(raw["text"], raw["answer_start"]))
    elif isinstance(raw, list) and all(isinstance(a, dict) and "text" in a and "answer_start" in a for a in raw):
        pairs = [(a["text"], a["answer_start"]) for a in raw]
    else:
        return None
    if not all(isinstance(t, str) and isinstance(s, int) and not isinstance(s, bool) for t, s in pairs):
        return None
    return [t for t, _ in pairs], [s for _, s in pairs]


def _question(name: str, log: ProblemLog, line: int | None, qid: str, title: str, context: str, question: Any,
              raw_answers: Any, impossible: bool) -> Record | None:
    if not isinstance(question, str) or not question.strip():
        log.error(name, "the question is missing or blank", line=line, record=qid, column="question",
                  hint="give every entry a non-empty question")
        return None
    answers = ([], []) if impossible else normalize_answers(raw_answers)
    if answers is None:
        log.error(name, "answers are malformed", line=line, record=qid, column="answers",
                  hint='write "answers": [{"text": "...", "answer_start": 12}] or '
                       '{"text": ["..."], "answer_start": [12]}')
        return None
    texts, starts = answers
    ok = True
    for text, start in zip(texts, starts):
        if context[start:start + len(text)] != text:
            found = context.find(text)
            hint = (f"the text occurs at answer_start={found}" if found >= 0
                    else "the answer text does not occur in the context; answers must be spans of the context")
            log.error(name, f"question {qid}: answer_start {start} does not match the answer text {text!r} "
                      f"(the context there reads {context[start:start + len(text)]!r})", line=line, record=qid,
                      column="answer_start", hint=hint)
            ok = False
    if not ok:
        return None
    if not texts and not impossible:
        log.warning("no answer", name, f"question {qid} has no answer; it is treated as unanswerable (SQuAD v2)",
                    line=line, record=qid, hint='mark unanswerable questions with "is_impossible": true')
    data = {"id": qid, "title": title, "context": context, "question": question,
            "answers": {"text": texts, "answer_start": starts}}
    return Record(line, data, _group(context), context + "\x00" + question, qid)


def read_squad(stream: TextIO, name: str, log: ProblemLog, size: int = 0) -> Iterator[Record]:
    """Questions of a SQuAD file in document order; problems name the question id."""
    if size > SQUAD_MAX_BYTES:
        log.error(name, f"this SQuAD file is {size / 1e6:.0f} MB; SQuAD JSON is read whole into memory and is "
                  f"limited to {SQUAD_MAX_BYTES / 1e6:.0f} MB",
                  hint="convert it to JSON Lines, one {\"context\", \"question\", \"answers\"} per line, "
                       "which is read as a stream")
        return
    try:
        doc = json.load(stream)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        log.error(name, f"broken JSON on line {line}: {getattr(exc, 'msg', exc)}", line=line,
                  hint="check the file with a JSON validator; SQuAD files are one JSON document")
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        log.error(name, 'this is not a SQuAD file: expected {"version": ..., "data": [...]}',
                  hint="use SQuAD JSON, or JSON Lines with context, question and answers on each line")
        return
    seen: set[str] = set()
    count = 0
    for a, article in enumerate(doc["data"]):
        title = str(article.get("title", "")) if isinstance(article, dict) else ""
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            log.error(name, f"article {a + 1} has no 'paragraphs' list", record=f"article {a + 1}",
                      hint='each article needs "paragraphs": [{"context": ..., "qas": [...]}]')
            continue
        for p, para in enumerate(paragraphs):
            context = para.get("context") if isinstance(para, dict) else None
            qas = para.get("qas") if isinstance(para, dict) else None
            where = f"article {a + 1} paragraph {p + 1}"
            if not isinstance(context, str) or not isinstance(qas, list):
                log.error(name, f"{where} needs a 'context' string and a 'qas' list", record=where,
                          hint='write {"context": "...", "qas": [...]}')
                continue
            for q, qa in enumerate(qas):
                if not isinstance(qa, dict):
                    log.error(name, f"{where}: entry {q + 1} of 'qas' is not an object", record=where)
                    continue
                qid = str(qa.get("id") or f"{a + 1}-{p + 1}-{q + 1}")
                if qid in seen:
                    log.warning("duplicate id", name, f"question id {qid} appears more than once", record=qid,
                                hint="give every question a unique id")
                seen.add(qid)
                record = _question(name, log, None, qid, title, context, qa.get("question"), qa.get("answers"),
                                   bool(qa.get("is_impossible", False)))
                if record is not None:
                    count += 1
                    yield record
    if count == 0 and not log.has_errors:
        log.error(name, "the file contains no questions", hint="add paragraphs with qas")


def read_jsonl(stream: TextIO, name: str, log: ProblemLog) -> Iterator[Record]:
    """``{"id", "title", "context", "question", "answers"}`` per line (id and title optional)."""
    seen: set[str] = set()
    rows = 0
    for line, obj in iter_json_lines(stream, name, log):
        rows += 1
        qid = str(obj.get("id") or f"line-{line}")
        context = obj.get("context")
        if not isinstance(context, str) or not context.strip():
            log.error(name, "missing column: 'context' is missing or blank", line=line, record=qid, column="context",
                      hint='each line needs "context", "question" and "answers"')
            continue
        if qid in seen:
            log.warning("duplicate id", name, f"question id {qid} appears more than once", line=line, record=qid,
                        hint="give every question a unique id")
        seen.add(qid)
        record = _question(name, log, line, qid, str(obj.get("title", "")), context, obj.get("question"),
                           obj.get("answers"), bool(obj.get("is_impossible", False)))
        if record is not None:
            yield record
    if rows == 0 and not log.has_errors:
        log.error(name, "the file contains no questions", hint='write one {"context", "question", "answers"} per line')
