"""`consumer pipeline follow`'s SIGTERM / SIGINT handler only notes the signal (pipeline/jobs.py):
Python runs it on the main thread, which may be inside its own write to stdout at that moment, and a
print from the handler then raises ("reentrant call") instead of stopping. The loop says it is
stopping when it next asks, and the handlers found are put back."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

import pytest

from pipeline import jobs
from pipeline.follow import FollowResult
from tests.pipeline.fixtures import settings_for


def test_the_handler_prints_nothing_and_the_loop_says_it_is_stopping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    seen: dict[str, Any] = {}

    def follow(_spark: Any, _settings: Any, *, stop: Any, **__: Any) -> FollowResult:
        assert stop() is False
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)  # as Python would, between two bytecodes of this thread
        seen["said by the handler"] = list(said)
        seen["stop"] = stop()
        seen["stop again"] = stop()
        return FollowResult()

    before = signal.getsignal(signal.SIGTERM)

    class NoSpark:  # follow itself is replaced: no session is needed
        def stop(self) -> None:
            pass

    monkeypatch.setattr(jobs, "build_session_for", lambda master, verbose=False: NoSpark())
    monkeypatch.setattr(jobs, "follow", follow)
    monkeypatch.setattr(jobs, "_say", said.append)
    args = argparse.Namespace(job="follow", minutes=None, publish_metrics=False, no_maintenance=True)
    assert jobs.execute(args, settings_for(tmp_path), None) == 0
    assert seen == {"said by the handler": [], "stop": True, "stop again": True}
    assert said[0] == "[follow] SIGTERM: stopping after the run in progress"
    assert said.count(said[0]) == 1
    assert said[1].startswith("[follow] stopped: 0 run(s)")
    assert signal.getsignal(signal.SIGTERM) is before
