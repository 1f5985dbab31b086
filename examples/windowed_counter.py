"""A tumbling-window counter: changes per window and event name, written once the window is final.

```yaml
processing:
  processor: examples.windowed_counter:WindowedCounter
  options: {output: var/windows}        # one JSON file per shard and window
  tumbling_window_seconds: 60
worker:
  call_process_records_even_for_empty_record_list: true   # lets an idle shard close its window
```

The state (``batch.state``) is a small JSON object carried from batch to batch and saved with each
checkpoint, so a worker that takes the shard over resumes the counts instead of starting at zero.
On the final call (``batch.window.is_final``) the counts are written to
``<output>/<shard id>/<window start>.json``; a final call can be repeated after a crash, and the file
is simply written again with the same counts. Run it: ``python -m examples.windowed_counter``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from consumer.processing import WindowedBatch


class WindowedCounter:
    def __init__(self, output: str | None = None) -> None:
        self._output = Path(output) if output else None
        self.finals: list[dict[str, Any]] = []  # what was written, for the demo below and tests

    def handle(self, batch: WindowedBatch) -> dict[str, Any]:
        state = dict(batch.state)  # the state of this window so far ({} when it starts)
        for record in batch.records:
            state["records"] = state.get("records", 0) + 1
            state[record.event_name] = state.get(record.event_name, 0) + 1
        if batch.window.is_final:
            self._write(batch, state)
        return state  # saved with the next checkpoint

    def _write(self, batch: WindowedBatch, state: dict[str, Any]) -> None:
        result = {
            "shardId": batch.shard_id,
            "windowStart": batch.window.start,
            "windowEnd": batch.window.end,
            "shardEnded": batch.window.shard_ended,
            "records": state.get("records", 0),
            "byEvent": {k: v for k, v in state.items() if k != "records"},
        }
        self.finals.append(result)
        if self._output is None:
            return
        target = self._output / batch.shard_id / f"{int(batch.window.start)}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(result, handle, sort_keys=True)
        os.replace(temporary, target)  # a repeated final call rewrites the same counts


def main() -> None:
    from consumer.processing import (
        InitializationInput,
        InMemoryCheckpointer,
        ProcessRecordsInput,
        ShardEndedInput,
        windowed_processor,
    )
    from consumer.records import ShardInfo
    from examples.sample_records import SHARD_ID, sample_records

    counter = WindowedCounter()
    processor = windowed_processor(counter.handle, seconds=4)  # sample records are 1 s apart
    shard = ShardInfo(SHARD_ID)
    checkpointer = InMemoryCheckpointer(SHARD_ID)
    processor.initialize(InitializationInput(shard, "TRIM_HORIZON"))
    records = sample_records()
    checkpointer.delivered(records[-1].sequence_number)  # what the lifecycle does before each batch
    processor.process_records(ProcessRecordsInput(records, checkpointer, 0, shard))
    checkpointer.at_shard_end = True
    processor.shard_ended(ShardEndedInput(shard, checkpointer))  # the open window's final call
    for final in counter.finals:
        print(f"window {int(final['windowStart'])}: {final['records']} changes {final['byEvent']}")
    print(f"checkpoint: {checkpointer.last_checkpoint}")


if __name__ == "__main__":
    main()
