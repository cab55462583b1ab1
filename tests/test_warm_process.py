"""CPU jobs forked from a warm process (jobs.process.preload, SubprocessRunner(preload=True)): each job runs as
``python -m`` would run it, in its own session with its own environment, reports its exit code, can be killed,
dies with the worker's process and not with the warm process, and a launch waits for the warm process's imports
only for a while. The worker's own tests run their subprocess cases both ways (tests/test_worker.py, ``job_runner``)."""
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
from jobs.queue.runner import EXIT_UNKNOWN, ForkedHandle, Launch, ProcessHandle, SubprocessRunner
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


def _warm(runner: SubprocessRunner, env: dict, tmp_path: Path):
    """Start the warm process ``runner`` forks jobs with ``env`` from, and wait until it has imported."""
    warm = runner.warm_up(env, tmp_path)
    assert warm is not None and wait_until(lambda: warm.ready or not warm.alive, timeout=120)
    return warm


def _probe(tmp_path, **kw) -> SubprocessRunner:
    return SubprocessRunner(module="tests.warm_probe", preload=True, log_dir=tmp_path / "workers", **kw)


def _argv_mode(runner: SubprocessRunner, mode: str) -> None:
    # The probe reads its mode where run_job reads the run id: in place of "RUN_ID --attempt N".
    runner.argv = lambda job, port=None: [sys.executable, "-m", runner.module, mode]


def test_cpu_jobs_are_forked_from_one_warm_process_each_with_its_environment_and_session(tmp_path):
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    _warm(runner, _env(WARM_PROBE="a", WARM_PROBE_PRELOAD="torch"), tmp_path)
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
    _warm(runner, env, tmp_path)
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
        env = _env(WORKBENCH_HOME=str(tmp_path / name), PYTEST_CURRENT_TEST=name)
        if name == "first":
            _warm(runner, env, tmp_path)
        handle, log = _launch(runner, tmp_path / name, "0", env)
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
    env = _env(WARM_PROBE_PRELOAD="no_such_module_anywhere")
    broken, log = _launch(runner, tmp_path / "broken", "0", env)
    assert isinstance(broken, ProcessHandle)  # the job still ran, as a new process
    assert wait_until(lambda: broken.poll() == 0, timeout=30)
    warm = runner._warm
    assert wait_until(lambda: warm.failed, timeout=60)
    again, _ = _launch(runner, tmp_path / "again", "0", env)
    assert isinstance(again, ProcessHandle) and wait_until(lambda: again.poll() == 0, timeout=30)
    assert runner.preload is False  # and the next job does not try again


def test_a_warm_process_that_ended_is_replaced_and_another_environment_gets_its_own(tmp_path):
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    warm = _warm(runner, _env(WARM_PROBE="a"), tmp_path)
    first, _ = _launch(runner, tmp_path / "1", "0", _env(WARM_PROBE="a"))
    assert isinstance(first, ForkedHandle) and wait_until(lambda: first.poll() == 0, timeout=30)
    warm.close()
    assert wait_until(lambda: not warm.alive, timeout=30)
    assert _warm(runner, _env(WARM_PROBE="a"), tmp_path) is not warm
    second, log = _launch(runner, tmp_path / "2", "0", _env(WARM_PROBE="a"))
    assert isinstance(second, ForkedHandle) and runner._warm is not warm
    assert _seen(log)["ppid"] == runner._warm.process.pid
    # a variable a library may read at import, changed: another warm process, and the first one stays for its jobs
    replaced = runner._warm
    _warm(runner, _env(WARM_PROBE="b"), tmp_path)
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
warm = runner.warm_up(dict(os.environ), Path(sys.argv[1]))
while not warm.ready:
    time.sleep(0.05)
handle = runner.launch(Launch(1, 1, Path(sys.argv[1]) / "job"), dict(os.environ))
print(json.dumps({"job": handle.pid, "warm": runner._warm.process.pid}), flush=True)
time.sleep(3600)
"""


def test_a_worker_killed_with_sigkill_leaves_no_job_running(tmp_path):
    """Nothing of the worker runs any more to clean up: the warm process dies with it, and so do its jobs (they
    watch a pipe only the worker's process holds open)."""
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path)], stdout=subprocess.PIPE, env=_env(),
                              text=True)
    try:
        pids = json.loads(worker.stdout.readline())
        assert _seen(tmp_path / "job" / "process.log")["ppid"] == pids["warm"]  # forked
        assert alive(pids["job"]) and alive(pids["warm"])
    finally:
        worker.kill()
        worker.wait(30)
    assert wait_until(lambda: not alive(pids["warm"]) and not alive(pids["job"]), timeout=30)


