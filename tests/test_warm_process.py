"""CPU jobs forked from a warm process (jobs.process.preload, SubprocessRunner(preload=True)): each job runs as
``python -m`` would run it, in its own session with its own environment, reports its exit code, can be killed,
and dies with the worker thread that started the warm process. The worker's own tests run their subprocess
cases both ways (tests/test_worker.py, ``job_runner``)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jobs.queue import runner as runner_module
from jobs.queue.runner import ForkedHandle, Launch, ProcessHandle, SubprocessRunner
from tests.queue_support import alive, wait_until

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="forking from a warm process needs Linux (prctl)")


@pytest.fixture(autouse=True)
def _own_warm_processes():
    """Each test starts from no warm process and stops the ones it started (they are shared by the process)."""
    before = dict(runner_module._WARM)
    runner_module._WARM.clear()
    runner_module._UNWARMABLE.clear()
    yield
    for warm in runner_module._WARM.values():
        warm.close()
    runner_module._WARM.clear()
    runner_module._UNWARMABLE.clear()
    runner_module._WARM.update(before)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.getcwd(), **extra}


def _launch(runner, folder: Path, mode: str, env: dict, **launch) -> tuple[object, Path]:
    job = Launch(1, 1, folder, **launch)
    runner.extra_args = ()
    handle = runner.launch(job, env)
    return handle, folder / "process.log"


def _seen(log: Path) -> dict:
    assert wait_until(lambda: log.exists() and log.read_text().strip(), timeout=30)
    return json.loads(log.read_text().splitlines()[0])


def _threads_of_a_new_process(env: dict) -> int:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return int(out)


def _probe(tmp_path, **kw) -> SubprocessRunner:
    return SubprocessRunner(module="tests.warm_probe", preload=True, log_dir=tmp_path / "workers", **kw)


def _argv_mode(runner: SubprocessRunner, mode: str) -> None:
    # The probe reads its mode where run_job reads the run id: in place of "RUN_ID --attempt N".
    runner.argv = lambda job, port=None: [sys.executable, "-m", runner.module, mode]


def test_cpu_jobs_are_forked_from_one_warm_process_each_with_its_environment_and_session(tmp_path):
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    first, first_log = _launch(runner, tmp_path / "a", "0", _env(WARM_PROBE="a", WARM_PROBE_PRELOAD="torch"))
    second, second_log = _launch(runner, tmp_path / "b", "0", _env(WARM_PROBE="a", WARM_PROBE_PRELOAD="torch"),
                                 threads=1)
    assert isinstance(first, ForkedHandle) and isinstance(second, ForkedHandle)
    warm = runner._warm.process.pid
    one, two = _seen(first_log), _seen(second_log)
    for seen, handle in ((one, first), (two, second)):
        assert seen["ppid"] == warm  # forked, not started by this process
        assert seen["pid"] == handle.pid and seen["sid"] == handle.pid  # a session of its own, as Popen gave it
        assert seen["args"] == ["0"] and seen["probe"] == "a" and seen["torch_preloaded"]
    # the short-job lane's thread count reaches a forked job; a job without one keeps torch's default
    assert two["threads"] == 1
    assert one["threads"] == _threads_of_a_new_process(_env(WARM_PROBE_PRELOAD="torch"))
    assert wait_until(lambda: first.poll() == 0 and second.poll() == 0, timeout=30)


def test_exit_codes_tracebacks_and_kill_reach_the_worker(tmp_path):
    runner = _probe(tmp_path)
    env = _env(WARM_PROBE="x")
    handles = {}
    for mode in ("3", "raise", "hang"):
        _argv_mode(runner, mode)
        handles[mode] = _launch(runner, tmp_path / mode, mode, env)
    assert all(isinstance(h, ForkedHandle) for h, _ in handles.values())
    assert wait_until(lambda: handles["3"][0].poll() == 3, timeout=30)
    assert wait_until(lambda: handles["raise"][0].poll() == 1, timeout=30)
    assert "ValueError: probe failed" in handles["raise"][1].read_text()  # the traceback goes to the run's log
    hang, log = handles["hang"]
    _seen(log)
    assert hang.poll() is None and alive(hang.pid)
    hang.kill()
    assert wait_until(lambda: hang.poll() == -signal.SIGKILL, timeout=30)
    assert not alive(hang.pid)


def test_workers_of_one_process_share_its_warm_process_which_outlives_the_thread_that_started_it(tmp_path):
    """``train --wait`` and a test process run a worker per run, in threads that end: the second worker's job is
    forked from the warm process the first one started (settings, WORKBENCH_*, and pytest's current test may
    differ between them)."""
    pids = {}

    def worker_thread(name: str) -> None:
        runner = _probe(tmp_path)
        _argv_mode(runner, "0")
        handle, log = _launch(runner, tmp_path / name, "0", _env(WORKBENCH_HOME=str(tmp_path / name),
                                                                  PYTEST_CURRENT_TEST=name))
        assert isinstance(handle, ForkedHandle) and wait_until(lambda: handle.poll() == 0, timeout=30)
        pids[name] = _seen(log)["ppid"]

    for name in ("first", "second"):
        thread = threading.Thread(target=worker_thread, args=(name,))
        thread.start()
        thread.join(60)
    assert pids["first"] == pids["second"] and alive(pids["first"])
    assert len(runner_module._WARM) == 1


def test_gpu_jobs_and_a_warm_process_that_cannot_import_start_jobs_as_new_processes(tmp_path):
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    gpu, _ = _launch(runner, tmp_path / "gpu", "0", _env(), gpus=(0,))
    assert isinstance(gpu, ProcessHandle) and runner._warm is None and not runner_module._WARM
    broken, log = _launch(runner, tmp_path / "broken", "0", _env(WARM_PROBE_PRELOAD="no_such_module_anywhere"))
    assert isinstance(broken, ProcessHandle)  # the job still ran, as a new process
    assert wait_until(lambda: broken.poll() == 0, timeout=30)
    assert runner.preload is False  # and the next job does not try again


def test_a_warm_process_that_ended_is_replaced_and_another_environment_gets_its_own(tmp_path):
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    first, _ = _launch(runner, tmp_path / "1", "0", _env(WARM_PROBE="a"))
    assert wait_until(lambda: first.poll() == 0, timeout=30)
    warm = runner._warm
    warm.close()
    assert wait_until(lambda: not warm.alive, timeout=30)
    second, log = _launch(runner, tmp_path / "2", "0", _env(WARM_PROBE="a"))
    assert isinstance(second, ForkedHandle) and runner._warm is not warm
    assert _seen(log)["ppid"] == runner._warm.process.pid
    # a variable a library may read at import, changed: another warm process, and the first one stays for its jobs
    replaced = runner._warm
    third, log = _launch(runner, tmp_path / "3", "0", _env(WARM_PROBE="b"))
    assert isinstance(third, ForkedHandle) and runner._warm is not replaced and _seen(log)["probe"] == "b"
    assert replaced.alive and len(runner_module._WARM) == 2


def test_an_idle_warm_process_exits_by_itself():
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "jobs.process.preload", "tests.warm_probe", "--idle", "0.5"],
                          stdin=subprocess.PIPE, capture_output=True, env=_env(), timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[0])["ready"]
    assert time.monotonic() - started < 30


WORKER = """
import json, os, sys, time
from pathlib import Path
from jobs.queue.runner import Launch, SubprocessRunner
runner = SubprocessRunner(module="tests.warm_probe", preload=True, log_dir=Path(sys.argv[1]) / "workers")
runner.argv = lambda job, port=None: [sys.executable, "-m", runner.module, "hang"]
handle = runner.launch(Launch(1, 1, Path(sys.argv[1]) / "job"), dict(os.environ))
print(json.dumps({"job": handle.pid, "warm": runner._warm.process.pid}), flush=True)
time.sleep(3600)
"""


def test_a_worker_killed_with_sigkill_leaves_no_job_running(tmp_path):
    """Nothing of the worker runs any more to clean up: the warm process dies with it, and its jobs with it."""
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path)], stdout=subprocess.PIPE, env=_env(),
                              text=True)
    try:
        pids = json.loads(worker.stdout.readline())
        _seen(tmp_path / "job" / "process.log")
        assert alive(pids["job"]) and alive(pids["warm"])
    finally:
        worker.kill()
        worker.wait(30)
    assert wait_until(lambda: not alive(pids["warm"]) and not alive(pids["job"]), timeout=30)


def test_the_warm_process_imports_what_earlier_jobs_imported_before_it_forks_the_next(tmp_path):
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    env = _env(WARM_PROBE_IMPORT="wave")
    first, log = _launch(runner, tmp_path / "1", "0", env)
    assert _seen(log)["had"] is False  # the first job imports it itself
    assert wait_until(lambda: first.poll() == 0, timeout=30)
    second, log = _launch(runner, tmp_path / "2", "0", env)
    assert _seen(log)["had"] is True and _seen(log)["ppid"] == runner._warm.process.pid


def test_a_warm_process_whose_import_starts_a_thread_stops_forking(tmp_path):
    """A thread holding a lock at fork leaves the lock held in the child forever: such a process must not fork."""
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    job, log = _launch(runner, tmp_path / "job", "0", _env(WARM_PROBE_PRELOAD="tests.warm_probe_thread"))
    assert isinstance(job, ProcessHandle) and _seen(log)["ppid"] == os.getpid()
    assert runner.preload is False and runner._warm.failed


def test_a_learned_import_that_starts_a_thread_stops_forking_but_spares_the_running_jobs(tmp_path):
    runner = _probe(tmp_path)
    env = _env(WARM_PROBE_IMPORT="tests.warm_probe_thread")
    _argv_mode(runner, "hang")
    running, log = _launch(runner, tmp_path / "running", "hang", env)
    _seen(log)
    _argv_mode(runner, "0")
    teacher, log = _launch(runner, tmp_path / "teacher", "0", env)  # imports the module, and so teaches it
    assert isinstance(teacher, ForkedHandle) and wait_until(lambda: teacher.poll() == 0, timeout=30)
    warm = runner._warm
    after, log = _launch(runner, tmp_path / "after", "0", env)
    assert isinstance(after, ProcessHandle) and _seen(log)["ppid"] == os.getpid()  # started as a new process
    assert warm.failed and runner.preload is False
    assert running.poll() is None and alive(running.pid) and warm.alive  # the job already forked goes on
    running.kill()
    assert wait_until(lambda: not warm.alive, timeout=30)  # then the warm process ends


def test_a_fork_that_fails_starts_that_job_as_a_new_process_and_spares_the_running_ones(tmp_path):
    """A process-count limit or no memory for the copy fails one fork: the warm process answers for that job
    only, and goes on (before, the error ended it, and its running jobs died with it)."""
    runner = _probe(tmp_path)
    env = _env(WARM_PROBE_PRELOAD="tests.warm_probe_forkfail")
    _argv_mode(runner, "hang")
    running, log = _launch(runner, tmp_path / "running", "hang", env)  # the first fork
    assert isinstance(running, ForkedHandle) and _seen(log)
    _argv_mode(runner, "0")
    refused, log = _launch(runner, tmp_path / "refused", "0", env)  # the second fork fails
    assert isinstance(refused, ProcessHandle) and _seen(log)["ppid"] == os.getpid()
    assert wait_until(lambda: refused.poll() == 0, timeout=60)
    warm = runner._warm
    assert warm.alive and not warm.failed and runner.preload
    assert running.poll() is None and alive(running.pid)  # the job already forked goes on
    again, log = _launch(runner, tmp_path / "again", "0", env)  # the third fork works
    assert isinstance(again, ForkedHandle) and _seen(log)["ppid"] == warm.process.pid
    assert wait_until(lambda: again.poll() == 0, timeout=30)
    running.kill()
    assert wait_until(lambda: running.poll() == -signal.SIGKILL, timeout=30)
