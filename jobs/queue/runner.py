"""How a worker starts one run: the ``Runner`` seam.

The worker only needs ``launch(job, env) -> handle`` with ``poll()`` and ``kill()``.
``SubprocessRunner`` is the real one: each run is its own process (argv list, no
shell, its own process group, ``CUDA_VISIBLE_DEVICES`` set to the GPUs it was
given, or empty for CPU). Tests swap in the runners of ``jobs.process.fake_runner``, so
queue and UI tests need no torch — with the same subprocess handling, so that a
crash is a real crash.

A run with several processes (N GPUs, or ``procs`` > 1 on the CPU) goes through a
launcher (``accelerate launch`` / ``torchrun``) on a rendezvous port picked free
for that run. The launcher starts each rank in a session of its own, so killing
the launcher's process group does not reach them: ``kill()`` walks the process
tree, and each rank also dies with its launcher (see ``jobs.process.run_job``).
"""
from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Mapping, Optional, Protocol, Sequence

from jobs.queue import failures

log = logging.getLogger(__name__)

PROCESS_LOG = "process.log"


@dataclasses.dataclass(frozen=True)
class Launch:
    """One attempt of one run, as the worker hands it to a runner."""

    run_id: int
    attempt: int
    output_dir: Path
    gpus: tuple[int, ...] = ()  # physical GPU indices; empty means CPU
    procs: int = 1  # data-parallel processes on the CPU (ignored with GPUs: one process per GPU)
    threads: Optional[int] = None  # the CPU threads the job's torch may use; None: torch's default (every core)

    @property
    def device(self) -> str:
        if self.gpus:
            return "cuda:" + ",".join(str(g) for g in self.gpus)
        return "cpu" if self.procs <= 1 else f"cpu x{self.procs}"  # cpu x2: two gloo ranks

    @property
    def world_size(self) -> int:
        """How many training processes the run has."""
        return len(self.gpus) if self.gpus else max(1, self.procs)


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
        return None  # not glibc Linux: the child notices a changed parent pid itself (see jobs.process.run_job)


# Loaded here, in the parent: the code that runs between fork and exec must not dlopen (threads).
_LIBC = _load_libc() if sys.platform == "linux" else None
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the worker (thread) that started it ends, so a
    killed worker leaves no orphan training on (and writing to) a run another worker will resume."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def die_with_launcher() -> bool:
    """In a rank a launcher (torchrun, accelerate) started: get SIGKILL when the launcher dies.

    The launcher puts each rank in a session of its own and, killed with SIGKILL itself (its worker
    was killed), cannot stop them: without this they would train on as orphans holding memory.
    Returns False when the launcher is already gone (the rank was re-parented to init). Without
    prctl (not glibc Linux) it returns True and the run's reporter notices a changed parent instead.
    """
    if _LIBC is None:
        return True
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # The launcher may have died before prctl: the rank was then re-parented to init already.
    return os.getppid() != 1


class ProcessHandle:
    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.pid = process.pid

    def poll(self) -> Optional[int]:
        return self.process.poll()

    def kill(self) -> None:
        kill_tree(self.pid)


