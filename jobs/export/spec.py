"""The spec of an export job: a finished run's model written as ONNX, on the same queue as training.

An export has ``Run.kind == "export"``, ``Run.parent_run_id`` = the model's run and an ``ExportSpec`` as its
``Run.spec``; ``jobs.process.run_job`` hands it to ``jobs.export.job.run_export``. fp32 is always exported (the parity
check measures the others against PyTorch through it); int8 is on by default because it is the variant that
makes a CPU faster; fp16 only pays on a GPU, so ``None`` means "when the job runs on one".
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from storage.errors import ConfigError

EXPORT_SPEC_VERSION = 1
KIND = "export"


@dataclasses.dataclass
class ExportSpec:
    run_id: int  # the run whose model is exported
    int8: bool = True  # also write the dynamic-int8 variant
    fp16: Optional[bool] = None  # None: only when the device is a GPU; True without a GPU is refused
    name: str = ""
    kind: str = KIND
    version: int = EXPORT_SPEC_VERSION

    def __post_init__(self) -> None:
        problems = []
        if self.kind != KIND:
            problems.append(f"kind must be {KIND!r}, not {self.kind!r}")
        if isinstance(self.run_id, bool) or not isinstance(self.run_id, int) or self.run_id < 1:
            problems.append(f"run_id must be a run's id (a positive whole number), not {self.run_id!r}")
        if not isinstance(self.int8, bool):
            problems.append(f"int8 must be true or false, not {self.int8!r}")
        if self.fp16 is not None and not isinstance(self.fp16, bool):
            problems.append(f"fp16 must be true, false or null (on a GPU only), not {self.fp16!r}")
        if self.version != EXPORT_SPEC_VERSION:
            problems.append(f"version {self.version!r} is not one this workbench reads ({EXPORT_SPEC_VERSION})")
        if problems:
            raise ConfigError("export spec: " + "; ".join(problems))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "ExportSpec":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"export spec: unknown key(s) {', '.join(unknown)}")
        if "run_id" not in raw:
            raise ConfigError("export spec: run_id is missing (the run whose model to export)")
        return cls(**dict(raw))
