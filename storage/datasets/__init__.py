"""Dataset ingestion: readers per format, validation into ``Problem``s, statistics, split and storage.

Entry points: ``pipeline.prepare`` (read, validate and write normalized JSON Lines) and
``store.DatasetStore`` (content-addressed folders). The service layer in
``workbench.services.datasets`` ties them to the database.
"""
from storage.datasets.columns import ColumnMapping
from storage.datasets.formats import FORMATS_BY_TASK, TASKS
from storage.datasets.pipeline import DatasetReport, ReadOptions, prepare
from storage.datasets.store import DatasetStore

__all__ = ["ColumnMapping", "DatasetReport", "DatasetStore", "FORMATS_BY_TASK", "ReadOptions", "TASKS", "prepare"]