def test_the_warm_process_imports_what_earlier_jobs_imported_before_it_forks_the_next(tmp_path):
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    env = _env(WARM_PROBE_IMPORT="tests.warm_probe_learned")
    warm = _warm(runner, env, tmp_path)
    first, log = _launch(runner, tmp_path / "1", "0", env)
    assert isinstance(first, ForkedHandle) and _seen(log)["had"] is False  # the first job imports it itself
    assert wait_until(lambda: first.poll() == 0, timeout=30)
    assert wait_until(lambda: "tests.warm_probe_learned" in warm.learned, timeout=30)  # learned while idle
    second, log = _launch(runner, tmp_path / "2", "0", env)
    assert _seen(log)["had"] is True and _seen(log)["ppid"] == warm.process.pid
    # a package the warm process does not hold is never learned (its import could start native threads)
    other = _env(WARM_PROBE_IMPORT="wave")
    _warm(runner, other, tmp_path)
    third, log = _launch(runner, tmp_path / "3", "0", other)
    assert isinstance(third, ForkedHandle) and wait_until(lambda: third.poll() == 0, timeout=30)
    fourth, log = _launch(runner, tmp_path / "4", "0", other)
    assert isinstance(fourth, ForkedHandle) and _seen(log)["had"] is False and "wave" not in runner._warm.learned


def test_a_warm_process_whose_import_starts_a_thread_stops_forking(tmp_path):
    """A thread holding a lock at fork leaves the lock held in the child forever: such a process must not fork."""
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    env = _env(WARM_PROBE_PRELOAD="tests.warm_probe_thread")
    assert _warm(runner, env, tmp_path).failed
    job, log = _launch(runner, tmp_path / "job", "0", env)
    assert isinstance(job, ProcessHandle) and _seen(log)["ppid"] == os.getpid()
    assert runner.preload is False


@pytest.mark.parametrize("module", ["tests.warm_probe_thread", "tests.warm_probe_native_thread"])
def test_a_learned_import_that_starts_a_thread_stops_forking_but_spares_the_running_jobs(tmp_path, module):
    """A Python thread, or a native one that ``threading`` does not list: the kernel's count of the warm process's
    threads (``/proc/self/task``) sees both."""
    runner = _probe(tmp_path)
    env = _env(WARM_PROBE_IMPORT=module)
    warm = _warm(runner, env, tmp_path)
    _argv_mode(runner, "hang")
    running, log = _launch(runner, tmp_path / "running", "hang", env)
    _seen(log)
    _argv_mode(runner, "0")
    teacher, log = _launch(runner, tmp_path / "teacher", "0", env)  # imports the module, and so teaches it
    assert isinstance(teacher, ForkedHandle) and wait_until(lambda: teacher.poll() == 0, timeout=30)
    assert wait_until(lambda: warm.failed, timeout=30)  # it learned the module, and stopped forking
    assert module in warm.learned
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
    _warm(runner, env, tmp_path)
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


