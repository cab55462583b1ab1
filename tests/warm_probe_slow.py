"""A module whose import takes ``WARM_PROBE_SLOW_SECONDS`` (20 by default): a warm process preloading it is not
ready for that long, and a launch must not wait for it."""
import os
import time

time.sleep(float(os.environ.get("WARM_PROBE_SLOW_SECONDS", "20")))
