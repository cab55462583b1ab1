"""Turn what went wrong in a training process into one sentence a user can act on.

Two sources: an exception caught inside the run's subprocess (``describe_exception``)
and a process that died without saying anything — a signal, an exit code, whatever
its log shows (``describe_exit``). The full traceback stays in the log; the run
row gets the sentence (``Run.error``) and the log tail (``Run.error_detail``).
"""
from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Optional

from storage.errors import ModelUnavailable, TrainingError, WorkbenchError

LOG_TAIL_LINES = 40

_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED", re.I)
_NAN = re.compile(r"loss (?:became|is) nan(?: at step (\d+))?", re.I)
# What a rank sees when another rank of its run died (gloo / NCCL / the c10d store)
_PEER_LOSS = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|DistBackendError|"
                        r"NCCL communicator was aborted|recvBytes|Socket Timeout", re.I)
# torchrun's (and accelerate launch's) failure report: the first rank that failed and how
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)",
                         re.S)
_OFFLINE = re.compile(r"offline|couldn't connect|can't load|is not a (?:local folder|valid model identifier)", re.I)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' when it does not exist); reads only the end of big files."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _oom_sentence(batch_size: Optional[int]) -> str:
    if batch_size and batch_size > 1:
        return f"CUDA out of memory at batch size {batch_size} — try {max(1, batch_size // 2)} or enable LoRA"
    return "CUDA out of memory — lower the batch size or the maximum length, or enable LoRA"


def describe_exception(exc: BaseException, batch_size: Optional[int] = None, model: str = "") -> str:
    """One sentence (with its hint after a dash) for an exception raised by the training engine."""
    text = str(exc)
    if isinstance(exc, TrainingError):
        # The engine's sentences usually carry their advice after a dash already; the hint then goes
        # to the error detail instead of making the sentence twice as long.
        return text if (" — " in text or not exc.hint) else f"{text} — {exc.hint}"
    if _OOM.search(text) or type(exc).__name__ == "OutOfMemoryError":
        return _oom_sentence(batch_size)
    nan = _NAN.search(text)
    if nan:
        where = f" at step {nan.group(1)}" if nan.group(1) else ""
        return f"loss became NaN{where} — lower the learning rate"
    if isinstance(exc, FileNotFoundError):
        name = exc.filename or text
        return f"dataset file missing: {name} — re-import the dataset, or mount the shared folder on this worker"
    if isinstance(exc, ModelUnavailable) or (isinstance(exc, OSError) and _OFFLINE.search(text)):
        return (f"model {model!r} is not available offline — use a local model folder, or set "
                "WORKBENCH_OFFLINE=false on a machine with internet access")
    if isinstance(exc, MemoryError):
        return "the machine ran out of memory (RAM) — lower the batch size or the maximum length"
    if isinstance(exc, WorkbenchError):
        return text
    return f"training failed: {type(exc).__name__}: {text}"[:500]


def is_peer_loss(exc: BaseException) -> bool:
    """True for the error a DDP rank raises when another rank of the run died under it."""
    return type(exc).__name__ == "DistBackendError" or bool(_PEER_LOSS.search(str(exc)))


# The exit status of a job whose warm process ended before it did (jobs.queue.runner.ForkedHandle): nobody can
# read it any more. Not a status a process can exit with (0-255, or minus a signal).
EXIT_UNKNOWN = 1000


def describe_exit(returncode: int, tail: str, cancel_requested: bool = False) -> str:
    """A sentence for a training process that ended without recording its result."""
    if _OOM.search(tail):
        return _oom_sentence(None)
    root = _ROOT_CAUSE.search(tail)
    if root:
        # A multi-process run: the launcher exits 1 whatever happened; its report names the rank
        rank, code = int(root.group(1)), int(root.group(2))
        return describe_exit(code, "", cancel_requested).replace("the training process",
                                                                 f"the training process of rank {rank}", 1)
    if returncode == EXIT_UNKNOWN:
        return ("the training process ended without recording a result, and its exit status is unknown: the warm "
                "process that had started it ended first (workers/warm-process.log) — see the log")
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if name == "SIGKILL" and not cancel_requested:
            return ("the training process was killed (SIGKILL) — often the machine ran out of memory; "
                    "lower the batch size or the maximum length; see the log")
        return f"the training process crashed (signal {name}) — see the log"
    return f"the training process exited with code {returncode} without recording a result — see the log"
