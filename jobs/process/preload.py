"""A warm process that forks jobs: ``python -m jobs.process.preload MODULE``.

A job's subprocess spends about 5 s of CPU importing torch and transformers before it does any work. This
process imports a job module once, with what the module lists in its ``PRELOAD`` (what every job imports),
and then forks one child per request of its worker (``jobs.queue.runner.SubprocessRunner``); the child runs
the module as ``python -m MODULE ARGS`` would, with the request's environment, in a session of its own, its
output going to the run's log, and it dies with this process (PDEATHSIG), as this process dies with the worker's
process. So a job is what it was, less the imports.

It also learns: each child, as it exits, names the modules it imported that this process had not, and before
the next fork this process imports them. A job thus pays only for what no job before it needed, and a worker
that runs one job pays nothing more than before.

The protocol is one JSON object a line. On stdin: ``{"id": N, "args": [...], "env": {...}, "log": PATH,
"cwd": PATH}``. On stdout: ``{"ready": PID}`` once the imports are done (or ``{"error": TEXT}`` and exit 1),
``{"id": N, "pid": PID}`` for each fork (``{"id": N, "error": TEXT}`` once it no longer forks), and ``{"exited": PID, "code": CODE}`` when a child ends (CODE as
``Popen.returncode``: negative for a signal). stdin closing means the worker is gone: this process exits, and
its children with it. With no child running and no request for ``--idle`` seconds it exits too (its memory,
about 0.5 GB with torch, is not held for an idle worker); the worker starts another when it needs one.

Only CPU jobs of one process are forked: a process that has touched CUDA cannot fork children that use it,
and a job of several processes goes through its launcher (``torchrun``, ``accelerate launch``).
"""
from __future__ import annotations

import argparse
import atexit
import ctypes
import importlib
import json
import os
import runpy
import select
import signal
import sys
import threading
import time
from typing import Any, Optional

PR_SET_PDEATHSIG = 1
IDLE_SECONDS = 300.0
POLL_SECONDS = 0.2
# A write of at most PIPE_BUF bytes to a pipe is atomic: children exiting together never mix their lines.
LEARN_LINE_BYTES = 3500
# Modules a job made that cannot be imported by name (remote code, multiprocessing's main, torch's generated ones).
NOT_LEARNED = ("__main__", "__mp_main__", "transformers_modules", "_remote_module_non_scriptable")


def _write(fd: int, message: dict) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def preload(module: str) -> None:
    """Import ``module`` and what it names in ``PRELOAD`` (modules, or ``module:attribute`` for one that is only
    imported when an attribute is read, as transformers' classes are)."""
    imported = importlib.import_module(module)
    for name in getattr(imported, "PRELOAD", ()):
        target, _, attribute = name.partition(":")
        loaded = importlib.import_module(target)
        if attribute:
            getattr(loaded, attribute)


