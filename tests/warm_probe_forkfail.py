"""Preloaded by a warm process in tests/test_warm_process.py: its second fork, and every second one after, fails
as a process-count limit (EAGAIN) makes ``fork()`` fail."""
import errno
import os

_fork = os.fork
_calls = [0]


def _every_second_fork_fails() -> int:
    _calls[0] += 1
    if _calls[0] % 2 == 0:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable (warm_probe_forkfail)")
    return _fork()


os.fork = _every_second_fork_fails
