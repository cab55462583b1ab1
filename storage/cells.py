"""Text cells of the CSV files the workbench writes, escaped so a spreadsheet never runs them as a formula.

Excel, LibreOffice and Google Sheets read a cell that starts with ``=``, ``+``, ``-`` or ``@`` as a
formula (``=HYPERLINK(...)`` sends data away, ``=cmd|' /C calc'!A0`` starts a program through DDE), and
the texts a prediction writes back are often someone else's (reviews, tickets, e-mails). OWASP's rule
(CSV Injection, "prepend each cell field with a single quote") is followed, and widened:

- a text cell is *formula-like* when it starts with ``=`` ``+`` ``-`` ``@``, a tab or a carriage return
  (OWASP's six), or when one of the first four follows leading whitespace (``" =1+2"``): a spreadsheet
  that trims blanks on import (LibreOffice's *Trim spaces*) would otherwise see a formula;
- ``escape_cell`` puts ``'`` before a formula-like text, and before a text that is quotes followed by a
  formula-like text (``'=x`` becomes ``''=x``), so that ``unescape_cell``, which takes one ``'`` off a
  text of that second kind, is its exact inverse: ``unescape_cell(escape_cell(x)) == x`` for every ``x``.

Only ``str`` cells are escaped: numbers, booleans and nothing are written by the workbench itself
(scores, offsets) and stay numbers. The workbench's own CSV and TSV readers unescape every cell, so one
of its outputs read back (a predictions file as training data or as input) gives the original texts.
Used by ``jobs.predict.writer`` and the readers in ``storage.datasets`` and ``jobs.predict.inputs``.
"""
from __future__ import annotations

from typing import Any, Iterable

QUOTE = "'"
FORMULA_STARTS = ("=", "+", "-", "@")
CONTROL_STARTS = ("\t", "\r")


def formula_like(text: str) -> bool:
    """True when a spreadsheet could read ``text`` as a formula (see the module's rule)."""
    return text.startswith(CONTROL_STARTS) or text.lstrip().startswith(FORMULA_STARTS)


def _escaped_form(text: str) -> bool:
    """Quotes (none or more) then a formula-like text: what ``escape_cell`` prefixes with one more quote."""
    return formula_like(text.lstrip(QUOTE))


def escape_cell(value: Any) -> Any:
    """``value`` as a CSV cell safe to open in a spreadsheet: a formula-like text (or quotes before one) gets a
    leading ``'``; any other value, and any value that is not a ``str``, is returned unchanged."""
    if isinstance(value, str) and _escaped_form(value):
        return QUOTE + value
    return value


def unescape_cell(text: str) -> str:
    """The text ``escape_cell`` was given for ``text``: one leading ``'`` off where ``escape_cell`` put it."""
    if text.startswith(QUOTE) and _escaped_form(text[1:]):
        return text[1:]
    return text


def unescape_row(cells: Iterable[str]) -> list[str]:
    """``unescape_cell`` of each cell of a row read from a CSV or TSV file."""
    return [unescape_cell(cell) for cell in cells]
