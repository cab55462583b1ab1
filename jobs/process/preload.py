"""A warm process that forks jobs: ``python -m jobs.process.preload MODULE``.

A job's subprocess spends about 5 s of CPU importing torch and transformers before it does any work. This
process imports a job module once, with what the module lists in its ``PRELOAD`` (what every job imports),
and then forks one child per request of its worker (``jobs.queue.runner.SubprocessRunner``); the child runs
the module as ``python -m MODULE ARGS`` would, with the request's environment, in a session of its own, its
output going to the run's log. So a job is what it was, less the imports.

A job's life is tied to the worker's process, not to this one: each child keeps the read end of a pipe whose
only write end the worker's process holds (``--alive-fd``), and kills its own process group when that pipe
closes (the worker's process died, however). This process dies with the worker's process too (PDEATHSIG and the
same pipe), but when it dies alone (the OOM killer, a user, a crash) its children run on, and the worker follows
them itself (``jobs.queue.runner.ForkedHandle``).

It also learns: each child, as it exits, names the modules it imported, and while no request waits this process
imports those of them that belong to a package it already holds (torch's, transformers', the workbench's own...).
A job thus pays only for what no job before it needed. A new top-level package is never learned: one could start
native threads that do not survive a fork.

Before each fork it checks that it may still fork:
- no import started an operating-system thread since the preload (``/proc/self/task``; the native pools the
  preload starts, OpenBLAS's and pyarrow's allocator's, handle fork themselves);
- no module it holds changed on disk (an upgrade while the server runs): a forked job would mix new code with old.
Where either fails it forks no more and exits once its children have ended; the worker starts its jobs as new
processes, or, after a change on disk, starts a new warm process.

The protocol is one JSON object a line. On stdin: ``{"id": N, "args": [...], "env": {...}, "log": PATH,
"cwd": PATH, "deadline": T}`` (T on the machine's monotonic clock: a request read after it is refused, as the
worker has stopped waiting). On stdout: ``{"ready": PID}`` once the imports are done (or ``{"error": TEXT}`` and
exit 1), ``{"id": N, "pid": PID}`` for each fork, ``{"id": N, "refused": TEXT}`` for a fork that failed or came too
late (that job starts as a new process; this process goes on), ``{"id": N, "stale": TEXT}`` once its code changed
on disk, ``{"id": N, "error": TEXT}`` once it no longer forks (``{"error": TEXT}`` when a module it learned is why),
``{"learned": NAME}`` for each module it learned, and ``{"exited": PID, "code": CODE}`` when a child ends (CODE as ``Popen.returncode``: negative for a signal; null when unknown). stdin closing means the worker is
gone: this process exits. With no child running and no request for ``--idle`` seconds it exits too (its memory,
about 0.5 GB with torch, is not held for an idle worker); the worker starts another when it needs one.

Only CPU jobs of one process are forked: a process that has touched CUDA cannot fork children that use it,
and a job of several processes goes through its launcher (``torchrun``, ``accelerate launch``).
"""
from __future__ import annotations

import argparse
import atexit
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

IDLE_SECONDS = 300.0
POLL_SECONDS = 0.2
# A write of at most PIPE_BUF bytes to a pipe is atomic: children exiting together never mix their lines.
LEARN_LINE_BYTES = 3500
# Modules a job made that cannot be imported by name (remote code, multiprocessing's main, torch's generated ones).
NOT_LEARNED = ("__main__", "__mp_main__", "transformers_modules", "_remote_module_non_scriptable")
# Set in a forked job's environment: its parent is the warm process, whose end is not the worker's
# (jobs.process.run_job then does not take a new parent for a dead worker).
FORKED_ENV = "WORKBENCH_JOB_FORKED"


