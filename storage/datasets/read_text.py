"""Plain text for masked-language-model training: one document per line, or blank-line separated documents."""
from __future__ import annotations

import re
from typing import Iterator, TextIO

from storage.datasets.problems import ProblemLog
from storage.datasets.records import Record

_BLANK_BETWEEN = re.compile(r"\S[^\n]*\n[ \t\r]*\n+[ \t\r]*\S")


def detect_layout(head: str) -> str:
    """``blocks`` when a blank line separates text in the head of the file, else ``lines``."""
    return "blocks" if _BLANK_BETWEEN.search(head.replace("\r\n", "\n")) else "lines"


def read_text(stream: TextIO, name: str, log: ProblemLog, layout: str) -> Iterator[Record]:
    """Documents; in ``blocks`` layout the lines of a document are kept, joined by newlines (sentence per line)."""
    documents = 0
    block: list[str] = []
    start = 0
    for number, raw in enumerate(stream, 1):
        line = raw.strip().lstrip("\ufeff").strip()
        if layout == "lines":
            if line:
                documents += 1
                yield Record(number, {"text": line}, "", line)
            continue
        if line:
            if not block:
                start = number
            block.append(line)
        elif block:
            documents += 1
            text = "\n".join(block)
            yield Record(start, {"text": text}, "", text)
            block = []
    if block:
        documents += 1
        text = "\n".join(block)
        yield Record(start, {"text": text}, "", text)
    if documents == 0:
        log.error(name, "the file contains no text", hint="write one document per line, or separate documents "
                  "with a blank line")
