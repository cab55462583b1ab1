"""How a worker starts one run: the ``Runner`` seam.

The worker only needs ``launch(job, env) -> handle`` with ``poll()`` and ``kill()``.
``SubprocessRunner`` is the real one: each run is its own process (argv list, no
shell, its own process group, ``CUDA_VISIBLE_DEVICES`` set to the GPUs it was
given, or empty for CPU). Tests swap in the runners of ``jobs.fake_runner``, so
queue and UI tests need no torch — with the same subprocess handling, so that a
crash is a real crash.
"""
from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional, Protocol, Sequence

log = logging.getLogger(__name__)

PROCESS_LOG = "process.log"


@dataclasses.dataclass(frozen=True)
class Launch:
    """One attempt of one run, as the worker hands it to a runner."""

    run_id: int
    attempt: int
    output_dir: Path
    gpus: tuple[int, ...] = ()  # physical GPU indices; empty means CPU

    @property
    def device(self) -> str:
        return "cpu" if not self.gpus else "cuda:" + ",".join(str(g) for g in self.gpus)


class Handle(Protocol):
    pid: int

    def poll(self) -> Optional[int]:
        """None while running, else the exit code (negative: killed by that signal)."""

    def kill(self) -> None:
        """Kill the run's whole process group at once (DDP ranks and data loaders included)."""


class Runner(Protocol):
    def launch(self, job: Launch, env: Mapping[str, str]) -> Handle:
        ...


def _load_libc():
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None  # not glibc Linux: the child notices a changed parent pid itself (see jobs.run_job)


# Loaded here, in the parent: the code that runs between fork and exec must not dlopen (threads).
_LIBC = _load_libc() if sys.platform == "linux" else None
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the worker (thread) that started it ends, so a
    killed worker leaves no orphan training on (and writing to) a run another worker will resume."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ProcessHandle:
    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.pid = process.pid

    def poll(self) -> Optional[int]:
        return self.process.poll()

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class SubprocessRunner:
    """Runs ``python -m <module> RUN_ID --attempt N``; N>1 GPUs go through ``accelerate launch`` (DDP)."""

    def __init__(self, module: str = "jobs.run_job", extra_args: Sequence[str] = ()):
        self.module = module
        self.extra_args = tuple(extra_args)

    def argv(self, job: Launch) -> list[str]:
        tail = ["-m", self.module, str(job.run_id), "--attempt", str(job.attempt), *self.extra_args]
        if len(job.gpus) > 1:
            return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
                    "--num_processes", str(len(job.gpus)), *tail]
        return [sys.executable, *tail]

    def launch(self, job: Launch, env: Mapping[str, str]) -> Handle:
        job.output_dir.mkdir(parents=True, exist_ok=True)
        child_env = dict(env)
        child_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
        child_env["PYTHONUNBUFFERED"] = "1"
        with open(job.output_dir / PROCESS_LOG, "ab") as logfile:
            process = subprocess.Popen(self.argv(job), env=child_env, stdin=subprocess.DEVNULL, stdout=logfile,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=_die_with_parent if _LIBC is not None else None,
                                       close_fds=True)
        log.info("run %s attempt %s: started pid %s on %s", job.run_id, job.attempt, process.pid, job.device)
        return ProcessHandle(process)
