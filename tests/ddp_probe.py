"""``python -m tests.ddp_probe RUN_ID --attempt N``: the real ``jobs.process.run_job`` with two probes, for the DDP tests.

- Every rank appends the dataset indices of each training batch it loads to
  ``<output_dir>/seen.rank<R>.jsonl`` (one JSON list per batch), so a test can
  check which examples each rank trained on.
- ``PROBE_CRASH_RANK=R`` (with ``PROBE_CRASH_STEP=S``, default 2): rank R raises
  at step S, as a rank whose training breaks would.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from jobs.process import run_job
from storage.exiting import exit_process


class RecordingDataset:
    """Wraps the train dataset; records the indices each batch fetch asks for."""

    def __init__(self, base, path: Path):
        self.base, self.path = base, path

    def __len__(self):
        return len(self.base)

    def __getattr__(self, name):
        return getattr(self.base, name)

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.base[key]  # a column (the sampler reads the lengths)
        self._record([int(key)])
        return self.base[key]

    def __getitems__(self, keys):
        self._record([int(k) for k in keys])
        return self.base.__getitems__(keys)

    def _record(self, keys):
        with self.path.open("a") as handle:
            handle.write(json.dumps(keys) + "\n")


class CrashingReporter:
    """The run's reporter, raising at ``step`` on this rank."""

    def __init__(self, inner, step: int):
        self.inner, self.step = inner, step

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def progress(self, step, total_steps, epoch):
        if step >= self.step:
            raise RuntimeError(f"probe: rank {os.environ.get('RANK')} broke on purpose at step {step}")
        self.inner.progress(step, total_steps, epoch)


def probed_training(spec, output_dir, reporter, **kwargs):
    import jobs.training.trainer
    from jobs.training.engine import run_training

    rank = os.environ.get("RANK", "0")
    base_init = jobs.training.trainer.WorkbenchTrainer.__init__

    def init(self, *args, **kw):
        kw["train_dataset"] = RecordingDataset(kw["train_dataset"], Path(output_dir) / f"seen.rank{rank}.jsonl")
        base_init(self, *args, **kw)

    jobs.training.trainer.WorkbenchTrainer.__init__ = init
    if os.environ.get("PROBE_CRASH_RANK") == rank:
        reporter = CrashingReporter(reporter, int(os.environ.get("PROBE_CRASH_STEP", "2")))
    return run_training(spec, output_dir, reporter, **kwargs)


if __name__ == "__main__":
    exit_process(run_job.main(train_fn=probed_training))  # as jobs.process.run_job ends
