"""Ending a process that imported torch, transformers and the rest without the interpreter's last sweep.

When Python exits it clears every module and runs the garbage collector over what is left: with torch,
transformers, datasets and scikit-learn imported that is about 470,000 tracked objects. On the 2-core machine, with a
benchmark beside it, a process holding those imports took 1.5 s from its last line to its end; a job of a
label audit took 2.3 s after it had written "succeeded", and its worker's slot, and the next queued job,
waited that long. ``gc.freeze()`` moves every object alive now out of the collector's reach: the same
process then ends in 0.2 s, and the audit's next job starts 0.5-1.0 s after the last one's final line
(the worker looks every 0.5 s). Nothing that writes is skipped: atexit handlers still run (logging's flush
among them), buffered output is still flushed and modules are still cleared; only objects caught in
reference cycles, which nothing can reach any more, are left to the operating system.
"""
from __future__ import annotations

import gc
import sys
from typing import NoReturn, Optional


def exit_process(code: Optional[int]) -> NoReturn:
    """``sys.exit(code)`` without the final garbage collection over every object the imports made."""
    gc.freeze()
    sys.exit(code)
