"""A prediction job's heap: large buffers from their own mappings, so that its memory stays flat.

glibc raises its mmap threshold each time a buffer it had mapped is freed, up to 32 MiB. After the first few
forward passes, the activations of every later pass come from the heap, and the heap fragments: over 1,000 long
reviews a job's RSS grew from 815 to 990 MB. With the threshold fixed at 1 MiB, it stayed at 697 to 704 MB
(``bench/long_documents.py``, ``predict-1000``; bench/results/long_documents_cpu.json).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD = 1 << 20


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Serve allocations of ``size`` bytes or more from their own mappings, and stop glibc raising that
    threshold; False where the C library is not glibc (nothing is changed there)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    done = bool(mallopt(M_MMAP_THRESHOLD, int(size)))
    if not done:
        log.info("mallopt(M_MMAP_THRESHOLD, %d) was refused: the heap keeps its own threshold", size)
    return done
