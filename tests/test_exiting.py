"""storage.exiting.exit_process: a process ends as ``sys.exit`` would end it, less the final sweep of the garbage
collector (what the job processes, the warm process and the CLI end with)."""
from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import atexit, gc, logging, sys
from storage.exiting import exit_process

logging.basicConfig(filename=sys.argv[1], level=logging.INFO)
atexit.register(lambda: print(f"at exit: {gc.get_freeze_count()} objects frozen", file=sys.stderr))
kept = [list(range(100)) for _ in range(1000)]  # what the imports leave: alive until the very end
logging.info("the job wrote its last line")
sys.stdout.write("no newline, still buffered")
exit_process(3)
print("never reached")
"""


def test_the_exit_code_atexit_handlers_and_buffered_output_survive_and_the_objects_are_frozen(tmp_path):
    log = tmp_path / "job.log"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "no newline, still buffered"
    frozen = int(done.stderr.split("at exit: ")[1].split()[0])
    assert frozen > 1000  # the list above and everything else that was alive at exit_process
    assert log.read_text() == "INFO:root:the job wrote its last line\n"


def test_the_cli_freezes_only_as_the_workbench_command_not_when_main_is_called_in_a_process_that_goes_on():
    import gc

    import pytest

    from workbench.cli import main

    alive = [[i] for i in range(10_000)]  # a freeze now would take these too
    before = gc.get_freeze_count()
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0 and gc.get_freeze_count() < before + len(alive)
    script = "import gc, atexit, sys; atexit.register(lambda: print(gc.get_freeze_count() > 0, file=sys.stderr)); " \
             "from workbench.cli import entry; sys.argv = ['workbench', '--help']; entry()"
    ended = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert ended.returncode == 0 and "Usage" in ended.stdout and ended.stderr.strip().endswith("True"), ended.stderr
