"""SIGTERM and SIGINT turned into a call made on a thread of its own, never inside the main thread.

Python runs a signal handler on the main thread, between two of its bytecodes, and so possibly while
that thread holds a lock the handler needs. The worker's main thread spends its life in the
scheduler's ``Event.wait`` and ``Event.clear``, each holding the event's lock for a moment; a
handler that set that event waited for a lock its own thread held, and the worker never stopped
(the unit of a rolling deploy had to be killed, its leases left to expire). The handler installed
here takes no lock and calls nothing: the interpreter's C-level handler writes the signal's number
to a pipe (:func:`signal.set_wakeup_fd`), and a daemon thread reading that pipe makes the call.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType, TracebackType
from typing import Any

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _noted(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler: nothing to do on the main thread (the pipe carries the signal)."""


class StopSignals:
    """While installed, each of ``signals`` received calls ``on_signal(signum)`` on the thread
    ``stop-signals``. Install and close on the main thread (``signal`` allows no other)."""

    def __init__(
        self, on_signal: Callable[[int], None], signals: Iterable[signal.Signals] = STOP_SIGNALS
    ) -> None:
        self._on_signal = on_signal
        self._signals = tuple(signals)
        self._previous: dict[int, Any] = {}
        self._previous_fd: int | None = None  # set while the pipe is the wakeup descriptor
        self._write_end: int | None = None
        self._thread: threading.Thread | None = None

    def install(self) -> StopSignals:
        """Listen first, then route the signals to the pipe: a signal is never sent where nobody
        reads. Whatever fails (``signal`` refuses any thread but the main one) undoes what was done."""
        if self._write_end is not None:
            raise RuntimeError("stop signals already installed")
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # the C handler must never block on a full pipe
        thread = threading.Thread(target=self._listen, args=(read_end,), name="stop-signals", daemon=True)
        try:
            thread.start()
        except BaseException:
            os.close(read_end)
            os.close(write_end)
            raise
        self._write_end, self._thread = write_end, thread
        try:
            self._previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
            for sig in self._signals:
                self._previous[int(sig)] = signal.signal(sig, _noted)
        except BaseException:
            self.close()
            raise
        return self

    def _listen(self, read_end: int) -> None:
        """Owns the read end: reads until close() closes the write end, then closes it."""
        wanted = {int(sig) for sig in self._signals}
        try:
            while data := os.read(read_end, 64):
                for signum in data:
                    if signum in wanted:
                        try:
                            self._on_signal(signum)
                        except Exception:  # a failed stop request must not end the listening
                            log.exception("handling %s failed", signal.Signals(signum).name)
        finally:
            os.close(read_end)

    def close(self) -> None:
        """Put back the handlers, then the wakeup descriptor found at install (a signal between
        the two still reaches the pipe, not a handler with nowhere to send it), and end the thread."""
        if self._write_end is None:
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        if self._previous_fd is not None:
            # warn_on_full_buffer goes back to its default: signal cannot say what it was
            signal.set_wakeup_fd(self._previous_fd)
            self._previous_fd = None
        os.close(self._write_end)  # the thread reads end-of-file, closes the read end and returns
        self._write_end = None
        if self._thread is not None:
            self._thread.join(timeout=5)  # in a call to on_signal still: it ends after the call
            self._thread = None

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