def kill_tree(pid: int) -> None:
    """SIGKILL the process group that ``pid`` leads, and every process below ``pid``."""
    # The ranks a launcher starts sit in sessions of their own: collect the tree before the
    # launcher dies (orphans are re-parented and no longer listed as its children).
    try:
        import psutil

        tree = psutil.Process(pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - psutil.NoSuchProcess, or psutil missing: the group kill still runs
        tree = []
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        # A forked job between fork and setsid is not a group leader yet: kill the process itself.
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for child in tree:
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass


DEFAULT_RENDEZVOUS_PORT = 29500  # torch's and accelerate's fixed default: two runs on it collide
_RECENT_PORTS = 64


class PortPicker:
    """Free TCP ports on the loopback for rendezvous, never 29500 and never one handed out recently
    (a port just released is free for the OS again, but the run it went to may not have bound it yet)."""

    def __init__(self) -> None:
        self._recent: deque[int] = deque(maxlen=_RECENT_PORTS)
        self._lock = threading.Lock()

    def pick(self) -> int:
        with self._lock:
            for _ in range(100):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind(("127.0.0.1", 0))
                    port = sock.getsockname()[1]
                if port != DEFAULT_RENDEZVOUS_PORT and port not in self._recent:
                    self._recent.append(port)
                    return port
        raise OSError("no free TCP port for the training processes' rendezvous")


# How long a launch waits for a warm process that is still importing (about 5 s of CPU), far below a lease
# (WORKBENCH_LEASE_SECONDS, 60 by default): the worker's loop sends no heartbeat meanwhile. Waiting rather than
# starting the job as a new process at once spares a small machine the same imports twice; past it, the job
# starts as a new process and the next one is forked.
WARM_READY_WAIT_S = 15.0
# How long a launch waits for a warm process to answer a fork: milliseconds, or as long as one module it is learning
# takes to import. The request carries this deadline, and a warm process refuses a request it reads after it, so
# a job is never started twice; one that does not answer in time forks no more (an import that hangs).
FORK_REPLY_TIMEOUT_S = 10.0
_FORK_REPLY_GRACE_S = 5.0
# A child's exit status when its warm process ended before reporting it (the job was followed through its pidfd).
EXIT_UNKNOWN = failures.EXIT_UNKNOWN
_ALIVE: Optional[tuple[int, int]] = None  # see _alive_fd


def _alive_fd() -> int:
    """The read end of a pipe whose write end only this process holds: a forked job kills itself when it closes,
    so jobs die with this process (however it dies) and not with their warm process."""
    global _ALIVE
    if _ALIVE is None:
        _ALIVE = os.pipe()  # not inheritable: only the warm processes get the read end (pass_fds)
    return _ALIVE[0]


class WarmProcess:
    """The worker's side of ``jobs.process.preload``: a process that has imported a job module and torch once
    and forks a child per job. It dies with this process (PDEATHSIG, see ``_Starter``); its children die with this
    process too (``_alive_fd``), but not with it: when it ends alone they run on, and their handles follow them
    through a pidfd. It exits by itself after some idle minutes, or once it may no longer fork (an import started
    a thread, or its code changed on disk: ``stale``)."""

    def __init__(self, module: str, env: Mapping[str, str], log_path: Path):
        self.env = dict(env)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        alive = _alive_fd()
        with open(log_path, "ab") as logfile:
            self.process = subprocess.Popen([sys.executable, "-m", "jobs.process.preload", module,
                                             "--alive-fd", str(alive)], env=self.env,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logfile,
                                            start_new_session=True, pass_fds=(alive,),
                                            preexec_fn=_die_with_parent if _LIBC is not None else None,
                                            close_fds=True)
        self.codes: dict[int, int] = {}  # exit codes of the children that ended, as Popen.returncode
        self.ready = False
        self.alive = True
        self.failed = False  # it ended before its imports were done, or it forks no more
        self.stale = False  # its code changed on disk: a new warm process will do
        self.learned: set[str] = set()  # the modules it imported for the jobs to come
        self._children: set[int] = set()
        self._pidfds: dict[int, int] = {}
        self._started: dict[int, Optional[int]] = {}
        self._next_id = 0
        self._cond = threading.Condition()
        threading.Thread(target=self._read, name=f"warm-process-{self.process.pid}", daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self._take(message)
                self._cond.notify_all()
        # The warm process is gone. Its children run on (they die with this process, not with it); the exits
        # it did not report are read from their pidfds (``ended``).
        with self._cond:
            self.alive = False
            self.failed = self.failed or not self.ready
            self._cond.notify_all()
        self.process.wait()

    def _take(self, message: dict) -> None:
        if "ready" in message:
            self.ready = True
            log.info("warm process %s: imports done in %s s", self.process.pid, message.get("seconds"))
        elif "learned" in message:
            self.learned.add(message["learned"])
        elif "stale" in message:
            self.stale = True  # it forks no more; the job starts as a new process and the next one gets a new one
            self._started[message["id"]] = None
            log.warning("warm process %s: %s; jobs start from a new warm process", self.process.pid,
                        message["stale"])
        elif "error" in message:
            self.failed = True  # it forks no more: this job and the next start as new processes
            if "id" in message:
                self._started[message["id"]] = None
            log.warning("warm process %s stopped: %s; jobs start as new processes", self.process.pid,
                        message["error"])
        elif "refused" in message:
            # This one fork failed or came too late (the warm process goes on): that job starts as a new process.
            self._started[message["id"]] = None
            log.warning("warm process %s: %s; the job starts as a new process", self.process.pid, message["refused"])
        elif "exited" in message:
            pid = message["exited"]
            self.codes[pid] = EXIT_UNKNOWN if message["code"] is None else message["code"]
            self._children.discard(pid)
            pidfd = self._pidfds.pop(pid, None)
            if pidfd is not None:
                os.close(pidfd)
        elif "id" in message:
            # Its child before anything else: the child's exit may be the next line. The child waits for the
            # warm process to have answered, so it is alive (or a zombie) now, and the pidfd is its.
            pid = message["pid"]
            self._children.add(pid)
            try:
                self._pidfds[pid] = os.pidfd_open(pid)
            except (OSError, AttributeError):
                pass  # gone already (its exit comes next), or no pidfd here
            self._started[message["id"]] = pid

    def ended(self, pid: int) -> Optional[int]:
        """A child's exit code; None while it runs. After the warm process died, a child that has ended
        gives ``EXIT_UNKNOWN``."""
        with self._cond:
            if pid in self.codes:
                return self.codes[pid]
            if self.alive or not self.exited(pid):
                return None
            fd = self._pidfds.pop(pid, None)
            if fd is not None:
                os.close(fd)
            self.codes[pid] = EXIT_UNKNOWN
            return EXIT_UNKNOWN

    def exited(self, pid: int) -> bool:
        """Whether a child has ended (its exit reported, or its pidfd readable: a pidfd reads ready once its process
        has ended, reaped or not)."""
        with self._cond:
            if pid in self.codes:
                return True
            pidfd = self._pidfds.get(pid)
            if pidfd is None:
                return not self.alive  # no pidfd here: only the warm process could tell, and it is gone
            readable, _, _ = select.select([pidfd], [], [], 0)
            return bool(readable)

    def fork(self, args: Sequence[str], env: Mapping[str, str], log_path: Path) -> Optional[int]:
        """The pid of a child running the module with ``args``, or None when this process cannot fork one now
        (still importing after ``WARM_READY_WAIT_S``: the job starts as a new process, and the next one will be
        forked). Waits for an answer at most ``FORK_REPLY_TIMEOUT_S`` and a grace."""
        with self._cond:
            self._cond.wait_for(lambda: self.ready or not self.alive or self.failed, WARM_READY_WAIT_S)
            if not (self.ready and self.alive) or self.failed or self.stale:
                return None
            self._next_id += 1
            request_id = self._next_id
            request = {"id": request_id, "args": list(args), "env": dict(env), "log": str(log_path),
                       "cwd": os.getcwd(), "deadline": time.monotonic() + FORK_REPLY_TIMEOUT_S}
            try:
                self.process.stdin.write((json.dumps(request) + "\n").encode())
                self.process.stdin.flush()
            except OSError:
                return None
            if not self._cond.wait_for(lambda: request_id in self._started or not self.alive,
                                       FORK_REPLY_TIMEOUT_S + _FORK_REPLY_GRACE_S):
                # Past its deadline it refuses the request, so the job is not started twice. Its running jobs go on.
                log.warning("warm process %s did not answer a fork in %.0f s; jobs start as new processes",
                            self.process.pid, FORK_REPLY_TIMEOUT_S)
                self.failed = True
                return None
            return self._started.pop(request_id, None)

    def close(self) -> None:
        """Stop the warm process. Its children run on (they die with this process)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class ForkedHandle:
    """A job forked by a ``WarmProcess``: not this process's child, so its exit code comes from the warm process,
    or, once that has ended, from the job's pidfd (``EXIT_UNKNOWN``)."""

    def __init__(self, pid: int, warm: WarmProcess):
        self.pid, self.warm = pid, warm

    def poll(self) -> Optional[int]:
        return self.warm.ended(self.pid)

    def kill(self) -> None:
        if not self.warm.exited(self.pid):  # an ended job's pid may be someone else's by now
            kill_tree(self.pid)


class SubprocessRunner:
    """Runs ``python -m <module> RUN_ID --attempt N``; several processes go through a launcher:
    ``accelerate launch --multi_gpu`` for N GPUs, ``torchrun`` for N CPU processes (gloo).

    With ``preload``, a CPU job of one process is forked from a ``WarmProcess`` instead, which saves each job
    the seconds of importing torch and transformers; where it cannot be (no glibc, a warm process that failed),
    the job starts as a new process as before. ``log_dir`` takes the warm process's own log."""

    def __init__(self, module: str = "jobs.process.run_job", extra_args: Sequence[str] = (), *,
                 preload: bool = False, log_dir: Optional[Path] = None):
        self.module = module
        self.extra_args = tuple(extra_args)
        self.ports = PortPicker()
        self.preload = preload and _LIBC is not None
        self.log_dir = log_dir
        self._warm: Optional[WarmProcess] = None

    def argv(self, job: Launch, port: Optional[int] = None) -> list[str]:
        """The command line of one attempt; ``port`` is the rendezvous port of a multi-process run."""
        tail = ["-m", self.module, str(job.run_id), "--attempt", str(job.attempt), *self.extra_args]
        if job.world_size <= 1:
            return [sys.executable, *tail]
        port = port or self.ports.pick()
        if job.gpus:
            return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
                    "--num_processes", str(job.world_size), "--main_process_ip", "127.0.0.1",
                    "--main_process_port", str(port), *tail]
        # torchrun runs `-m module` itself; --max-restarts 0: a failed rank fails the attempt (the
        # queue's retry resumes from a checkpoint instead of the launcher restarting from scratch).
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
                str(job.world_size), "--master-addr", "127.0.0.1", "--master-port", str(port),
                "--max-restarts", "0", "--monitor-interval", "0.5", *tail]

    def launch(self, job: Launch, env: Mapping[str, str]) -> Handle:
        job.output_dir.mkdir(parents=True, exist_ok=True)
        child_env = dict(env)
        child_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
        child_env["PYTHONUNBUFFERED"] = "1"
        if not job.gpus and job.threads and "OMP_NUM_THREADS" not in env:
            child_env["OMP_NUM_THREADS"] = str(job.threads)
        elif not job.gpus and job.procs > 1 and "OMP_NUM_THREADS" not in env:
            # torchrun would set 1 thread per rank; share the cores out instead
            child_env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // job.procs))
        if self.preload and not job.gpus and job.world_size <= 1:
            pid = self._fork(job, env, child_env)
            if pid is not None:
                log.info("run %s attempt %s: forked pid %s from warm process %s", job.run_id, job.attempt, pid,
                         self._warm.process.pid)
                return ForkedHandle(pid, self._warm)
            if self._warm is None or self._warm.failed:
                # none could be had, or it could not import what the jobs need, or it stopped forking: the next
                # job would not do better, so jobs start as new processes from now on
                self.preload = False
        with open(job.output_dir / PROCESS_LOG, "ab") as logfile:
            process = subprocess.Popen(self.argv(job), env=child_env, stdin=subprocess.DEVNULL, stdout=logfile,
                                       stderr=subprocess.STDOUT, start_new_session=True,
                                       preexec_fn=_die_with_parent if _LIBC is not None else None,
                                       close_fds=True)
        log.info("run %s attempt %s: started pid %s on %s", job.run_id, job.attempt, process.pid, job.device)
        return ProcessHandle(process)

    def warm_up(self, env: Mapping[str, str], log_dir: Path) -> Optional[WarmProcess]:
        """The warm process that CPU jobs launched with ``env`` are forked from, started if there is none (it
        imports in the background: a job launched before it is ready starts as a new process); None when none
        can be had. ``log_dir`` takes its log unless the runner has a ``log_dir``."""
        warm_env = {**env, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
        self._warm = warm_process(self.module, warm_env, self.log_dir or log_dir)
        return self._warm

    def _fork(self, job: Launch, env: Mapping[str, str], child_env: Mapping[str, str]) -> Optional[int]:
        """Fork ``job`` from this process's warm process for the job module and environment (``warm_up``);
        None when the job must start as a new process."""
        warm = self.warm_up(env, job.output_dir.parent)
        if warm is None:
            return None
        return warm.fork(self.argv(job)[3:], child_env, job.output_dir / PROCESS_LOG)


# The warm processes of this process, one per job module and environment, shared by its workers (``workbench serve``
# has one; a test process or ``train --wait`` runs many in turn). The workbench's own settings (WORKBENCH_*) are read
# by a job when it runs, not when modules are imported, so they do not ask for another warm process; any other
# variable may be read by a library at import (HF_HUB_OFFLINE, thread counts), so a different value does.
_WARM: dict[tuple, WarmProcess] = {}
# Variables besides the settings that no library reads at import: pytest's name of the test running, which changes
# with every test of a process that would otherwise share one warm process.
NOT_READ_AT_IMPORT = frozenset({"PYTEST_CURRENT_TEST"})
# MLflow's variables, which the server sets for its mirror when a mirror runs (jobs.tracking.mirror): MLflow is never
# imported by a warm process (a package it does not hold is never learned, see jobs.process.preload).
NOT_READ_AT_IMPORT_PREFIXES = ("WORKBENCH_", "MLFLOW_")
_UNWARMABLE: set[tuple] = set()
_WARM_LOCK = threading.Lock()
_STARTER: Optional["_Starter"] = None


class _Starter:
    """Starts warm processes from one thread that lasts as long as this process. A process started with
    PDEATHSIG dies when the *thread* that started it ends, and a warm process outlives the worker thread that
    first needed it; this way it dies with this process, and so do its jobs."""

    def __init__(self) -> None:
        self._calls: "queue.SimpleQueue" = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="warm-process-starter", daemon=True).start()

    def _serve(self) -> None:
        while True:
            call, answer = self._calls.get()
            try:
                answer.put((call(), None))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                answer.put((None, exc))

    def start(self, module: str, env: Mapping[str, str], log_path: Path) -> WarmProcess:
        answer: "queue.SimpleQueue" = queue.SimpleQueue()
        self._calls.put((lambda: WarmProcess(module, env, log_path), answer))
        warm, error = answer.get()
        if error is not None:
            raise error
        return warm


def warm_process(module: str, env: Mapping[str, str], log_dir: Path) -> Optional[WarmProcess]:
    """This process's warm process for ``module`` and ``env``, started when there is none or it ended; None when
    one cannot be had (it could not import what the jobs need, or an import started a thread)."""
    global _STARTER
    key = (module, tuple(sorted((k, v) for k, v in env.items()
                                if not k.startswith(NOT_READ_AT_IMPORT_PREFIXES) and k not in NOT_READ_AT_IMPORT)))
    with _WARM_LOCK:
        for other, known in list(_WARM.items()):
            if other != key and not known.alive:
                del _WARM[other]  # ended: its jobs are followed through their handles
        warm = _WARM.get(key)
        if warm is not None and warm.failed:
            _UNWARMABLE.add(key)
        if key in _UNWARMABLE:
            return None
        if warm is None or not warm.alive or warm.stale:
            try:
                _STARTER = _STARTER or _Starter()
                warm = _WARM[key] = _STARTER.start(module, env, log_dir / "warm-process.log")
            except OSError:
                log.exception("could not start a warm process; jobs start as new processes")
                _UNWARMABLE.add(key)
                return None
        return warm
