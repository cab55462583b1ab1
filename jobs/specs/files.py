"""Reading spec text a user wrote (YAML or JSON) without letting it exhaust memory or the stack.

Every spec that arrives as text goes through here: ``workbench train --config``, ``workbench sweep
--config``, the Sweep form's search space and its base run spec. Three limits hold before anything
is built or stored:

- at most ``MAX_SPEC_BYTES`` of text: a spec is a page of settings;
- no YAML aliases (``*name``, ``<<: *name``): each alias repeats a whole subtree, so a kilobyte of
  nested aliases (a "billion laughs" file) stands for gigabytes once the spec is stored as JSON;
- at most ``MAX_SPEC_DEPTH`` nested mappings and lists, checked while the text is read: PyYAML's
  composer and ``json.loads`` recurse once per level, so 5,000 levels end in ``RecursionError``.

A YAML spec also reads ``1e-5`` as a number, as JSON and YAML 1.2 do (YAML 1.1 reads it as text).
Errors are ``ConfigError`` naming the source, and the line and column where there is one.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from storage.errors import ConfigError

MAX_SPEC_BYTES = 64 * 1024
MAX_SPEC_DEPTH = 20


class _SpecLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases and nesting deeper than ``MAX_SPEC_DEPTH``."""

    def __init__(self, stream: str, source: str):
        super().__init__(stream)
        self.source = source
        self.depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise ConfigError(f"{_where(self.source, event.start_mark)}: YAML aliases (*{event.anchor}) are not "
                              "allowed in a spec; write the value out in full")
        nests = isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent))
        if nests:
            self.depth += 1
            if self.depth > MAX_SPEC_DEPTH:
                raise ConfigError(_too_deep(_where(self.source, event.start_mark)))
        try:
            return super().compose_node(parent, index)
        finally:
            if nests:
                self.depth -= 1


# YAML 1.1 takes a float only with a decimal point; 1e-5 (as people and json.dumps write it) is a number too.
_SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_yaml(text: str, source: str) -> Any:
    """The value of YAML ``text`` (``source`` names it in errors: a path, "the search space")."""
    _check_size(text, source)
    loader = _SpecLoader(text, source)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {exc}") from None
    except (ValueError, OverflowError) as exc:  # a date that does not exist, an int of 5,000 digits
        raise ConfigError(f"{source}: a value cannot be read: {exc}") from None
    finally:
        loader.dispose()


def load_json(text: str, source: str) -> Any:
    """The value of JSON ``text``, its nesting checked before ``json.loads`` recurses into it."""
    _check_size(text, source)
    _check_json_depth(text, source)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{source} is not valid JSON: {exc}") from None


def read_spec_file(path: Path, what: str) -> dict[str, Any]:
    """The mapping in a YAML (or JSON) spec file; ``what`` ("run spec", "sweep spec") names it in errors.

    An empty file is an empty mapping. The file is read only up to the size limit.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise ConfigError(_too_large(str(path)))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: the {what} is not UTF-8 text (byte {exc.start})") from None
    raw = load_yaml(text, str(path))
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a {what} is a mapping (key: value lines), not {type(raw).__name__}")
    return raw


def load_run_spec_file(path: Path) -> dict[str, Any]:
    """A ``workbench train --config`` file: its keys known and every value there typed and in range
    (the task or the data may still come from flags)."""
    from jobs.specs.run import check_run_mapping

    raw = read_spec_file(path, "run spec")
    _in_file(path, check_run_mapping, raw)
    return raw


def load_sweep_spec_file(path: Path) -> dict[str, Any]:
    """A ``workbench sweep --config`` file, checked as far as it goes without the flags."""
    from jobs.specs.sweep import check_sweep_mapping

    raw = read_spec_file(path, "sweep spec")
    _in_file(path, check_sweep_mapping, raw)
    return raw


def _in_file(path: Path, check, raw: dict[str, Any]) -> None:
    try:
        check(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _check_size(text: str, source: str) -> None:
    # Characters first: encoding a huge string only to measure it would cost what the limit saves.
    if len(text) > MAX_SPEC_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_SPEC_BYTES:
        raise ConfigError(_too_large(source))


def _check_json_depth(text: str, source: str) -> None:
    depth, in_string, escaped = 0, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_SPEC_DEPTH:
                line = text.count("\n", 0, index) + 1
                column = index - (text.rfind("\n", 0, index) + 1) + 1
                raise ConfigError(_too_deep(f"{source}, line {line}, column {column}"))
        elif char in "]}":
            depth -= 1


def _where(source: str, mark) -> str:
    return f"{source}, line {mark.line + 1}, column {mark.column + 1}"


def _too_deep(where: str) -> str:
    return (f"{where}: nested more than {MAX_SPEC_DEPTH} levels deep; a spec needs a few levels "
            "(base: train: learning_rate:)")


def _too_large(source: str) -> str:
    return f"{source} is larger than {MAX_SPEC_BYTES // 1024} KiB; a spec is a page of settings"
