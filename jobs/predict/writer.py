"""Chunked, resumable output of a prediction job, joined into one file at the end.

Chunk ``k`` holds the output rows ``[k * chunk_rows, (k + 1) * chunk_rows)`` of the input, as JSON Lines in
``<output_dir>/chunks/chunk-<k>.jsonl``. It is written under a temporary name and renamed once complete, so
a chunk file that exists is whole. ``chunks/manifest.json`` says which input and chunk size the chunks
belong to: a job that restarts (its worker was killed) keeps the chunks of the same input and continues
after the last one; chunks of anything else are removed. When every chunk is there they are joined in
order into ``predictions.<csv|jsonl|parquet>`` (and ``predictions.conll`` for a CoNLL input), each written
under a temporary name and renamed: a half-written output is never at its final name. Then the chunk files
go; the manifest stays, holding the totals, so a job killed after the rename finishes without redoing work.

The output's columns are the input's own, then the prediction's (``Layout``); an input column whose name a
prediction column takes is kept as ``<name>_input``.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from jobs.predict.inputs import QA, TEXT, TOKENS, InputRow
from storage.cells import escape_cell

log = logging.getLogger(__name__)

CHUNK_DIR, MANIFEST = "chunks", "manifest.json"
OUTPUT_STEM = "predictions"
CONLL_OUTPUT = "predictions.conll"
PARQUET_ROWS_PER_GROUP = 8192
_CHUNK = re.compile(r"^chunk-(\d+)\.jsonl$")


# ---------------------------------------------------------------- columns

@dataclasses.dataclass(frozen=True)
class Layout:
    """The output's columns for one task, and how a prediction becomes an output row."""

    task: str
    input_columns: tuple[str, ...]
    labels: tuple[str, ...] = ()  # classification: one ``prob_<class>`` column each
    pre_split: bool = False  # token classification of pre-split tokens (CoNLL): tags per token, a CoNLL file back

    @property
    def prediction_columns(self) -> tuple[str, ...]:
        if self.task == TEXT:
            return ("predicted_label", "score", *(f"prob_{name}" for name in self.labels), "truncated")
        if self.task == TOKENS:
            return ("entities", *(("predicted_tags",) if self.pre_split else ()), "truncated")
        if self.task == QA:
            return ("answer", "score", "start", "end", "no_answer", "truncated")
        return ("fills", "pseudo_perplexity", "truncated")

    @property
    def renamed(self) -> dict[str, str]:
        """The output name of each input column (``<name>_input`` where a prediction column has the name)."""
        taken = set(self.prediction_columns)
        out = {}
        for name in self.input_columns:
            new = name
            while new in taken:
                new += "_input"
            taken.add(new)
            out[name] = new
        return out

    @property
    def columns(self) -> list[str]:
        return [*self.renamed.values(), *self.prediction_columns]

    def kind(self, column: str) -> str:
        """The value type of a column in a typed format (Parquet): str, float, int, bool or json."""
        if column not in self.prediction_columns:
            return "str"
        if column in ("score", "pseudo_perplexity") or column.startswith("prob_"):
            return "float"
        if column in ("start", "end"):
            return "int"
        if column in ("truncated", "no_answer"):
            return "bool"
        if column in ("entities", "predicted_tags", "fills"):
            return "json"
        return "str"

    def row(self, row: InputRow, result: Mapping[str, Any]) -> dict[str, Any]:
        """The output row of an input row and its prediction (see ``jobs.predict.job`` for the result's keys)."""
        out = {self.renamed[k]: v for k, v in row.columns.items()}
        out.update(self._prediction(result))
        out["truncated"] = bool(result.get("truncated", False))
        return out

    def _prediction(self, result: Mapping[str, Any]) -> dict[str, Any]:
        if self.task == TEXT:
            label = result["label"]
            scores = result.get("scores") or {}
            return {"predicted_label": "|".join(label) if isinstance(label, (list, tuple)) else label,
                    "score": _number(result.get("score")),
                    **{f"prob_{name}": _number(scores.get(name)) for name in self.labels}}
        if self.task == TOKENS:
            out = {"entities": [{k: e[k] for k in ("text", "label", "start", "end", "score")}
                                for e in result.get("entities", ())]}
            if self.pre_split:
                out["predicted_tags"] = list(result.get("tags", ()))
            return out
        if self.task == QA:
            abstains = bool(result.get("no_answer", False))
            return {"answer": "" if abstains else result.get("answer", ""), "score": _number(result.get("score")),
                    "start": None if abstains else result.get("start"), "end": None if abstains else result.get("end"),
                    "no_answer": abstains}
        return {"fills": result.get("fills"), "pseudo_perplexity": _number(result.get("pseudo_perplexity"))}


def _number(value: Any) -> Optional[float]:
    return None if value is None else round(float(value), 6)


# ---------------------------------------------------------------- chunks