def test_a_warm_process_that_dies_leaves_its_jobs_running_and_the_worker_follows_them(tmp_path):
    """The OOM killer or a user ends the warm process: its jobs are the worker's, not its own. They run on; the
    worker sees them end through their pidfds, with an exit status nobody can read any more (``EXIT_UNKNOWN``),
    and can still kill them. Before, they died with it and were recorded as killed for lack of memory."""
    runner = _probe(tmp_path)
    env = _env()
    warm = _warm(runner, env, tmp_path)
    done = tmp_path / "done"
    _argv_mode(runner, f"until:{done}")
    finishing, finishing_log = _launch(runner, tmp_path / "finishing", "until", env)
    _argv_mode(runner, "hang")
    hanging, hanging_log = _launch(runner, tmp_path / "hanging", "hang", env)
    assert isinstance(finishing, ForkedHandle) and isinstance(hanging, ForkedHandle)
    _seen(finishing_log), _seen(hanging_log)
    os.kill(warm.process.pid, signal.SIGKILL)
    assert wait_until(lambda: not warm.alive, timeout=30)
    time.sleep(0.5)
    assert alive(finishing.pid) and alive(hanging.pid)
    assert finishing.poll() is None and hanging.poll() is None
    done.touch()
    assert wait_until(lambda: finishing.poll() == EXIT_UNKNOWN, timeout=30)
    assert not alive(finishing.pid)
    hanging.kill()
    assert wait_until(lambda: hanging.poll() == EXIT_UNKNOWN, timeout=30)
    assert not alive(hanging.pid)
    # and the next job gets a new warm process
    _argv_mode(runner, "0")
    assert _warm(runner, env, tmp_path) is not warm
    after, log = _launch(runner, tmp_path / "after", "0", env)
    assert isinstance(after, ForkedHandle) and wait_until(lambda: after.poll() == 0, timeout=30)


def test_a_launch_waits_for_the_warm_process_to_import_only_for_a_while(tmp_path, monkeypatch):
    """The worker's loop (heartbeats, cancels, reaping) runs on the thread that launches: a warm process still
    importing is waited for at most ``WARM_READY_WAIT_S`` (15 s, a quarter of a lease; 1 s here), then the job starts
    as a new process, and the jobs after it are forked. Before, a launch waited up to 60 s."""
    monkeypatch.setattr(runner_module, "WARM_READY_WAIT_S", 1.0)
    runner = _probe(tmp_path)
    _argv_mode(runner, "0")
    env = _env(WARM_PROBE_PRELOAD="tests.warm_probe_slow", WARM_PROBE_SLOW_SECONDS="8")
    started = time.monotonic()
    first, log = _launch(runner, tmp_path / "first", "0", env)
    took = time.monotonic() - started
    assert isinstance(first, ProcessHandle) and 1.0 <= took < 7, took  # the warm process imports for 8 s
    assert _seen(log)["ppid"] == os.getpid() and wait_until(lambda: first.poll() == 0, timeout=30)
    warm = runner._warm
    assert not warm.ready and runner.preload  # not given up: it is only not ready yet
    assert wait_until(lambda: warm.ready, timeout=120)
    second, log = _launch(runner, tmp_path / "second", "0", env)
    assert isinstance(second, ForkedHandle) and _seen(log)["ppid"] == warm.process.pid


def test_code_changed_on_disk_retires_the_warm_process_and_the_next_one_runs_the_new_code(tmp_path):
    """An upgrade while the server runs: a job forked from a warm process that imported the old code would run a
    mix of old and new. The warm process notices before the fork; that job starts as a new process, the next
    ones from a new warm process, and the old one ends once its jobs have."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "warm_probe_code.py").write_text("VALUE = 1\n")
    runner = _probe(tmp_path)
    env = {**_env(WARM_PROBE_PRELOAD="warm_probe_code", WARM_PROBE_VALUE="warm_probe_code"),
           "PYTHONPATH": f"{os.getcwd()}:{code}"}
    old = _warm(runner, env, tmp_path)
    _argv_mode(runner, "hang")
    running, log = _launch(runner, tmp_path / "running", "hang", env)
    assert isinstance(running, ForkedHandle) and _seen(log)["value"] == 1
    (code / "warm_probe_code.py").write_text("VALUE = 22\n")  # another size, whatever the clock's resolution
    _argv_mode(runner, "0")
    upgraded, log = _launch(runner, tmp_path / "upgraded", "0", env)
    assert isinstance(upgraded, ProcessHandle) and _seen(log)["value"] == 22
    assert old.stale and runner.preload  # not given up: a new warm process will do
    new = _warm(runner, env, tmp_path)
    assert new is not old
    after, log = _launch(runner, tmp_path / "after", "0", env)
    assert isinstance(after, ForkedHandle) and _seen(log) == {**_seen(log), "value": 22, "ppid": new.process.pid}
    assert old.alive  # it waits for its running job
    running.kill()
    assert wait_until(lambda: not old.alive, timeout=30)
