"""Writing a local file so that no reader ever sees half of it: write a temporary file beside it,
flush it to disk, then rename it over the target (``os.replace`` is atomic on one file system).

The change log's local objects, local dead letters, the snapshot table's pointer and the worker's
heartbeat file are all read by other processes while they are rewritten; each goes through here.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(target: Path, data: bytes | str, *, durable: bool = True) -> None:
    """Put ``data`` at ``target`` whole or not at all; ``durable``: on disk before the rename (a
    crash then leaves the old file or the new one, never an empty one). Raises ``OSError``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