def _write(fd: int, message: dict) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def os_threads() -> int:
    """This process's threads as the kernel counts them: Python's and native ones (BLAS pools, allocators)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def preload(module: str) -> None:
    """Import ``module`` and what it names in ``PRELOAD`` (modules, or ``module:attribute`` for one that is only
    imported when an attribute is read, as transformers' classes are)."""
    imported = importlib.import_module(module)
    for name in getattr(imported, "PRELOAD", ()):
        target, _, attribute = name.partition(":")
        loaded = importlib.import_module(target)
        if attribute:
            getattr(loaded, attribute)


class SourceFiles:
    """The size and modification time of the file of every module this process imported, each taken when the
    module was first seen: ``changed()`` names one that is no longer what was imported (about 20 ms for the
    3,800 files of a training job)."""

    def __init__(self) -> None:
        self.seen: dict[str, Optional[tuple[int, int]]] = {}
        self.add_new()

    @staticmethod
    def _stat(path: str) -> Optional[tuple[int, int]]:
        try:
            found = os.stat(path)
        except OSError:
            return None
        return found.st_mtime_ns, found.st_size

    def add_new(self) -> None:
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if isinstance(path, str) and os.path.isabs(path) and path not in self.seen:
                self.seen[path] = self._stat(path)

    def changed(self) -> Optional[str]:
        for path, known in self.seen.items():
            if self._stat(path) != known:
                return path
        return None


class Server:
    """The loop: read requests, fork, reap, report, and learn while idle. Returns a request only in a forked
    child."""

    def __init__(self, requests: int, replies: int, learned: int, idle: float, alive: Optional[int] = None):
        self.requests, self.replies, self.learned_fd, self.idle, self.alive = requests, replies, learned, idle, alive
        self.children: set[int] = set()
        self.pending, self.learned_pending = b"", b""
        self.to_learn: set[str] = set()  # what jobs imported, of the packages this process holds
        self.tried: set[str] = set()
        self.broken = ""  # why this process no longer forks
        self.stale = False  # broken because its code changed on disk
        self.last_active = time.monotonic()
        self.threads = os_threads()  # the preload's, known to fork safely
        self.packages = {name.partition(".")[0] for name in sys.modules}  # what may be learned
        self.sources = SourceFiles()

    def serve(self) -> Optional[dict]:
        watched = [self.requests, self.learned_fd] + ([self.alive] if self.alive is not None else [])
        while True:
            self.reap()
            if not self.children and (self.broken or time.monotonic() - self.last_active > self.idle):
                return None
            ready, _, _ = select.select(watched, [], [], POLL_SECONDS)
            if self.alive is not None and self.alive in ready and not os.read(self.alive, 1):
                return None  # the worker's process is gone
            if self.learned_fd in ready:
                self.read_learned()
            if self.requests not in ready:
                self.learn_one()  # nothing waits: the time is free
                continue
            chunk = os.read(self.requests, 65536)
            if not chunk:
                return None  # the worker is gone
            self.pending += chunk
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                request = self.answer(json.loads(line))
                if request is not None:
                    return request

    def answer(self, request: dict) -> Optional[dict]:
        """Fork for ``request`` (returning it in the child), or say why not."""
        self.last_active = time.monotonic()
        ident = request["id"]
        if not self.broken:
            changed = self.sources.changed()
            if changed:
                self.broken, self.stale = f"{changed} changed on disk since this process imported it", True
        if self.broken:
            # No fork any more; the jobs already forked run to their end, and then this process exits.
            _write(self.replies, {"id": ident, "stale" if self.stale else "error": self.broken})
            return None
        if request.get("deadline") is not None and time.monotonic() > request["deadline"]:
            _write(self.replies, {"id": ident, "refused": "the request came after the worker stopped waiting"})
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        go_read, go_write = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            # A process-count limit or no memory for the copy: this job starts as a new process; the
            # jobs already forked go on, and so does this process.
            os.close(go_read)
            os.close(go_write)
            _write(self.replies, {"id": ident, "refused": f"fork failed: {exc}"})
            return None
        if pid == 0:
            os.close(go_write)
            # The job starts only once the worker has been told its pid: a job nobody knows of must not run
            # (were this process to die between the fork and the reply, the worker would start the job again).
            told = os.read(go_read, 1)
            os.close(go_read)
            if not told:
                os._exit(1)
            return request
        os.close(go_read)
        self.children.add(pid)
        try:
            _write(self.replies, {"id": ident, "pid": pid})
            os.write(go_write, b"1")
        finally:
            os.close(go_write)
        return None

    def read_learned(self) -> None:
        self.learned_pending += os.read(self.learned_fd, 65536)
        while b"\n" in self.learned_pending:
            line, self.learned_pending = self.learned_pending.split(b"\n", 1)
            self.to_learn.update(name for name in json.loads(line)
                                 if name not in self.tried and name.partition(".")[0] in self.packages)

    def learn_one(self) -> None:
        """Import one module an earlier job imported and this process has not (parents before their submodules),
        of a package this process holds; then check that no thread came with it."""
        if self.broken or not self.to_learn:
            return
        for name in sorted(self.to_learn):
            self.to_learn.discard(name)
            self.tried.add(name)  # once: a module that will not import, or not under its name, is left to the jobs
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except BaseException:  # noqa: BLE001 - one that will not import is left to the jobs that need it
                pass
            self.sources.add_new()
            _write(self.replies, {"learned": name})
            if os_threads() > self.threads:
                # A thread's locks are copied into a fork half-held: this process can no longer fork safely.
                self.broken = f"importing {name} started a thread; forking stops"
                _write(self.replies, {"error": self.broken})
            return

    def reap(self) -> None:
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
                code: Optional[int] = os.waitstatus_to_exitcode(status) if done else None
            except ChildProcessError:  # someone else reaped it: its status is lost
                done, code = pid, None
            if done:
                self.children.discard(pid)
                self.last_active = time.monotonic()
                _write(self.replies, {"exited": pid, "code": code})


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


def _die_with_the_worker(alive: int) -> None:
    """In a forked job: block on the worker's pipe; when it closes, kill this job's process group."""
    while True:
        try:
            if not os.read(alive, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os.killpg(os.getpgrp(), signal.SIGKILL)


def become_job(module: str, request: dict[str, Any], requests: int, replies: int, learned: tuple[int, int],
               threads: int, alive: Optional[int]) -> None:
    """In the forked child: what ``subprocess.Popen`` with ``start_new_session`` did, then ``python -m module
    args``. Does not return: the module's ``sys.exit`` ends the process as it would have."""
    os.setsid()
    if alive is not None:
        threading.Thread(target=_die_with_the_worker, args=(alive,), name="dies-with-the-worker",
                         daemon=True).start()
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
    os.environ[FORKED_ENV] = "1"
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
    parser.add_argument("--alive-fd", type=int, default=None,
                        help="the read end of a pipe the worker's process holds open while it lives")
    args = parser.parse_args(argv)
    # The protocol keeps the pipes it was started with; stdout then goes to stderr (the server's log), so that
    # nothing an import prints can break a reply.
    requests, replies = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    started = time.monotonic()
    before = os_threads()
    try:
        preload(args.module)
    except Exception as exc:  # noqa: BLE001 - any import failure: the worker starts its jobs as before
        _write(replies, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    if threading.active_count() > 1:
        _write(replies, {"error": f"an import started a thread ({threading.enumerate()[-1].name})"})
        return 1
    threads = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else 1
    learned = os.pipe()
    server = Server(requests, replies, learned[0], args.idle, args.alive_fd)
    _write(replies, {"ready": os.getpid(), "seconds": round(time.monotonic() - started, 2),
                     "threads": [before, server.threads]})
    try:
        request = server.serve()
    except BrokenPipeError:
        return 0  # the worker is gone
    if request is None:
        return 1 if server.broken else 0
    become_job(args.module, request, requests, replies, learned, threads, args.alive_fd)
    return 0


if __name__ == "__main__":
    from storage.exiting import exit_process

    exit_process(main())
