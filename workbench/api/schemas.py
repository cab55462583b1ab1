"""The request bodies as the OpenAPI document describes them (the routes read and check the bodies themselves,
after the actor's check, with the services' own validation and messages)."""
from __future__ import annotations

from typing import Any

STRING, INTEGER, NUMBER, BOOLEAN = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
FILE = {"type": "string", "format": "binary"}


def json_body(schema: dict[str, Any], description: str, example: Any = None) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if example is not None:
        media["example"] = example
    return {"required": True, "description": description, "content": {"application/json": media}}


def form_body(properties: dict[str, Any], required: list[str], description: str) -> dict[str, Any]:
    return {"required": True, "description": description, "content": {"multipart/form-data": {"schema": {
        "type": "object", "properties": properties, "required": required}}}}


def described(schema: dict[str, Any], text: str) -> dict[str, Any]:
    return {**schema, "description": text}


DATA_FIELDS = {
    "task": described(STRING, "text-classification, token-classification, question-answering or masked-lm"),
    "format": described(STRING, "csv, tsv, jsonl, conll, squad or text (default: detected)"),
    "text_column": described(STRING, "column (or JSON key) with the text"),
    "label_column": described(STRING, "column (or JSON key) with the label"),
    "text_pair_column": described(STRING, "second text of a pair"),
    "label_separator": described(STRING, "splits multi-label cells, e.g. |"),
}

RUN_SPEC = {
    "type": "object",
    "description": "A run spec: the same mapping as a `workbench train --config` file (docs/cli.md), as JSON. "
                   "data.dataset_id names an uploaded dataset; data.train_path (a file on the server) and a model "
                   "that is a folder on the server are for admins only.",
    "properties": {
        "task": STRING, "model": STRING, "name": STRING, "seed": INTEGER, "init_from_run": INTEGER,
        "data": {"type": "object", "properties": {"dataset_id": STRING, "train_path": STRING,
                                                  "validation_path": STRING}},
        "train": {"type": "object", "description": "hyper-parameters: epochs, learning_rate, batch_size, "
                                                   "max_length, method, ..."},
        "lora": {"type": "object"},
    },
    "required": ["task", "data"],
}
RUN_EXAMPLE = {"task": "text-classification", "data": {"dataset_id": "3f2a9c1b7d4e"}, "train": {"epochs": 1}}

SWEEP_SPEC = {
    "type": "object",
    "description": "A sweep spec: the same mapping as a `workbench sweep --config` file: base (a run spec), space, "
                   "n_trials, parallelism, pruner, metric, direction, name, seed.",
    "properties": {"base": RUN_SPEC, "space": {"type": "object"}, "n_trials": INTEGER, "parallelism": INTEGER,
                   "pruner": STRING, "metric": STRING, "direction": STRING, "name": STRING, "seed": INTEGER},
    "required": ["base"],
}

AUDIT_REQUEST = {
    "type": "object",
    "properties": {"dataset": described(STRING, "dataset id, id prefix or name"), "folds": INTEGER, "model": STRING,
                   "preset": STRING, "seed": INTEGER, "method": STRING, "lora": BOOLEAN, "name": STRING,
                   "train": {"type": "object"}},
    "required": ["dataset"],
}

PUBLISH_REQUEST = {
    "type": "object",
    "properties": {"run_id": INTEGER, "token": described(STRING, "an access token the playground will require "
                                                                 "(8+ characters)"),
                   "generate_token": described(BOOLEAN, "make up a token (shown once in the answer)"),
                   "runtime": described(STRING, "pytorch (default), onnx-fp32, onnx-int8 or onnx-fp16")},
    "required": ["run_id"],
}

LABEL_REQUEST = {"type": "object", "properties": {"label": {
    "description": "a class name, or a list of class names in a multi-label project"}}, "required": ["label"]}

ERROR = {"type": "object", "properties": {
    "error": described(STRING, "what is wrong and how to fix it (the CLI's message)"),
    "status": INTEGER,
    "problems": {"type": "array", "items": {"type": "object"},
                 "description": "for invalid data: each problem with its file, line, column and hint"}},
    "required": ["error"]}
