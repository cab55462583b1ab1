"""The content-addressed dataset folders under ``<home>/datasets``.

A dataset is prepared in a hidden staging folder and renamed into ``<id>/`` in one step, so a
reader never sees half a dataset and a failed import leaves nothing behind.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator

STAGING_PREFIX = ".staging-"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def content_address(file_hashes: list[str], options: dict[str, Any]) -> str:
    """sha256 over the uploaded bytes and the options that shape the result: same input, same dataset."""
    blob = json.dumps({"files": file_hashes, "options": options}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def dataset_id(content_hash: str) -> str:
    return "ds-" + content_hash[:16]


class DatasetStore:
    """Folders of stored datasets: ``train.jsonl``, ``validation.jsonl``, ``meta.json`` and ``source/``."""

    def __init__(self, root: Path):
        self.root = root

    def path(self, id_: str) -> Path:
        return self.root / id_

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A fresh folder on the same file system as the store; removed unless ``commit`` moved it."""
        self.root.mkdir(parents=True, exist_ok=True)
        folder = self.root / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def commit(self, staged: Path, id_: str) -> Path:
        """Move a staged folder to its final place; a leftover folder without a database row is replaced."""
        final = self.path(id_)
        if final.exists():
            shutil.rmtree(final)
        os.replace(staged, final)
        return final

    def remove(self, id_: str) -> None:
        shutil.rmtree(self.path(id_), ignore_errors=True)
