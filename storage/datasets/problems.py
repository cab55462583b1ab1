"""Collects the problems found while reading a file, with caps so a broken million-line file stays readable.

Errors are all counted but only the first ``MAX_ERRORS`` are listed; warnings of one kind
(duplicates, blank labels, ...) are listed up to ``MAX_PER_KIND`` and then summarised, because a
user fixes a kind of problem once, not line by line.
"""
from __future__ import annotations

import collections

from storage.errors import Problem

MAX_ERRORS = 50
MAX_PER_KIND = 10


class ProblemLog:
    """Errors and warnings for one or more files of an upload."""

    def __init__(self) -> None:
        self._errors: list[Problem] = []
        self._error_count = 0
        self._warnings: dict[str, list[Problem]] = collections.defaultdict(list)
        self._warning_counts: collections.Counter[str] = collections.Counter()
        self._warning_hints: dict[str, tuple[str, str]] = {}

    def error(self, file: str, message: str, *, line: int | None = None, record: str | None = None,
              column: str | None = None, hint: str = "") -> None:
        self._error_count += 1
        if len(self._errors) < MAX_ERRORS:
            self._errors.append(Problem("error", file, message, line, record, column, hint))

    def warning(self, kind: str, file: str, message: str, *, line: int | None = None, record: str | None = None,
                column: str | None = None, hint: str = "") -> None:
        """Record a repairable problem; ``kind`` groups warnings for the summary line."""
        self._warning_counts[kind] += 1
        self._warning_hints.setdefault(kind, (file, hint))
        if len(self._warnings[kind]) < MAX_PER_KIND:
            self._warnings[kind].append(Problem("warning", file, message, line, record, column, hint))

    @property
    def has_errors(self) -> bool:
        return self._error_count > 0

    def errors(self) -> list[Problem]:
        """Every listed error, plus one line saying how many more there were."""
        out = list(self._errors)
        hidden = self._error_count - len(self._errors)
        if hidden:
            file = out[-1].file if out else ""
            out.append(Problem("error", file, f"... and {hidden} more error(s) not listed",
                               hint="fix the ones above and validate again"))
        return out

    def warnings(self) -> list[Problem]:
        """Listed warnings, with one summary line per kind that had more than the cap."""
        out: list[Problem] = []
        for kind, listed in self._warnings.items():
            out.extend(listed)
            hidden = self._warning_counts[kind] - len(listed)
            if hidden:
                file, hint = self._warning_hints[kind]
                out.append(Problem("warning", file, f"... and {hidden} more {kind} warning(s) not listed", hint=hint))
        return out

    def warning_counts(self) -> dict[str, int]:
        return dict(self._warning_counts)
