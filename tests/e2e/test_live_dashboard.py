"""``consumer dashboard --serve`` in a real browser while a local fleet works.

Two ``consumer run`` processes share an emulator's stream; ``consumer dashboard --serve`` (the
command, as a user starts it) serves the page; Debian's headless Chromium, driven by selenium
through chromedriver, opens it. While a load writes to the table: every panel of the environment's
widget list is on the page and draws (a chart whose canvas has paint on it and as many lines as the
server computed, or an empty panel that says why), the records-processed figure grows, the lease
table lists the shards with their owners, and neither the console nor the page reports an error.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from emulator.testing import running_emulator
from ground.settings import LoadSettings, load_settings
from tests.e2e.fast_settings import FAST_WORKER_YAML, TELEMETRY_TO_LOGS_YAML
from tests.support import free_port, wait_for
from tools.dashboard.widgets import widgets_for
from tools.demo.fleet import LocalFleet
from tools.demo.load import LoadGenerator

pytestmark = [pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
needs_browser = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="Debian's chromium and chromium-driver are not installed: `make setup` installs them "
    "(scripts/ensure-browser.sh)",
)

# The load's cap: it is stopped as soon as the page's records-processed figure has grown.
WRITE_AT_MOST_SECONDS = 120

# Paint on a canvas: how many of its pixels are not transparent.
PAINTED = """
const canvas = arguments[0];
const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
let painted = 0;
for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted++;
return painted;
"""


TELEMETRY = TELEMETRY_TO_LOGS_YAML.replace("metrics:", "metrics:\n  shard_id_dimension: true")


def write_config(directory: Path, endpoint: str, changelog: Path) -> None:
    (directory / "live.yaml").write_text(
        f"""
application_name: e2e-live
region: us-east-1
endpoint_url: {endpoint}
table:
  name: orders
  partition_key: {{name: pk, type: S}}
{FAST_WORKER_YAML}
{TELEMETRY}
processing:
  processor: changelog
  options:
    destination: {changelog}
"""
    )


@contextmanager
def served(config: Path, port: int, log: Path) -> Iterator[str]:
    """``consumer dashboard --serve`` as a user runs it; stopped (SIGTERM) however the test ends."""
    command = [sys.executable, "-m", "tools.cli", "dashboard", "--serve", "--env", "live"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--config-dir", str(config), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for(lambda: "live dashboard: " + url in log.read_text(), 60, f"the dashboard on {url}")
        yield url
    finally:
        process.terminate()
        try:
            assert process.wait(timeout=20) == 0, log.read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


@contextmanager
def browser(profile: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*BROWSER_FLAGS, f"--user-data-dir={profile}", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def api_state(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}api/state", timeout=10) as answer:
        state: dict[str, Any] = json.load(answer)
    return state


def processed(driver: Any) -> int:
    return int(driver.find_element("id", "records-processed").text.replace(",", "") or 0)


@needs_browser
def test_the_served_dashboard_draws_every_panel_live_in_a_browser(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    environ = {"PYTHONPATH": str(REPO), "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    with running_emulator(partitions=2, rollover_seconds=3600, seed=5) as emu:
        write_config(config, emu.endpoint, tmp_path / "changelog")
        settings = load_settings("live", config)
        emu.client("dynamodb").create_table(
            TableName="orders",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
        load = LoadGenerator(
            emu.client("dynamodb"),
            settings.table,
            LoadSettings(writes_per_second=10, keys=30, seed=4, duration_seconds=WRITE_AT_MOST_SECONDS),
            tmp_path / "oracle.jsonl",
        )
        with (
            LocalFleet("live", config, tmp_path / "logs", environ) as fleet,
            served(config, free_port(), tmp_path / "dashboard.log") as url,
            browser(tmp_path / "profile") as driver,
        ):
            for _ in range(2):
                fleet.start_worker()
            # The load writes until the figure has been seen to grow, not for a fixed time: on a
            # loaded machine the page's first figure can come after a fixed-length load has ended,
            # and then it never grows.
            writer = threading.Thread(target=load.run, args=(WRITE_AT_MOST_SECONDS,), daemon=True)
            writer.start()
            try:
                driver.get(url)
                wait_for(lambda: processed(driver) > 0, 60, "the first records processed on the page")
                first = processed(driver)
                wait_for(lambda: processed(driver) > first, 30, f"records processed to grow past {first}")
            finally:
                load.stop()
                writer.join()
            wait_for(lambda: any(r["owner"] for r in api_state(url)["leases"]["rows"]), 30, "owned leases")
            updates = int(driver.find_element("tag name", "body").get_attribute("data-updates"))
            wait_for(
                lambda: int(driver.find_element("tag name", "body").get_attribute("data-updates")) > updates,
                10,
                "the page to redraw after the leases were owned",
            )
            state = api_state(url)
            sections = driver.find_elements("css selector", "section.panel")
            lease_rows = driver.find_elements("css selector", "#lease-rows tbody tr")
            lease_text = driver.find_element("id", "lease-rows").text
            console = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]
            page_errors = driver.execute_script("return window.dashboardErrors")
            drawn = {
                s.get_attribute("data-title"): (
                    s.get_attribute("data-drawn"),
                    int(s.get_attribute("data-lines")) + int(s.get_attribute("data-guides")),
                    [driver.execute_script(PAINTED, c) for c in s.find_elements("tag name", "canvas")],
                    len(s.find_elements("css selector", ".u-legend .u-series")),
                    s.find_element("css selector", ".body").text,
                )
                for s in sections
            }
    titles = [w.title for w in widgets_for(settings)]
    assert list(drawn) == titles == [p["title"] for p in state["panels"]]
    assert "Records processed vs table writes" in titles and len(titles) >= 10
    for panel in state["panels"]:
        how, lines, paint, legend, text = drawn[panel["title"]]
        if lines:
            # A chart with paint on it and, in its legend, each line and reference line it was sent.
            assert how == "chart" and paint and max(paint) > 500, (panel["title"], how, paint)
            assert legend == lines, panel["title"]
        else:
            assert how == "empty" and text.startswith("nothing to draw here: "), panel["title"]
            assert len(text) > len("nothing to draw here: ") + 10, panel["title"]
        assert not panel["unexplained"], panel
    charts = [t for t, (how, *_rest) in drawn.items() if how == "chart"]
    assert {"Records processed vs table writes", "Current leases per worker", "CPU per worker"} <= set(charts)
    # The lease table: both shards, each held by one of the two workers.
    assert len(lease_rows) == len(state["leases"]["rows"]) >= 2
    assert "worker-1@" in lease_text or "worker-2@" in lease_text
    assert not console and not page_errors, (console, page_errors)
    assert state["error"] is None


def test_the_page_and_its_chart_library_are_served() -> None:
    """Without a browser: the page names the vendored uPlot, which the server finds in node_modules."""
    from tools.dashboard.live import STATIC, uplot_directory

    page = (STATIC / "index.html").read_text()
    assert '<script src="/vendor/uPlot.iife.min.js">' in page and "/live.js" in page
    assert (uplot_directory() / "uPlot.iife.min.js").stat().st_size > 10_000
    lock = json.loads((REPO / "package-lock.json").read_text())
    assert (
        lock["packages"]["node_modules/uplot"]["version"]
        == json.loads((REPO / "package.json").read_text())["dependencies"]["uplot"]
    )