class ChunkStore:
    """The completed chunks of one job's output, in ``folder``."""

    def __init__(self, folder: Path, fingerprint: Mapping[str, Any]):
        self.folder, self.fingerprint = Path(folder), dict(fingerprint)

    def _manifest(self) -> dict[str, Any]:
        try:
            return json.loads((self.folder / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def _write_manifest(self, value: Mapping[str, Any]) -> None:
        _atomic_text(self.folder / MANIFEST, json.dumps(value, indent=1))

    def chunk_path(self, k: int) -> Path:
        return self.folder / f"chunk-{k:06d}.jsonl"

    def joined(self) -> Optional[dict[str, Any]]:
        """The totals of a join that finished (the output is at its final name), else None."""
        manifest = self._manifest()
        if manifest.get("fingerprint") == self.fingerprint and manifest.get("joined"):
            return manifest["joined"]
        return None

    def resume(self) -> int:
        """How many chunks are complete, from chunk 0 on without a gap; anything else in the folder is removed."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._manifest().get("fingerprint") != self.fingerprint:
            if any(self.folder.iterdir()):
                log.warning("the chunks in %s belong to another input or chunk size; starting over", self.folder)
            for path in self.folder.iterdir():
                path.unlink()
            self._write_manifest({"fingerprint": self.fingerprint})
        found = {int(m.group(1)) for p in self.folder.iterdir() if (m := _CHUNK.match(p.name))}
        done = 0
        while done in found:
            done += 1
        for path in self.folder.iterdir():
            match = _CHUNK.match(path.name)
            if (match is None and path.name != MANIFEST) or (match and int(match.group(1)) >= done):
                path.unlink()  # a temporary file of a chunk cut short, or a chunk after a gap
        if done:
            log.info("resuming after %d completed chunk(s)", done)
        return done

    def write(self, k: int, rows: Iterable[Mapping[str, Any]]) -> None:
        """Chunk ``k``: all its rows, or (killed on the way) nothing under its name."""
        _atomic_text(self.chunk_path(k), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))

    def rows(self, chunks: int) -> Iterator[dict[str, Any]]:
        for k in range(chunks):
            with self.chunk_path(k).open(encoding="utf-8") as handle:
                for line in handle:
                    yield json.loads(line)

    def finish(self, totals: Mapping[str, Any], chunks: int) -> None:
        """Record the totals, then remove the chunk files (the output is already at its final name)."""
        self._write_manifest({"fingerprint": self.fingerprint, "joined": dict(totals)})
        for k in range(chunks):
            self.chunk_path(k).unlink(missing_ok=True)


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------- the joined output

def output_path(output_dir: Path, fmt: str) -> Path:
    return Path(output_dir) / f"{OUTPUT_STEM}.{fmt}"


def join(store: ChunkStore, chunks: int, layout: Layout, fmt: str, output_dir: Path) -> dict[str, Any]:
    """Write the output file(s) from the chunks, each renamed into place when whole; returns the totals."""
    final = output_path(output_dir, fmt)
    counts = {"rows": 0, "truncated": 0}

    def counted(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for row in rows:
            counts["rows"] += 1
            counts["truncated"] += bool(row.get("truncated"))
            yield row

    outputs: dict[str, str] = {}
    if layout.pre_split:
        conll = Path(output_dir) / CONLL_OUTPUT
        _atomic_write(conll, lambda tmp: write_conll(tmp, store.rows(chunks), layout))
        outputs["conll"] = str(conll)
    writer = {"csv": write_csv, "jsonl": write_jsonl, "parquet": write_parquet}[fmt]
    _atomic_write(final, lambda tmp: writer(tmp, counted(store.rows(chunks)), layout))
    return {**counts, "output": str(final), "outputs": outputs}


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.partial")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _cell(value: Any) -> Any:
    """A value as a CSV cell: lists and objects as JSON, booleans as true/false, nothing as empty; a text a
    spreadsheet would run as a formula behind a ``'`` (``storage.cells``), numbers as they are."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return escape_cell(value)


def write_csv(path: Path, rows: Iterable[Mapping[str, Any]], layout: Layout) -> None:
    """The header (input column names are the user's text too) and the rows, every text cell escaped."""
    columns = layout.columns
    with path.open("w", encoding="utf-8", newline="") as handle:
        out = csv.writer(handle)
        out.writerow([escape_cell(c) for c in columns])
        for row in rows:
            out.writerow([_cell(row.get(c)) for c in columns])
        handle.flush()
        os.fsync(handle.fileno())


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]], layout: Layout) -> None:
    columns = layout.columns
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps({c: row.get(c) for c in columns}, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _typed(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "json" or (kind == "str" and not isinstance(value, str)):
        return json.dumps(value, ensure_ascii=False)
    return value


def write_parquet(path: Path, rows: Iterable[Mapping[str, Any]], layout: Layout) -> None:
    """Typed columns (scores as doubles, offsets as integers); lists and objects as JSON text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"str": pa.string(), "float": pa.float64(), "int": pa.int64(), "bool": pa.bool_(), "json": pa.string()}
    columns = layout.columns
    schema = pa.schema([(c, types[layout.kind(c)]) for c in columns])
    with pq.ParquetWriter(str(path), schema) as out:
        for group in _groups(rows, PARQUET_ROWS_PER_GROUP):
            out.write_table(pa.table({c: [_typed(r.get(c), layout.kind(c)) for r in group] for c in columns},
                                     schema=schema))


def _groups(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    group: list[Any] = []
    for row in rows:
        group.append(row)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def write_conll(path: Path, rows: Iterable[Mapping[str, Any]], layout: Layout) -> None:
    """TOKEN<TAB>PREDICTED TAG per line, a blank line after each sentence: readable by the Data tab again."""
    tokens_column = layout.renamed.get("tokens", "tokens")
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            for token, tag in zip(row.get(tokens_column) or (), row.get("predicted_tags") or ()):
                handle.write(f"{token}\t{tag}\n")
            handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())


def fingerprint(source_sha256: str, size: int, rows: int, chunk_rows: int, columns: Sequence[str]) -> dict[str, Any]:
    """What a chunk's rows depend on besides the model: the input, the chunk size and the output's columns."""
    return {"input_sha256": source_sha256, "input_size": size, "rows": rows, "chunk_rows": chunk_rows,
            "columns": list(columns)}
