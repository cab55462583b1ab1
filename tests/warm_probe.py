"""A stand-in job for the warm-process tests (``jobs.process.preload``): prints what it sees as one JSON line
(its arguments, environment, parent, session and torch threads), then exits, raises or hangs as its first
argument says (``until:PATH``: until that file exists). ``WARM_PROBE_PRELOAD`` (comma separated) is what a warm
process imports before forking it; ``WARM_PROBE_IMPORT`` a module the job imports, and ``had`` says whether it
was imported when the job began; ``WARM_PROBE_VALUE`` a module whose ``VALUE`` it prints."""
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
    value = getattr(importlib.import_module(os.environ["WARM_PROBE_VALUE"]), "VALUE", None) \
        if os.environ.get("WARM_PROBE_VALUE") else None
    print(json.dumps({"args": sys.argv[1:], "probe": os.environ.get("WARM_PROBE"), "pid": os.getpid(),
                      "value": value,
                      "ppid": os.getppid(), "sid": os.getsid(0), "torch_preloaded": torch is not None, "had": had,
                      "threads": torch.get_num_threads() if torch is not None else None}), flush=True)
    if mode == "raise":
        raise ValueError("probe failed")
    if mode == "hang":
        time.sleep(3600)
    if mode.startswith("until:"):  # until that file exists
        while not os.path.exists(mode.partition(":")[2]):
            time.sleep(0.05)
        sys.exit(0)
    sys.exit(int(mode) if mode.isdigit() else 0)
