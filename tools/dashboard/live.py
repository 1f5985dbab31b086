"""``consumer dashboard --serve``: the dashboard's panels and the lease table, live, in a browser.

A small standard-library HTTP server on 127.0.0.1 serves one page (``static/``), the chart library
(uPlot, installed by ``npm ci`` into ``node_modules/`` from package.json's pin; never fetched at run
time) and ``/api/state``: every panel of :func:`tools.dashboard.widgets.widgets_for` computed by
:func:`tools.dashboard.panels.panel_lines` -- the computation the PNG draws -- from the EMF documents
read so far, and the leases table as ``consumer leases`` reads it. A background thread reads what is
new every ``refresh_seconds`` (the log group's new events, or the lines appended to a JSON Lines file)
and scans the leases table; the page asks for the state every two seconds and redraws.

The pure part is :func:`dashboard_state`: points and a leases snapshot in, the page's JSON out.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from tools.dashboard.errors import DashboardError
from tools.dashboard.lease_view import LeaseFeed, lease_table
from tools.dashboard.panels import PanelLines, panel_lines
from tools.dashboard.readback import MetricPoint, is_emf, points_of
from tools.dashboard.series import fleet_workers, time_axis
from tools.dashboard.widget_model import Reference, ReferenceLine, Widget

STATIC = Path(__file__).with_name("static")
REPOSITORY = Path(__file__).resolve().parents[2]
UPLOT_FILES = ("uPlot.iife.min.js", "uPlot.min.css")


def uplot_directory(search: Sequence[Path] = ()) -> Path:
    """Where ``npm ci`` put uPlot's files: the repository's node_modules, else the working directory's."""
    for base in (*search, REPOSITORY, Path.cwd()):
        candidate = base / "node_modules" / "uplot" / "dist"
        if all((candidate / name).is_file() for name in UPLOT_FILES):
            return candidate
    raise DashboardError(
        "the live dashboard's chart library is not installed (node_modules/uplot/dist/uPlot.iife.min.js "
        "is missing): `make setup` installs it (npm ci, from package.json)"
    )


class Feed(Protocol):
    def poll(self) -> list[dict[str, Any]]:
        """EMF documents not returned before."""
        ...

    @property
    def description(self) -> str: ...


class LogGroupFeed:
    """The new EMF documents of a log group (the emulator's CloudWatch Logs, or AWS's)."""

    # Events arrive out of order by up to a flush; re-reading this far back and skipping the event
    # ids already seen catches the late ones without reading the whole group each time.
    OVERLAP_MILLIS = 120_000

    def __init__(self, logs_client: Any, log_group: str, start_millis: int | None = None) -> None:
        self.client = logs_client
        self.log_group = log_group
        self.start_millis = start_millis
        self._seen: set[str] = set()
        self._latest = 0

    @property
    def description(self) -> str:
        return f"log group {self.log_group}"

    def poll(self) -> list[dict[str, Any]]:
        start = max(self._latest - self.OVERLAP_MILLIS, self.start_millis or 0)
        kwargs: dict[str, Any] = {"logGroupName": self.log_group, "startTime": start}
        documents: list[dict[str, Any]] = []
        try:
            for page in self.client.get_paginator("filter_log_events").paginate(**kwargs):
                for event in page.get("events", []):
                    if event.get("eventId") in self._seen:
                        continue
                    self._seen.add(event.get("eventId", ""))
                    self._latest = max(self._latest, int(event.get("timestamp", 0)))
                    documents += _emf(event.get("message", ""))
        except self.client.exceptions.ResourceNotFoundException:
            return []  # no worker has flushed metrics yet: the group appears with the first
        return documents


class FileFeed:
    """The EMF documents appended to a JSON Lines file since the last poll (a partial last line
    waits for the next poll)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    @property
    def description(self) -> str:
        return f"file {self.path}"

    def poll(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        return [doc for line in complete.decode("utf-8", "replace").splitlines() for doc in _emf(line)]


def _emf(text: str) -> list[dict[str, Any]]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return []
    return [parsed] if isinstance(parsed, dict) and is_emf(parsed) else []


def _number(value: float) -> float | None:
    """JSON has no NaN: a gap in a line is a null, which the chart draws as a break."""
    return None if math.isnan(value) or math.isinf(value) else round(value, 6)


def panel_json(panel: PanelLines) -> dict[str, Any]:
    widget = panel.widget
    return {
        "title": widget.title,
        "unit": widget.unit,
        "y_label": widget.y_label,
        "right_label": widget.right_label,
        "notes": list(panel.notes),
        "unexplained": list(panel.unexplained),
        "lines": [
            {
                "label": line.label,
                "worker": line.worker,
                "right": line.right,
                "dashed": line.dashed,
                "colour_index": line.colour_index,
                "x": list(line.series),
                "y": [_number(v) for v in line.series.values()],
            }
            for line in panel.lines
        ],
        "guides": [
            {"label": g.label, "value": g.value, "drawn": g.drawn, "right": g.right} for g in panel.guides
        ],
    }


def totals(points: Sequence[MetricPoint], names: Sequence[str]) -> dict[str, float]:
    """Counters summed over the fleet since the start: the figures the page's header shows."""
    return {name: sum(sum(p.values) for p in points if p.name == name) for name in names}


HEADLINE = ("RecordsProcessed", "TableWrites", "StreamReadRequests")


def shard_lag(points: Sequence[MetricPoint]) -> dict[str, float]:
    """Each shard's latest MillisBehindLatest (published per shard with metrics.shard_id_dimension)."""
    latest: dict[str, tuple[int, float]] = {}
    for point in points:
        if point.name != "MillisBehindLatest" or not point.shard_id or not point.values:
            continue
        if point.timestamp_millis >= latest.get(point.shard_id, (-1, 0.0))[0]:
            latest[point.shard_id] = (point.timestamp_millis, max(point.values))
    return {shard: value for shard, (_, value) in latest.items()}


