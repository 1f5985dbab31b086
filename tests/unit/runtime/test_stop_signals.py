"""SIGTERM reaches the worker's stop while its main thread holds the lock that stop needs
(consumer.runtime.stop_signals): each case runs in a fresh interpreter, since a handler that
deadlocks takes its process with it.

Found by the rolling-deploy bench on 63a1ecc: one old unit of three did not stop within 120 s of its
SIGTERM. The handler then ran ``request_stop`` on the main thread, and ``request_stop`` sets the
scheduler's wake event, whose lock the main thread holds for a moment in every turn of its loop.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run_script(body: str, timeout: float = 30) -> subprocess.CompletedProcess[str] | None:
    """Run ``body`` in a fresh interpreter; None when it did not end within ``timeout`` (killed)."""
    try:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(body)],
            capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None


HOLD_AND_SIGNAL = """
    import os, signal, threading, time
    {install}
    with held:  # the main thread holds the lock the stop needs when the signal arrives
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)  # Python runs its handler here, on this thread
    assert stopped.wait(10), "the stop was never made"
    print("stopped on", stopped_on[0])
"""


STOP_SIGNALS = """
    from consumer.runtime.stop_signals import StopSignals
    held, stopped, stopped_on = threading.Lock(), threading.Event(), []
    def stop(signum):
        with held:
            stopped_on.append(threading.current_thread().name)
            stopped.set()
    StopSignals(stop).install()
"""
PYTHON_HANDLER = """
    held, stopped, stopped_on = threading.Lock(), threading.Event(), []
    def stop(signum, frame):
        with held:
            stopped_on.append(threading.current_thread().name)
            stopped.set()
    signal.signal(signal.SIGTERM, stop)
"""


def test_a_signal_arriving_while_the_main_thread_holds_the_lock_is_handled_once_it_lets_go() -> None:
    done = run_script(HOLD_AND_SIGNAL.format(install=STOP_SIGNALS))
    assert done is not None, "the process hung on its own signal"
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped on stop-signals"


def test_the_hazard_is_real_a_handler_taking_that_lock_on_the_main_thread_never_returns() -> None:
    """The same case with the handler Python runs on the main thread (what the worker had): the
    process hangs, so the test above cannot pass by the case being harmless."""
    done = run_script(HOLD_AND_SIGNAL.format(install=PYTHON_HANDLER), timeout=5)
    assert done is None


def test_a_worker_signalled_while_its_loop_holds_the_wake_event_stops_and_returns() -> None:
    """The worker's own case: its main thread inside the scheduler's wake event (Event.wait and
    clear hold the event's lock), SIGTERM arrives, and run() still drains and returns."""
    done = run_script("""
        import os, signal, time
        from consumer.leases.memory import InMemoryLeaseStore
        from consumer.runtime.assembly import Ports
        from consumer.runtime.worker import Worker
        from ground.settings import WorkerSettings
        from tests.unit.runtime.test_worker_start import NoShards, handle

        worker = Worker(WorkerSettings(), Ports(InMemoryLeaseStore(), NoShards(), lambda shard: handle))
        signals = worker.install_signal_handlers()
        with worker.scheduler._wake._cond:  # as the loop holds it for a moment in each turn
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)
        worker.run()
        signals.close()
        print("stopping" if worker.stopping else "not stopping")
    """)
    assert done is not None, "the worker hung on its SIGTERM"
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopping"


def test_closing_puts_back_the_handlers_and_the_wakeup_descriptor_found_and_ends_the_thread() -> None:
    done = run_script("""
        import os, signal, threading
        from consumer.runtime.stop_signals import StopSignals
        def mine(signum, frame):
            pass
        signal.signal(signal.SIGTERM, mine)
        theirs, _ = os.pipe()  # someone else's wakeup descriptor (asyncio's, say)
        os.set_blocking(theirs, False)
        signal.set_wakeup_fd(theirs)
        interrupt = signal.getsignal(signal.SIGINT)  # SIG_IGN when started in the background
        descriptors = sorted(os.listdir("/proc/self/fd"))
        with StopSignals(lambda signum: None):
            assert signal.getsignal(signal.SIGTERM) is not mine
            assert signal.set_wakeup_fd(-1) != theirs  # (and put the pipe's back)
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is interrupt
        assert signal.set_wakeup_fd(-1) == theirs
        assert "stop-signals" not in [t.name for t in threading.enumerate()]
        assert sorted(os.listdir("/proc/self/fd")) == descriptors, "the pipe was left open"
        print("ok")
    """)
    assert done is not None and done.returncode == 0, done and done.stderr
    assert done.stdout.strip() == "ok"


def test_installing_off_the_main_thread_fails_and_leaves_nothing_behind() -> None:
    """``signal`` refuses any thread but the main one: the listener already started and the pipe
    are undone, and the handlers are untouched."""
    done = run_script("""
        import os, signal, threading
        from consumer.runtime.stop_signals import StopSignals
        descriptors = sorted(os.listdir("/proc/self/fd"))
        failures = []
        def install():
            try:
                StopSignals(lambda signum: None).install()
            except ValueError as exc:
                failures.append(str(exc))
        thread = threading.Thread(target=install)
        thread.start()
        thread.join()
        assert failures, "installed off the main thread"
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert signal.set_wakeup_fd(-1) == -1
        assert "stop-signals" not in [t.name for t in threading.enumerate()]
        assert sorted(os.listdir("/proc/self/fd")) == descriptors, "the pipe was left open"
        print("ok")
    """)
    assert done is not None and done.returncode == 0, done and done.stderr
    assert done.stdout.strip() == "ok"
