"""What each field of a spec takes: its type and range, declared once as data and checked in one place.

``Field.check`` raises one ``ConfigError`` that names the field and says what it takes, e.g.
``sweep spec: parallelism must be a whole number from 1 to 64, got .inf``. Three rules hold for every
field: a boolean is no number (YAML's ``true`` is not 1 trial), NaN and the infinities are no value of
any field, and a whole-number field takes no fractions (2.5 trials is refused, not rounded).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from storage.errors import ConfigError

MAX_TEXT = 4096  # characters of a name, model or path: longer is a mistake, not a name
MAX_LIST = 256  # items of a list field (LoRA target modules)


@dataclasses.dataclass(frozen=True)
class Field:
    """One field's rule. ``kind``: int (whole numbers), number, bool, text, choice or texts (a list of text)."""

    kind: str
    low: Optional[float] = None
    high: Optional[float] = None
    above_low: bool = False  # ``low`` itself is refused (a learning rate of 0 trains nothing)
    below_high: bool = False
    choices: tuple[str, ...] = ()
    optional: bool = False  # None (null) is allowed: the engine picks a default
    nonempty: bool = False  # text: "" is refused
    what: str = ""  # a description that replaces the generated one

    def describe(self) -> str:
        """What the field takes, as the end of "X must be ..."."""
        if self.what:
            text = self.what
        elif self.kind == "bool":
            text = "true or false"
        elif self.kind == "text":
            text = f"{'non-empty ' if self.nonempty else ''}text of at most {MAX_TEXT} characters"
        elif self.kind == "texts":
            text = f"a list of at most {MAX_LIST} non-empty texts"
        elif self.kind == "choice":
            text = "one of " + ", ".join(self.choices)
        else:
            text = ("a whole number" if self.kind == "int" else "a number") + self._range()
        return text + (", or null for the default" if self.optional else "")

    def _range(self) -> str:
        low, high = _number_text(self.low), _number_text(self.high)
        if self.low is not None and self.high is not None:
            if not self.above_low and not self.below_high:
                return f" from {low} to {high}"
            return (f" {'above' if self.above_low else 'of at least'} {low} "
                    f"and {'below' if self.below_high else 'at most'} {high}")
        if self.low is not None:
            return f" above {low}" if self.above_low else f" of at least {low}"
        if self.high is not None:
            return f" below {high}" if self.below_high else f" of at most {high}"
        return ""

    def fits(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "text":
            return isinstance(value, str) and len(value) <= MAX_TEXT and bool(value.strip() or not self.nonempty)
        if self.kind == "texts":
            return (isinstance(value, list) and len(value) <= MAX_LIST
                    and all(isinstance(v, str) and v.strip() and len(v) <= MAX_TEXT for v in value))
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if not is_number(value) or (self.kind == "int" and not isinstance(value, int)):
            return False
        if self.low is not None and (value < self.low or (self.above_low and value == self.low)):
            return False
        return self.high is None or (value < self.high if self.below_high else value <= self.high)

    def check(self, label: str, field: str, value: Any) -> None:
        """Raise ``ConfigError`` unless ``value`` fits: ``label`` says which spec ("run spec"), ``field``
        which of its fields ("train.seed")."""
        if self.fits(value):
            return
        if self.kind == "choice" and isinstance(value, str):
            # the wording of the spec's earlier checks ("unknown method 'magic'"), which scripts match
            raise ConfigError(f"{label}: {field}: unknown {field.rpartition('.')[2]} {show(value)}; "
                              f"choose one of {', '.join(self.choices)}")
        raise ConfigError(f"{label}: {field} must be {self.describe()}, got {show(value)}")


def is_number(value: Any) -> bool:
    """An int or a finite float; not a bool (``True == 1`` in Python, but ``true`` is no count)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or math.isfinite(value)


def show(value: Any) -> str:
    """A value as a message quotes it: YAML's spelling of the special floats, never more than a line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, int):
        text = str(value) if abs(value) < 10 ** 30 else "a number with more than 30 digits"
        return text
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:60]) + f"… ({len(value):,} characters)"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,} item(s)"
    return f"a value of type {type(value).__name__}"


def _number_text(value: Optional[float]) -> str:
    if value is None:
        return ""
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else f"{value:g}"


def check_fields(label: str, path: str, values: Mapping[str, Any], fields: Mapping[str, Field]) -> None:
    """Check every key of ``values`` that ``fields`` knows (unknown keys are the caller's to refuse)."""
    for key, value in values.items():
        rule = fields.get(key)
        if rule is not None:
            rule.check(label, f"{path}{key}", value)


def refuse_unknown(label: str, section: str, keys: Any, known: Any) -> None:
    """One error listing the unknown keys of a section and the known ones."""
    unknown = sorted(str(k)[:60] for k in set(keys) - set(known))
    if unknown:
        where = f" in section '{section}'" if section else ""
        raise ConfigError(f"{label}: unknown key(s) {', '.join(unknown)}{where}; known keys: "
                          f"{', '.join(sorted(known))}")
