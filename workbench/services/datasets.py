"""Datasets as the UI and the CLI see them: inspect a file, import it, list, show and delete.

Thin on purpose: reading and validation live in ``storage.datasets``; this module adds the
database row, the content address and the atomic move into the store. No gradio here.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from storage.context import Workbench
from storage.datasets import ColumnMapping, DatasetReport, DatasetStore, ReadOptions, prepare
from storage.datasets.formats import check_task
from storage.datasets.lookup import dataset_files as storage_dataset_files, find_dataset
from storage.datasets.stats import load_tokenizer
from storage.datasets.store import content_address, dataset_id, file_sha256
from jobs.queue.states import ACTIVE
from storage.models import QUEUED, Dataset, Run
from workbench.errors import ConfigError, InvalidState, NotFound

__all__ = ["DatasetReport", "DatasetSummary", "EXAMPLES", "delete_dataset", "dataset_files", "example_path",
           "get_dataset", "import_dataset", "inspect_file", "kept_sources", "list_datasets", "mark_test_set", "read_options",
           "test_set_warning", "validate_file"]

log = logging.getLogger(__name__)
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
# One ready-made file per task, for "try an example" (sources and licences in examples/README.md).
EXAMPLES: dict[str, dict[str, str]] = {
    "text-classification": {"file": "text-classification/sms_spam.csv", "title": "SMS spam (ham / spam)"},
    "token-classification": {"file": "token-classification/wnut16_ner.conll", "title": "WNUT-16 tweets NER"},
    "question-answering": {"file": "question-answering/squad_super_bowl.json", "title": "SQuAD v1.1 (Super Bowl 50)"},
    "masked-lm": {"file": "masked-lm/squad_contexts.txt", "title": "Wikipedia paragraphs (from SQuAD)"},
}
MORE_EXAMPLES: dict[str, list[str]] = {
    "text-classification": ["text-classification/trec_questions.csv"],
    "token-classification": ["token-classification/wnut16_ner_per_loc_org_misc.jsonl", "token-classification/brown_pos.conll"],
}


@dataclasses.dataclass
class DatasetSummary:
    """A stored dataset; ``reused`` is true when an identical upload was found instead of imported again."""

    id: str
    name: str
    task: str
    format: str
    examples: int
    train: int
    validation: int
    labels: dict[str, int] | None
    warnings: list[str]
    reused: bool
    path: str
    created_at: str
    stats: dict[str, Any]
    test_set: bool = False  # stored or used to evaluate runs on: not offered for training without a warning

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["labels"] is None:
            del out["labels"]
        return out

    @classmethod
    def from_row(cls, row: Dataset, *, reused: bool = False) -> "DatasetSummary":
        labels = row.labels if row.task in ("text-classification", "token-classification") else None
        return cls(id=row.id, name=row.name, task=row.task, format=row.format,
                   examples=row.num_train + row.num_validation, train=row.num_train,
                   validation=row.num_validation, labels=labels, warnings=list(row.warnings or []), reused=reused,
                   path=row.path, created_at=row.created_at.isoformat(timespec="seconds"), stats=row.stats or {},
                   test_set=bool(row.test_set))


def example_path(task: str) -> Path:
    """The bundled example file for ``task``."""
    return EXAMPLES_DIR / EXAMPLES[check_task(task)]["file"]


def _existing_file(path: str | Path, what: str = "file") -> Path:
    path = Path(path).expanduser()
    if not path.exists():
        raise NotFound(f"no such {what}: {path}")
    if not path.is_file():
        raise ConfigError(f"{path} is not a file; give the path of one data file")
    return path


def _read_options(task: str, format: str | None, columns: ColumnMapping | None, validation_fraction: float,
                  seed: int, keep_duplicates: bool = False) -> ReadOptions:
    if columns is not None and not any(dataclasses.asdict(columns).values()):
        columns = None
    return ReadOptions(task=check_task(task), format=format or None, columns=columns,
                       validation_fraction=validation_fraction, seed=seed, keep_duplicates=keep_duplicates)


def inspect_file(path: str | Path, task: str, *, format: str | None = None, columns: ColumnMapping | None = None,
                 validation_path: str | Path | None = None, validation_fraction: float = 0.1, seed: int = 13,
                 tokenizer: Any = None, max_length: int = 128, max_bytes: int = 2048 * 10**6,
                 scratch: Path | None = None) -> DatasetReport:
    """Validate a file without storing it. Raises DataValidationError listing every error.

    ``tokenizer`` is None (the packaged MiniLM), a path or name, a tokenizer object, or False (no token stats).
    """
    options = _read_options(task, format, columns, validation_fraction, seed)
    source = _existing_file(path)
    validation = _existing_file(validation_path, "validation file") if validation_path else None
    with tempfile.TemporaryDirectory(dir=scratch, prefix="inspect-") as tmp:
        return prepare(source, options, Path(tmp), validation_path=validation, max_bytes=max_bytes,
                       tokenizer=tokenizer, max_length=max_length)


def validate_file(wb: Workbench, path: str | Path, task: str, **kwargs: Any) -> DatasetReport:
    """``inspect_file`` with the size limit from the settings."""
    kwargs.setdefault("max_bytes", wb.settings.max_upload_mb * 10**6)
    return inspect_file(path, task, **kwargs)


def import_dataset(wb: Workbench, path: str | Path, task: str, *, name: str | None = None,
                   format: str | None = None, columns: ColumnMapping | None = None,
                   validation_path: str | Path | None = None, validation_fraction: float = 0.1, seed: int = 13,
                   tokenizer: Any = None, max_length: int = 128, keep_duplicates: bool = False,
                   owner_id: Optional[int] = None) -> DatasetSummary:
    """Validate and store a file. All or nothing: on any error no row and no folder remain.

    The id is derived from the bytes and the options, so importing the same thing twice returns the
    first dataset with ``reused=True``. Repeated examples are dropped (training on a copy twice weighs it
    twice, and a copy on both sides of the split leaks), unless ``keep_duplicates``: a test set is scored
    as given, so its repeats are kept and counted (``stats.details.duplicates_kept``).
    """
    options = _read_options(task, format, columns, validation_fraction, seed, keep_duplicates)
    source = _existing_file(path)
    validation = _existing_file(validation_path, "validation file") if validation_path else None
    hashes = [file_sha256(p) for p in (source, validation) if p is not None]
    content_hash = content_address(hashes, options.to_dict())
    existing = _by_hash(wb, content_hash)
    if existing is not None:
        log.info("dataset %s already holds this upload", existing.id)
        return existing
    store = DatasetStore(wb.settings.datasets_dir)
    id_ = dataset_id(content_hash)
    with store.staging() as staged:
        prepared = prepare(source, options, staged, validation_path=validation,
                           max_bytes=wb.settings.max_upload_mb * 10**6, tokenizer=tokenizer, max_length=max_length)
        _keep_sources(staged, source, validation)
        (staged / "meta.json").write_text(json.dumps({"options": options.to_dict(), **prepared.to_dict()},
                                                     indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        row = Dataset(id=id_, name=name or source.stem, task=options.task, format=prepared.format, owner_id=owner_id,
                      content_hash=content_hash, path=str(store.path(id_)), num_train=prepared.train,
                      num_validation=prepared.validation, labels=prepared.labels or {},
                      stats={"token_stats": prepared.token_stats, "details": prepared.details,
                             "warning_counts": prepared.warning_counts,
                             "columns": prepared.columns, "files": prepared.files, "preview": prepared.preview,
                             "options": options.to_dict()},
                      warnings=[str(w) for w in prepared.warnings])
        try:
            with wb.db.session() as session:
                session.add(row)
                session.flush()
                store.commit(staged, id_)
        except IntegrityError:
            # Another import of the same upload won the race; its dataset is the answer.
            existing = _by_hash(wb, content_hash)
            if existing is None:
                raise
            return existing
        except BaseException:
            if store.path(id_).exists() and _by_hash(wb, content_hash) is None:
                store.remove(id_)
            raise
    log.info("imported dataset %s (%s, %d examples)", id_, options.task, prepared.examples)
    return get_dataset(wb, id_)


def _keep_sources(staged: Path, source: Path, validation: Path | None) -> None:
    """Keep the uploaded files next to the normalized ones, so a dataset can be re-read later."""
    folder = staged / "source"
    folder.mkdir()
    shutil.copyfile(source, folder / source.name)
    if validation is not None:
        shutil.copyfile(validation, folder / f"validation-{validation.name}")


def _by_hash(wb: Workbench, content_hash: str) -> DatasetSummary | None:
    with wb.db.session() as session:
        row = session.scalars(select(Dataset).where(Dataset.content_hash == content_hash)).first()
        return DatasetSummary.from_row(row, reused=True) if row else None


def list_datasets(wb: Workbench, task: str | None = None) -> list[DatasetSummary]:
    """Stored datasets, newest first; only those of ``task`` when given."""
    query = select(Dataset).order_by(Dataset.created_at.desc(), Dataset.id)
    if task:
        query = query.where(Dataset.task == check_task(task))
    with wb.db.session() as session:
        return [DatasetSummary.from_row(row) for row in session.scalars(query)]


def get_dataset(wb: Workbench, id_or_name: str) -> DatasetSummary:
    """A dataset by id, unique id prefix or name (the newest of that name)."""
    with wb.db.session() as session:
        return DatasetSummary.from_row(find_dataset(session, id_or_name))


def delete_dataset(wb: Workbench, id_or_name: str) -> DatasetSummary:
    """Remove the row and the folder. Runs that used the dataset keep their results (their link becomes empty).

    Refused while a queued or running run still has to read the dataset's files.
    """
    with wb.db.session() as session:
        row = find_dataset(session, id_or_name)
        waiting = session.scalars(select(Run.id).where(Run.dataset_id == row.id,
                                                       Run.status.in_((QUEUED, *ACTIVE))).order_by(Run.id)).all()
        if waiting:
            raise InvalidState(f"dataset {row.id} is still needed by queued or running run(s) "
                               f"{', '.join(map(str, waiting))}; wait for them or cancel them, then delete it")
        summary = DatasetSummary.from_row(row)
        session.delete(row)
    DatasetStore(wb.settings.datasets_dir).remove(summary.id)
    log.info("deleted dataset %s", summary.id)
    return summary


def dataset_files(wb: Workbench, id_or_name: str) -> tuple[Path, Path | None]:
    """(train.jsonl, validation.jsonl) of a stored dataset, in the normalized format the trainer reads.

    The validation path is None when the dataset has no validation examples (fraction 0).
    """
    return storage_dataset_files(wb.db, id_or_name)


def mark_test_set(wb: Workbench, dataset_id: str) -> None:
    """Mark a dataset as a test set (runs are evaluated on it): the Train tab stops preselecting it, and
    training on it is warned about (``test_set_warning``)."""
    with wb.db.session() as session:
        row = session.get(Dataset, dataset_id)
        if row is not None and not row.test_set:
            row.test_set = True
            log.info("dataset %s is a test set from now on", dataset_id)


def test_set_warning(wb: Workbench, dataset_id: str | None) -> str:
    """Why training on ``dataset_id`` spoils its test scores ("" when it is no test set): the warning the
    Train tab and ``workbench train`` give before training on a test set."""
    if not dataset_id:
        return ""
    with wb.db.session() as session:
        row = session.get(Dataset, dataset_id)
        if row is None or not row.test_set:
            return ""
        return (f"dataset {row.id} ({row.name}) is a test set: runs were evaluated on it. A model trained on it has "
                "seen its examples, so its scores there no longer say how it does on new data; train on another "
                "dataset to keep it a test set")


# Named for what it warns about, not a test: pytest must not collect it where a test module imports it.
test_set_warning.__test__ = False  # type: ignore[attr-defined]


def kept_sources(summary: DatasetSummary) -> list[tuple[Path, str]]:
    """The files a dataset was imported from, as kept beside its records (``source/``): (path, the name the
    user gave it), the main file first; empty when the copies are gone. Messages about its examples name
    these files and their lines, which the user knows, not the normalized copy."""
    folder = Path(summary.path) / "source"
    found = sorted(folder.iterdir(), key=lambda p: (p.name.startswith("validation-"), p.name)) if folder.is_dir() else []
    return [(p, p.name.removeprefix("validation-")) for p in found if p.is_file()]


def read_options(summary: DatasetSummary) -> ReadOptions:
    """The options a stored dataset was read with (its task's defaults for a dataset that recorded none)."""
    options = summary.stats.get("options")
    return ReadOptions.from_dict(options) if isinstance(options, dict) else ReadOptions(task=summary.task)


def default_tokenizer():
    """The tokenizer the statistics use (the packaged MiniLM), loaded once per process."""
    return load_tokenizer(None)[0]
