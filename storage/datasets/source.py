"""One streaming pass over the raw bytes of an upload: size limit, sha256, binary content, encoding.

The text readers then open the file with the encoding found here. Nothing here holds more than
one chunk of the file in memory.
"""
from __future__ import annotations

import codecs
import dataclasses
import hashlib
import io
from pathlib import Path
from typing import TextIO

from storage.datasets.problems import ProblemLog

CHUNK = 1 << 20
# Signatures of files people upload by mistake instead of exporting text.
MAGIC = {
    b"PK\x03\x04": "a ZIP archive (an .xlsx/.docx/.zip file)",
    b"\xd0\xcf\x11\xe0": "an old Microsoft Office file (.xls/.doc)",
    b"%PDF": "a PDF document",
    b"\x1f\x8b": "a gzip archive",
    b"\x89PNG": "a PNG image",
    b"\xff\xd8\xff": "a JPEG image",
    b"GIF8": "a GIF image",
    b"SQLite format 3": "an SQLite database",
    b"PAR1": "a Parquet file",
    b"ARROW1": "an Arrow file",
}
BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
EXPORT_HINT = "export the data as UTF-8 text (CSV, TSV, JSON Lines, CoNLL or plain text) and upload that file"


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """What the byte pass learned; ``encoding`` is None when the file cannot be read as text."""

    path: Path
    size: int
    sha256: str
    encoding: str | None


def scan(path: Path, log: ProblemLog, *, max_bytes: int) -> SourceInfo:
    """Hash ``path`` and decide how to decode it, reporting binary content and non-UTF-8 text."""
    name = path.name
    size = path.stat().st_size
    if size > max_bytes:
        log.error(name, f"the file is {size / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.0f} MB",
                  hint="split the file, or raise the limit with WORKBENCH_MAX_UPLOAD_MB")
        return SourceInfo(path, size, "", None)
    if size == 0:
        log.error(name, "the file is empty", hint="upload a file that contains examples")
        return SourceInfo(path, size, "", None)
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        head = fh.read(CHUNK)
        bom_encoding = next((enc for bom, enc in BOMS if head.startswith(bom)), None)
        kind = next((what for magic, what in MAGIC.items() if head.startswith(magic)), None)
        if kind is None and bom_encoding is None and b"\x00" in head:
            kind = "binary data (it contains NUL bytes)"
        if kind:
            log.error(name, f"this is not a text file: it looks like {kind}", hint=EXPORT_HINT)
            return SourceInfo(path, size, "", None)
        utf8 = codecs.getincrementaldecoder(bom_encoding or "utf-8")()
        bad: tuple[int, int] | None = None  # (line, byte) of the first undecodable byte
        lines_before = 0
        chunk = head
        while chunk:
            digest.update(chunk)
            if bad is None:
                try:
                    utf8.decode(chunk)
                except UnicodeDecodeError as exc:
                    bad = (lines_before + chunk.count(b"\n", 0, exc.start) + 1, chunk[exc.start])
                lines_before += chunk.count(b"\n")
            chunk = fh.read(CHUNK)
        if bad is None:
            try:
                utf8.decode(b"", final=True)
            except UnicodeDecodeError:
                bad = (lines_before + 1, 0)
    encoding = bom_encoding or "utf-8"
    if bad is not None:
        if bom_encoding:
            log.error(name, f"the file starts with a {bom_encoding} byte-order mark but line {bad[0]} is not "
                      f"valid {bom_encoding}", line=bad[0], hint="save the file again as UTF-8")
            return SourceInfo(path, size, digest.hexdigest(), None)
        encoding = "cp1252" if _decodes(path, "cp1252") else "latin-1"
        log.warning("encoding", name, f"the file is not UTF-8 (byte 0x{bad[1]:02x} on line {bad[0]}); "
                    f"it was read as {encoding}", line=bad[0],
                    hint="if accented letters or quotes look wrong in the preview, save the file as UTF-8 "
                         "and upload it again")
    elif bom_encoding and bom_encoding != "utf-8-sig":
        log.warning("encoding", name, f"the file is {bom_encoding}, not UTF-8; it was decoded as {bom_encoding}",
                    hint="save the file as UTF-8 to avoid this warning")
    return SourceInfo(path, size, digest.hexdigest(), encoding)


def _decodes(path: Path, encoding: str) -> bool:
    decoder = codecs.getincrementaldecoder(encoding)()
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def open_text(info: SourceInfo) -> TextIO:
    """A text stream over the file; ``newline=""`` keeps quoted newlines for the csv module."""
    assert info.encoding is not None, "open_text needs a file that scan() could decode"
    return io.open(info.path, "r", encoding=info.encoding, newline="")


def read_head(info: SourceInfo, chars: int = 65536) -> str:
    """The start of the file as text, for format and column detection."""
    with open_text(info) as fh:
        return fh.read(chars)
