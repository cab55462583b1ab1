"""A labelling project's embedding cache: ``embeddings.npy`` (float32, one L2-normalised row per item position)
and ``embedded.json`` (``{"rows": n, "model": path, "dim": d}``) in the project's folder.

``embedded.json`` is the truth: rows past its ``rows`` are not embedded, whatever the array holds. Every write
goes to a temporary file first and is moved into place with ``os.replace``, the array before the JSON, so a
process killed at any moment leaves the previous cache or the new one, never a torn file. Pure numpy.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

import numpy as np

EMBEDDINGS, EMBEDDED = "embeddings.npy", "embedded.json"
# Rows copied at a time when an append rewrites the array: memory stays bounded whatever the pool's size.
COPY_ROWS = 8192


def normalise(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as float32 rows of length 1 (a zero row stays zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class EmbeddingCache:
    """Read and append the cached embeddings of the project whose folder is ``folder``."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.array_path = self.folder / EMBEDDINGS
        self.meta_path = self.folder / EMBEDDED

    def meta(self) -> dict:
        """``embedded.json``, or ``{"rows": 0}`` when nothing is cached (or the file is unreadable)."""
        try:
            value = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"rows": 0, "model": None, "dim": None}
        return value if isinstance(value, dict) and isinstance(value.get("rows"), int) else {"rows": 0}

    def rows(self, model: Optional[str] = None) -> int:
        """How many positions (0..rows-1) are embedded; 0 when the cache was made by another model than ``model``
        or its array is shorter than its JSON says (so it is rebuilt, never read past its end)."""
        meta = self.meta()
        if model is not None and meta.get("model") not in (None, model):
            return 0
        rows = int(meta.get("rows") or 0)
        if rows and self._array_rows() < rows:
            return 0
        return rows

    def _array_rows(self) -> int:
        try:
            return int(np.load(self.array_path, mmap_mode="r").shape[0])
        except (OSError, ValueError):
            return 0

    def load(self, rows: Optional[int] = None) -> np.ndarray:
        """The first ``rows`` embeddings (all the cached ones by default), read-only and memory-mapped."""
        rows = self.rows() if rows is None else rows
        if rows == 0:
            return np.zeros((0, int(self.meta().get("dim") or 0)), dtype=np.float32)
        return np.load(self.array_path, mmap_mode="r")[:rows]

    def append(self, start: int, vectors: np.ndarray, model: str) -> int:
        """Write ``vectors`` (normalised here) as rows ``start``.. and return the new row count.

        Rows past ``start`` in the old array (a batch whose JSON was never written) are dropped. The new array is
        built beside the old one, copied in blocks, then moved over it; the JSON follows."""
        vectors = normalise(vectors)
        kept = min(start, self.rows(model))
        if kept != start:
            raise ValueError(f"cannot append at row {start}: the cache holds {kept} rows")
        dim = vectors.shape[1] if vectors.size else int(self.meta().get("dim") or 0)
        total = start + len(vectors)
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.array_path.with_name(EMBEDDINGS + ".tmp")
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(total, dim))
        if start:
            old = np.load(self.array_path, mmap_mode="r")
            if old.shape[1] != dim:
                raise ValueError(f"the cache holds {old.shape[1]}-dimensional rows, not {dim}")
            for begin in range(0, start, COPY_ROWS):
                out[begin:min(start, begin + COPY_ROWS)] = old[begin:min(start, begin + COPY_ROWS)]
            del old
        out[start:] = vectors
        out.flush()
        del out
        _fsync(tmp)
        os.replace(tmp, self.array_path)
        self._write_meta({"rows": total, "model": model, "dim": dim})
        return total

    def reset(self) -> None:
        """Forget the cache (another model embeds the pool from the start)."""
        self._write_meta({"rows": 0, "model": None, "dim": None})

    def _write_meta(self, meta: dict) -> None:
        tmp = self.meta_path.with_name(EMBEDDED + ".tmp")
        tmp.write_text(json.dumps(meta), encoding="utf-8")
        _fsync(tmp)
        os.replace(tmp, self.meta_path)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_array(path: Path, array: np.ndarray) -> None:
    """``np.save`` through a temporary file and ``os.replace`` (a kill leaves the old file or the new one)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        np.save(handle, array)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def load_array(path: Path) -> Optional[np.ndarray]:
    """What ``save_array`` wrote, or None when there is none (or it cannot be read)."""
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
