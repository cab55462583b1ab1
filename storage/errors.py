"""The workbench's one error hierarchy.

    WorkbenchError                 base; ``str(e)`` is a sentence a user can act on
    ├── ConfigError                a setting or option is invalid
    ├── NotFound                   a dataset, run, model or playground does not exist
    ├── DataValidationError        an uploaded file is invalid; ``.problems`` lists each one
    ├── InvalidState               an action does not fit the current state (cancel a finished run)
    ├── Forbidden                  a request names something it may not reach (a server path, a route)
    ├── ModelUnavailable           a model is neither local nor downloadable (offline)
    ├── TrainingError              a run failed; ``.hint`` says what to try
    └── StorageError               the database cannot be opened or a query failed; ``.hint`` too

The edges translate these once: the CLI prints one line per problem and exits
with 2, the UI raises ``gr.Error``, the REST API answers with a JSON error.
The hierarchy lives on the bottom floor because every floor raises it: the
dataset readers here in ``storage``, the queue and trainer in ``jobs``, the
services above them. ``workbench.errors`` re-exports it for the edges.
Nothing in here imports gradio.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Literal


class WorkbenchError(Exception):
    """Base of every error the workbench reports to a user."""

    exit_code = 1


class ConfigError(WorkbenchError):
    exit_code = 2


class NotFound(WorkbenchError):
    exit_code = 3


class InvalidState(WorkbenchError):
    exit_code = 4


class Forbidden(WorkbenchError):
    exit_code = 2


class ModelUnavailable(WorkbenchError):
    exit_code = 2


class TrainingError(WorkbenchError):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


class StorageError(WorkbenchError):
    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem found in a data file: where it is and how to fix it."""

    severity: Literal["error", "warning"]
    file: str
    message: str
    line: int | None = None
    record: str | None = None
    column: str | None = None
    hint: str = ""

    def location(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
        if self.record is not None:
            where += f" (record {self.record})"
        if self.column is not None:
            where += f", column {self.column!r}"
        return where

    def __str__(self) -> str:
        text = f"{self.location()}: {self.severity}: {self.message}"
        return f"{text} — {self.hint}" if self.hint else text

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class DataValidationError(WorkbenchError):
    exit_code = 2

    def __init__(self, problems: Iterable[Problem]):
        self.problems = [p for p in problems if p.severity == "error"]
        first = self.problems[0] if self.problems else None
        count = len(self.problems)
        summary = str(first) if first else "invalid data"
        if count > 1:
            summary += f" (and {count - 1} more problem{'s' if count > 2 else ''})"
        super().__init__(summary)
