"""The spec of a prediction or evaluation job: a run of another kind on the same queue.

A training run has ``Run.kind == "train"`` and a ``jobs.specs.run.RunSpec``; a job that puts a finished run's
model to work has ``Run.kind`` "predict" or "evaluate", ``Run.parent_run_id`` = the model's run, and a
``PredictSpec`` as its ``Run.spec``. Both go through the same leases, workers, cancel and crash resume:
``jobs.process.run_job`` reads the kind and hands the job to

- ``jobs.predict.job.run_prediction(spec, model, output_dir, reporter, device=...)`` for "predict": the
  input file streamed in chunks of ``chunk_rows`` rows, one output file at the end (``jobs.predict.writer``);
- ``jobs.predict.evaluate.run_evaluation(spec, model, records_paths, output_dir, reporter, device=...)`` for
  "evaluate": a stored dataset (the test set) scored with the run's own task metrics, written as a training
  run writes its validation results (``metrics.json``, ``tables.json``, ``predictions.jsonl``), so the run
  views (per-class tables, confusion matrix, error browser) read them unchanged.

``ModelRef`` is what either needs of the model's run, resolved from the database by ``jobs.process.run_job``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from jobs.export.runtime import PYTORCH, check_runtime
from storage.errors import ConfigError

PREDICT_SPEC_VERSION = 1
KINDS = ("predict", "evaluate")
INPUT_FORMATS = ("csv", "tsv", "jsonl", "txt", "conll", "squad")
OUTPUT_FORMATS = ("csv", "jsonl", "parquet")
DEFAULT_CHUNK_ROWS = 4096


@dataclasses.dataclass
class PredictSpec:
    kind: str  # "predict" | "evaluate"
    run_id: int  # the run whose model predicts
    # predict: the input file (a copy the service keeps under the workbench home); evaluate: unused, the test
    # set is the stored dataset ``dataset_id``
    input_path: str = ""
    input_name: str = ""  # the file name the user gave, for the download's name
    input_format: Optional[str] = None  # one of INPUT_FORMATS; None: detected from the name and the first lines
    # storage.datasets.columns.ColumnMapping.to_dict(): which columns hold the text (and the pair); a label
    # column, when present, is carried through to the output like any other input column
    columns: dict[str, Any] = dataclasses.field(default_factory=dict)
    # which columns the model reads (role → column), as found when the job was queued: shown in the job's
    # header, so a column the reader picked itself is never used without a word; the job finds them again
    reads: dict[str, str] = dataclasses.field(default_factory=dict)
    output_format: str = "csv"  # one of OUTPUT_FORMATS
    # text classification: True when the model was trained on pairs of texts (each row needs its second text),
    # False on single texts (a second-text column is not read); None: read one when found (jobs queued before)
    pairs: Optional[bool] = None
    dataset_id: Optional[str] = None  # evaluate: the stored test set
    batch_size: Optional[int] = None  # None: chosen for the device
    chunk_rows: int = DEFAULT_CHUNK_ROWS  # rows per resumable chunk
    name: str = ""
    version: int = PREDICT_SPEC_VERSION
    # what predicts: "pytorch" (the run's model folder) or an ONNX variant of the run's newest export
    # (jobs.export.runtime.RUNTIMES); the output rows are the same shape either way
    runtime: str = PYTORCH

    def __post_init__(self) -> None:
        problems = []
        try:
            self.runtime = check_runtime(self.runtime)
        except ConfigError as exc:
            problems.append(str(exc))
        if self.kind not in KINDS:
            problems.append(f"kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.input_format is not None and self.input_format not in INPUT_FORMATS:
            problems.append(f"input_format must be one of {', '.join(INPUT_FORMATS)}, not {self.input_format!r}")
        if self.output_format not in OUTPUT_FORMATS:
            problems.append(f"output_format must be one of {', '.join(OUTPUT_FORMATS)}, not {self.output_format!r}")
        if self.kind == "predict" and not self.input_path:
            problems.append("a prediction job needs an input file")
        if self.kind == "evaluate" and not self.dataset_id:
            problems.append("an evaluation needs a test set (a stored dataset)")
        if not isinstance(self.chunk_rows, int) or self.chunk_rows < 1:
            problems.append("chunk_rows must be a positive whole number")
        if self.batch_size is not None and (not isinstance(self.batch_size, int) or self.batch_size < 1):
            problems.append("batch_size must be a positive whole number")
        if problems:
            raise ConfigError("prediction spec: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "PredictSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"prediction spec: unknown key(s) {', '.join(unknown)}")
        return cls(**dict(raw))


@dataclasses.dataclass(frozen=True)
class ModelRef:
    """The model's run, as a prediction or evaluation needs it."""

    run_id: int
    task: str  # jobs.specs.run.TASKS
    model_dir: str  # <run output_dir>/model
    hyperparameters: dict[str, Any]  # metrics.json["hyperparameters"]: max_length, multi_label, method, ...
    labels: tuple[str, ...] = ()  # the class or tag names, in the model's order (config.id2label)
    # the ``onnx/`` folder of the run's newest succeeded export (jobs.export.runtime.latest_onnx_dir); None: none
    onnx_dir: Optional[str] = None
    # evaluate: the model run's spec with its data files resolved (``RunSpec.to_dict``), so the test set gets the
    # baselines fitted on the run's training split; None where the run's data is gone (no baselines then)
    run_spec: Optional[dict[str, Any]] = None
