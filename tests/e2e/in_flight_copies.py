"""The one change-log copy a fleet run with a frozen worker may hold (consumer/sinks/changelog.py).

The sink checks that its worker still holds the lease before each object it writes, and a worker
woken past the failover time fences itself before it writes again. A SIGSTOP that falls after that
check and before the object is in place (``write_atomically`` renames a finished temporary file)
leaves the write in flight: it finishes after the SIGCONT, by when the next owner may have listed
the shard's objects and landed the same records in an object of its own. The pipeline's
de-duplication by (shard, sequence number) absorbs such a copy; any other means two workers wrote
one shard at once.
"""

from __future__ import annotations

from pathlib import Path

Copies = tuple[tuple[str, float], ...]  # (object, landed at) of each copy, in landing order


def unexplained_copies(
    duplicates: list[tuple[str, str, Copies]], changelog: Path, frozen_between: tuple[float, float]
) -> list[str]:
    """Every duplicated (shard, sequence number) (``Verdict.duplicate_copies``) but those of the
    frozen worker's write in flight: two copies, the first landed (its lines' time) before the
    SIGSTOP and its object put in place (the file's ctime, which the rename sets) after the SIGCONT
    and after the second copy landed -- so the second copy's writer, listing the shard's objects
    before it wrote, could not have seen it."""
    stopped, resumed = frozen_between
    unexplained = []
    for shard, sequence, copies in duplicates:
        if len(copies) == 2:
            (first, first_at), (_, second_at) = copies
            visible = (changelog / first).stat().st_ctime
            if first_at <= stopped and visible >= resumed and visible > second_at:
                continue
        unexplained.append(f"{shard} {sequence}: {copies}")
    return unexplained