def with_lag(leases: Mapping[str, Any], lag: Mapping[str, float]) -> dict[str, Any]:
    """The lease rows with each shard's lag (a lease key of several streams ends in its shard id)."""
    rows = []
    for row in leases.get("rows", []):
        shard = str(row.get("shard", ""))
        found = lag.get(shard, lag.get(shard.rsplit(":", 1)[-1]))
        rows.append({**row, "lag_millis": found})
    return {**leases, "rows": rows}


def dashboard_state(
    *,
    title: str,
    points: Sequence[MetricPoint],
    widgets: Sequence[Widget],
    references: Mapping[Reference, ReferenceLine],
    bucket_seconds: float,
    start_millis: int | None,
    now_millis: int,
    leases: Mapping[str, Any],
    source: str,
) -> dict[str, Any]:
    """The page's whole state: every panel's lines and notes, the headline counters, the leases."""
    workers = fleet_workers(points)
    panels: list[dict[str, Any]] = []
    if points:
        axis = time_axis(points, bucket_seconds, start_millis)
        for widget in widgets:
            panel = panel_lines(widget, points=points, time=axis, references=references, workers=workers)
            panels.append(panel_json(panel))
        elapsed = (now_millis - axis.start_millis) / 1000
    else:
        waiting = f"waiting for the workers' first metrics in {source}"
        panels = [panel_json(PanelLines(w, (), (), (waiting,), ())) for w in widgets]
        elapsed = 0.0
    return {
        "title": title,
        "source": source,
        "bucket_seconds": bucket_seconds,
        "elapsed_seconds": round(elapsed, 1),
        "documents": len({(p.timestamp_millis, p.worker, p.shard_id, p.operation) for p in points}),
        "workers": list(workers),
        "totals": totals(points, HEADLINE),
        "panels": panels,
        "leases": with_lag(leases, shard_lag(points)),
    }


@dataclass
class LiveDashboard:
    """What the server serves: the documents read so far and the latest leases, refreshed on a thread."""

    title: str
    feed: Feed
    widgets: Sequence[Widget]
    references: Mapping[Reference, ReferenceLine]
    bucket_seconds: float
    leases: LeaseFeed | None = None
    start_millis: int | None = None
    refresh_seconds: float = 2.0
    clock: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)
    points: list[MetricPoint] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lease_state: dict[str, Any] = field(default_factory=dict)
    _error: str | None = None

    def refresh(self) -> None:
        """Read what is new; a source that fails is shown on the page, and the next refresh retries."""
        try:
            new = [point for document in self.feed.poll() for point in points_of(document)]
            error = None
        except Exception as exc:  # shown on the page: the emulator stopped, a network hiccup
            new, error = [], f"cannot read {self.feed.description}: {exc}"
        leases = lease_table(self.leases, self.clock()) if self.leases is not None else {}
        with self._lock:
            self.points.extend(new)
            self._lease_state = leases
            self._error = error

    def state(self) -> dict[str, Any]:
        with self._lock:
            points = list(self.points)
            leases = dict(self._lease_state)
            error = self._error
        state = dashboard_state(
            title=self.title,
            points=points,
            widgets=self.widgets,
            references=self.references,
            bucket_seconds=self.bucket_seconds,
            start_millis=self.start_millis,
            now_millis=self.clock(),
            leases=leases,
            source=self.feed.description,
        )
        state["error"] = error
        return state

    def run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.refresh_seconds)

    def stop(self) -> None:
        self._stop.set()


class _Handler(BaseHTTPRequestHandler):
    dashboard: LiveDashboard
    files: Mapping[str, tuple[Path, str]]

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/api/state":
            body = json.dumps(self.dashboard.state(), allow_nan=False).encode()
            self._send(HTTPStatus.OK, body, "application/json")
            return
        found = self.files.get(path)
        if found is None:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")
            return
        file, kind = found
        self._send(HTTPStatus.OK, file.read_bytes(), kind)

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a request every two seconds would bury the command's own lines."""


def routes(uplot: Path) -> dict[str, tuple[Path, str]]:
    return {
        "/": (STATIC / "index.html", "text/html; charset=utf-8"),
        "/live.js": (STATIC / "live.js", "text/javascript; charset=utf-8"),
        "/live.css": (STATIC / "live.css", "text/css; charset=utf-8"),
        "/vendor/uPlot.iife.min.js": (uplot / "uPlot.iife.min.js", "text/javascript; charset=utf-8"),
        "/vendor/uPlot.min.css": (uplot / "uPlot.min.css", "text/css; charset=utf-8"),
    }


class LiveServer:
    """The server and its refresh thread, started together and stopped together."""

    def __init__(self, dashboard: LiveDashboard, port: int = 0, host: str = "127.0.0.1") -> None:
        handler = type("Handler", (_Handler,), {"dashboard": dashboard, "files": routes(uplot_directory())})
        try:
            self.httpd = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise DashboardError(
                f"cannot serve the dashboard on {host}:{port}: {exc.strerror}; give another --port "
                "(0 picks a free one)"
            ) from exc
        self.httpd.daemon_threads = True
        self.dashboard = dashboard
        self._threads = [
            threading.Thread(target=self.httpd.serve_forever, name="dashboard-http", daemon=True),
            threading.Thread(target=dashboard.run, name="dashboard-refresh", daemon=True),
        ]

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> LiveServer:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.dashboard.stop()
        self.httpd.shutdown()
        self.httpd.server_close()
        for thread in self._threads:
            thread.join(timeout=10)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
