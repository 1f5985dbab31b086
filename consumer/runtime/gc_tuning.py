"""The garbage collector, set for a long-running worker.

CPython's cyclic collector runs a young-generation pass every 700 net allocations and, every so
often, a full pass over every tracked object. A worker's heap is mostly what start-up built and
never frees (botocore's service models, the settings, imported modules: hundreds of thousands of
objects) plus records that live for one batch. With the defaults, a full pass re-scans the start-up
heap again and again, and a batch's records survive enough young passes to be promoted and scanned
later: on the record path, those passes are a large share of each record's CPU.

So, once start-up is done: :func:`gc.freeze` moves everything alive into the permanent generation
(never scanned again; it is not garbage), and the young threshold is raised so that a batch's
short-lived objects mostly die before a pass sees them. Reference counting still frees almost
everything at once; only cycles wait for a pass, and passes still run.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
"""Net allocations between young passes (CPython's default is 700): about one batch of parsed records."""
OLDER_THRESHOLDS = (20, 20)
"""Young passes per middle pass, middle passes per full pass (defaults 10, 10)."""


def tune_for_long_running() -> tuple[int, int, int]:
    """Freeze the start-up heap and raise the thresholds; returns the thresholds it replaced.

    Call it once, after everything the process keeps for its life is built and before the first
    record is read (``Worker.run`` does).
    """
    before = gc.get_threshold()
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    return before