class Server:
    """The loop: read requests, import what jobs before needed, fork, reap, report. Returns a request only in a
    forked child."""

    def __init__(self, requests: int, replies: int, learned: int, idle: float):
        self.requests, self.replies, self.learned_fd, self.idle = requests, replies, learned, idle
        self.children: set[int] = set()
        self.pending, self.learned_pending = b"", b""
        self.learned: set[str] = set()
        self.tried: set[str] = set()
        self.broken = ""  # why this process no longer forks
        self.last_active = time.monotonic()

    def serve(self) -> Optional[dict]:
        while True:
            self.reap()
            if not self.children and (self.broken or time.monotonic() - self.last_active > self.idle):
                return None
            ready, _, _ = select.select([self.requests, self.learned_fd], [], [], POLL_SECONDS)
            if self.learned_fd in ready:
                self.read_learned()
            if self.requests not in ready:
                continue
            chunk = os.read(self.requests, 65536)
            if not chunk:
                return None  # the worker is gone
            self.pending += chunk
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                request = json.loads(line)
                self.last_active = time.monotonic()
                if not self.broken:
                    try:
                        self.import_learned()
                    except RuntimeError as exc:
                        self.broken = str(exc)
                if self.broken:
                    # No fork any more; the jobs already forked run to their end, and then this process exits.
                    _write(self.replies, {"id": request["id"], "error": self.broken})
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                try:
                    pid = os.fork()
                except OSError as exc:
                    # A process-count limit or no memory for the copy: this job starts as a new process; the
                    # jobs already forked go on, and so does this process.
                    _write(self.replies, {"id": request["id"], "refused": f"fork failed: {exc}"})
                    continue
                if pid == 0:
                    return request
                self.children.add(pid)
                _write(self.replies, {"id": request["id"], "pid": pid})

    def read_learned(self) -> None:
        self.learned_pending += os.read(self.learned_fd, 65536)
        while b"\n" in self.learned_pending:
            line, self.learned_pending = self.learned_pending.split(b"\n", 1)
            self.learned.update(json.loads(line))

    def import_learned(self) -> None:
        """Import what earlier jobs imported and this process has not (parents before their submodules)."""
        for name in sorted(self.learned - set(sys.modules) - self.tried):
            self.tried.add(name)  # once: a module that will not import, or not under its name, is left to the jobs
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001 - one that will not import is left to the jobs that need it
                pass
        if threading.active_count() > 1:
            # A thread's locks are copied into a fork half-held: this process can no longer fork safely.
            raise RuntimeError(f"an import started a thread ({threading.enumerate()[-1].name}); forking stops")

    def reap(self) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                self.children.discard(pid)
                self.last_active = time.monotonic()
                _write(self.replies, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def report_imports(fd: int, before: set[str]) -> None:
    """In a child, at exit: name the modules it imported, for the server to import before the next fork."""
    names = sorted(name for name, module in list(sys.modules.items())
                   if name not in before and module is not None and not name.startswith(NOT_LEARNED))
    line: list[str] = []
    for name in names + [None]:
        if name is None or len(json.dumps(line + [name])) > LEARN_LINE_BYTES:
            if line:
                try:
                    os.write(fd, (json.dumps(line) + "\n").encode())
                except OSError:
                    return  # the server is gone
            line = []
        if name is not None:
            line.append(name)


def become_job(module: str, request: dict[str, Any], requests: int, replies: int, learned: tuple[int, int],
               threads: int, parent: int) -> None:
    """In the forked child: what ``subprocess.Popen`` with ``start_new_session`` and ``preexec_fn`` did, then
    ``python -m module args``. Does not return: the module's ``sys.exit`` ends the process as it would have."""
    os.setsid()
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the server died before prctl (the job went to init or a subreaper): nobody
        # would kill this job any more
        os._exit(1)
    os.close(requests)
    os.close(replies)
    os.close(learned[0])
    atexit.register(report_imports, learned[1], set(sys.modules))
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request.get("cwd") or os.getcwd())
    # Torch read its thread count when it was imported here; a job's OMP_NUM_THREADS (the short-job lane's
    # quarter of the cores) is applied now, and a job without one gets the count this process started with.
    wanted = request["env"].get("OMP_NUM_THREADS", "")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(wanted) if wanted.isdigit() and int(wanted) > 0 else threads)
    sys.argv = [module, *request["args"]]
    # As under ``python -m``, the module runs as __main__ and is not also in sys.modules under its name (runpy
    # warns when it is); what it imports is, which is the point.
    sys.modules.pop(module, None)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.process.preload", description=__doc__.splitlines()[0])
    parser.add_argument("module", help="the job module each child runs as __main__")
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="exit after this many idle seconds")
    args = parser.parse_args(argv)
    # The protocol keeps the pipes it was started with; stdout then goes to stderr (the server's log), so that
    # nothing an import prints can break a reply.
    requests, replies = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    started = time.monotonic()
    try:
        preload(args.module)
    except Exception as exc:  # noqa: BLE001 - any import failure: the worker starts its jobs as before
        _write(replies, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    if threading.active_count() > 1:
        _write(replies, {"error": f"an import started a thread ({threading.enumerate()[-1].name})"})
        return 1
    threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else 1
    _write(replies, {"ready": os.getpid(), "seconds": round(time.monotonic() - started, 2)})
    learned = os.pipe()
    server = Server(requests, replies, learned[0], args.idle)
    parent = os.getpid()  # a forked job checks it is still this process's child
    try:
        request = server.serve()
    except BrokenPipeError:
        return 0  # the worker is gone
    if request is None:
        return 1 if server.broken else 0
    become_job(args.module, request, requests, replies, learned, threads, parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
