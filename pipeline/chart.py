"""The stats chart: changes per minute by event type, and the lag percentiles, as one PNG.

Takes plain rows (already collected, small) so that it needs no Spark and is easy to test.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # the backend is chosen first


def render(per_minute: Sequence[Any], lag: Any | None, destination: Path) -> Path:
    """Write the chart; ``per_minute`` rows have minute/event_name/changes, ``lag`` p50..max seconds."""
    figure, (rate_axis, lag_axis) = plt.subplots(
        1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 1]}
    )
    series: dict[str, list[tuple[datetime, int]]] = defaultdict(list)
    for row in per_minute:
        series[row["event_name"]].append((row["minute"], row["changes"]))
    for event in ("INSERT", "MODIFY", "REMOVE"):
        points = sorted(series.get(event, []))
        if points:
            rate_axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=event)
    rate_axis.set_title("Changes per minute by event type")
    rate_axis.set_xlabel("minute of ApproximateCreationDateTime (UTC)")
    rate_axis.set_ylabel("changes per minute (count/min)")
    if series:
        rate_axis.legend()
    figure.autofmt_xdate()
    names = ["p50", "p90", "p99", "max"]
    values = [] if lag is None else [lag[f"{n}_seconds"] for n in names]
    if values and all(v is not None for v in values):
        lag_axis.bar(names, values, color="tab:purple")
    lag_axis.set_title("End-to-end lag")
    lag_axis.set_xlabel("percentile")
    lag_axis.set_ylabel("landing time − creation time (s)")
    figure.tight_layout()
    destination.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(destination, dpi=100)
    plt.close(figure)
    return destination
