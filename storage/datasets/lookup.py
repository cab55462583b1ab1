"""Finding a stored dataset: its database row by id, id prefix or name, and its normalized files.

Both the service layer (the UI and the CLI) and the training process (``jobs.process.run_job``) reach a
dataset's files through here, so a run reads exactly what ``workbench data show`` lists.
"""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.db import Database
from storage.errors import NotFound
from storage.models import Dataset


def find_dataset(session: Session, id_or_name: str) -> Dataset:
    """The row of a dataset by id, unique id prefix or name (the newest of that name); NotFound otherwise."""
    row = session.get(Dataset, id_or_name)
    if row is None:
        row = session.scalars(select(Dataset).where(Dataset.name == id_or_name)
                              .order_by(Dataset.created_at.desc())).first()
    if row is None:
        matches = session.scalars(select(Dataset).where(Dataset.id.startswith(id_or_name))).all()
        if len(matches) == 1:
            row = matches[0]
    if row is None:
        raise NotFound(f"no dataset {id_or_name!r}; `workbench data list` shows the stored datasets")
    return row


def dataset_files(db: Database, id_or_name: str) -> tuple[Path, Path | None]:
    """(train.jsonl, validation.jsonl) of a stored dataset, in the normalized format the trainer reads.

    The validation path is None when the dataset has no validation examples (fraction 0).
    """
    with db.session() as session:
        row = find_dataset(session, id_or_name)
        id_, folder, has_validation = row.id, Path(row.path), bool(row.num_validation)
    train, validation = folder / "train.jsonl", folder / "validation.jsonl"
    if not train.exists():
        raise NotFound(f"the files of dataset {id_} are missing from {folder}; import the file again")
    return train, (validation if has_validation else None)
