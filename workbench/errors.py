"""The workbench's one error hierarchy, as the edges (CLI, UI, REST API) name it.

The hierarchy itself is declared in ``storage.errors``, on the bottom floor,
because every floor raises it; this module re-exports it so the top floor's
error handling reads ``from workbench.errors import ...``.
"""
from storage.errors import (ConfigError, DataValidationError, Forbidden, InvalidState, ModelUnavailable,
                            NotFound, Problem, StorageError, TrainingError, WorkbenchError)

__all__ = ["ConfigError", "DataValidationError", "Forbidden", "InvalidState", "ModelUnavailable", "NotFound",
           "Problem", "StorageError", "TrainingError", "WorkbenchError"]
