"""One workbench run as one TensorBoard event folder, ``<WORKBENCH_TENSORBOARD_DIR>/run-<id>-<name>``.

Each run has a ``SummaryWriter`` of its own (tensorboardX): never the process-wide writer of transformers'
``TensorBoardCallback``, so two runs in one worker never mix. The folder holds a scalar per curve point and the
run spec as text. A resumed attempt writes on from its first replayed step with ``purge_step``, so TensorBoard
drops what the lost attempt wrote past it, and at its end writes the folder anew from every point the run has
(the lost attempt may have logged points it never wrote); a backfill writes the folder anew.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Optional

from jobs.tracking.record import Snapshot

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def folder_name(run_id: int, name: str) -> str:
    slug = _UNSAFE.sub("-", name).strip("-.")[:60]
    return f"run-{run_id}-{slug}" if slug else f"run-{run_id}"


class TensorBoardTarget:
    label = "TensorBoard"

    def __init__(self, root: str | Path, run_id: int, name: str, *, fresh: bool = False):
        self.folder = Path(root).expanduser() / folder_name(run_id, name)
        self.fresh = fresh  # a backfill: whatever the folder holds is written again
        self.writer: Any = None
        self.resumed = False  # the folder had events of an earlier attempt when this writer opened it
        self._sent = 0
        self._written: set[tuple[str, int]] = set()
        self._ended = False

    def where(self) -> str:
        return str(self.folder)

    def reset(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:  # noqa: BLE001 - a broken writer is replaced
                pass
        self.writer = None

    def _open(self, snap: Snapshot, first_step: Optional[int]) -> None:
        from tensorboardX import SummaryWriter

        if self.fresh and self.folder.exists():
            shutil.rmtree(self.folder)
        resumed = self.folder.is_dir() and any(self.folder.glob("events.out.tfevents.*"))
        self.resumed = self.resumed or resumed
        self.folder.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(self.folder), purge_step=first_step if resumed else None,
                                    flush_secs=5)
        if not resumed:
            spec = json.dumps(snap.facts.spec, indent=2, default=str)
            self.writer.add_text("spec", "```\n" + spec + "\n```", 0)

    def sync(self, snap: Snapshot) -> bool:
        if self._ended:
            return True
        # while the run trains, the points that came since the last write; at its end, every point it has
        points = snap.points if snap.final is not None else snap.points[self._sent:]
        self._sent = len(snap.points)
        if snap.final is not None and self.resumed:
            # a resumed attempt's folder may lack what the lost attempt logged and never wrote: written anew
            self.reset()
            self.fresh, self._written = True, set()
        if self.writer is None:
            if not points and snap.final is None:
                return False
            self._open(snap, points[0].step if points else None)
        for point in points:
            if (point.name, point.step) not in self._written:
                self.writer.add_scalar(point.name, point.value, point.step)
                self._written.add((point.name, point.step))
        if snap.final is None:
            return False
        self.writer.close()  # flushes every event to the file
        self._ended = True
        return True
