"""The worker keeps what it frees for the next response: no page faults per GetRecords body.

Run in a fresh interpreter (the setting is the process's): a response's life -- 64 KiB chunks
joined into a body, a copy of it, all freed -- repeated, with glibc's defaults and then after
``keep_freed_memory``; the page faults are counted by the kernel (``ru_minflt``), not timed.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

RESPONSES = r"""
import json, resource, sys
from consumer.runtime.allocator import keep_freed_memory

body = bytes(1_200_000)

def responses(count):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(count):
        chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
        joined = b"".join(chunks)
        del chunks
        copy = bytes(bytearray(joined))
        del joined, copy
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / count

responses(3)
default = responses(20)
kept = keep_freed_memory()
responses(3)
print(json.dumps({"default": default, "kept": kept, "tuned": responses(20)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_responses_stop_faulting_their_memory_in_once_freed_memory_is_kept() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RESPONSES], capture_output=True, text=True, timeout=120, check=True
    )
    faults = json.loads(done.stdout)
    assert faults["kept"] is True
    assert faults["default"] > 300  # a 1.2 MB body is ~300 pages: they come from the kernel every time
    assert faults["tuned"] < 5
