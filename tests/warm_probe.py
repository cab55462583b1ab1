"""A stand-in job for the warm-process tests (``jobs.process.preload``): prints what it sees as one JSON line
(its arguments, environment, parent, session and torch threads), then exits, raises or hangs as its first
argument says. ``WARM_PROBE_PRELOAD`` (comma separated) is what a warm process imports before forking it;
``WARM_PROBE_IMPORT`` a module the job imports, and ``had`` says whether it was imported when the job began."""
import importlib
import json
import os
import sys
import time

PRELOAD = tuple(filter(None, os.environ.get("WARM_PROBE_PRELOAD", "").split(",")))

if __name__ == "__main__":
    mode = sys.argv[1]
    torch = sys.modules.get("torch")
    wanted = os.environ.get("WARM_PROBE_IMPORT")
    had = wanted in sys.modules if wanted else None
    if wanted:
        importlib.import_module(wanted)
    print(json.dumps({"args": sys.argv[1:], "probe": os.environ.get("WARM_PROBE"), "pid": os.getpid(),
                      "ppid": os.getppid(), "sid": os.getsid(0), "torch_preloaded": torch is not None, "had": had,
                      "threads": torch.get_num_threads() if torch is not None else None}), flush=True)
    if mode == "raise":
        raise ValueError("probe failed")
    if mode == "hang":
        time.sleep(3600)
    sys.exit(int(mode) if mode.isdigit() else 0)
