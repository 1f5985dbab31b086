"""glibc's allocator, set for a worker that allocates and frees a response body many times a second.

Every GetRecords response (about 1 MB at most) is read by urllib3 in 64 KiB chunks that botocore
joins into one body; the worker cuts the body into its records and frees it. With glibc's defaults
a block of 128 KiB or more is mapped on its own and unmapped when freed, and a free top of the heap
above a threshold is handed back to the kernel. glibc raises both thresholds after freeing a mapped
block, but the trim threshold only to twice that block, and a response's chunks and body, freed
together, are more: each response's memory still came fresh from the kernel, ~560 page faults per
1.2 MB response, 1.2 ms of CPU where copying the bytes takes 0.27 ms (measured on a 2-core VM).

:func:`keep_freed_memory` sets both thresholds once: blocks below :data:`MMAP_THRESHOLD` come from
the heap, and up to :data:`TRIM_THRESHOLD` of free heap top is kept for the next responses instead
of being returned.

Why this is safe for a worker. Nothing is allocated that would not have been: memory the process
already had is kept instead of being given back and faulted in again, so its resident size stays
near the peak it reached rather than falling back between responses — what a worker is provisioned
for anyway (bench/memory.py measures the peak per in-flight record). The bound is per malloc arena
(glibc gives threads up to 8 per core): each keeps at most :data:`TRIM_THRESHOLD` of free top, and
only what it once used. Python's own small objects live in arenas it maps itself, which these
settings do not touch. Both values are within glibc's limits (the mmap threshold's maximum is
32 MiB on 64-bit), and setting them turns off glibc's dynamic adjustment, which is what lets a
response's memory be kept. Only ``Worker.run`` calls it (through
:func:`~consumer.runtime.gc_tuning.tune_for_long_running`), never a worker embedded in another
program (``Worker(tune_gc=False)``), whose allocator is that program's. Where the C library has no
``mallopt`` (macOS) or refuses it (musl's does nothing), nothing is changed.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 4 * 2**20
"""A GetRecords body (at most 1 MB, as the service sends it) and its chunks come from the heap."""
TRIM_THRESHOLD = 64 * 2**20
"""Free heap top kept for reuse: a few dozen responses in flight at once, with their chunks."""


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (see the module docstring); False where the C library
    has no ``mallopt`` or refused it."""
    try:
        # The C library this process already runs on (no search, no subprocess).
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
