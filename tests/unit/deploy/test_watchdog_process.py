"""``python -m deploy.watchdog`` as the unit runs it, against stand-ins for the instance metadata
service and the Auto Scaling API on loopback ports: on ``Terminated`` it completes the lifecycle
action for its own instance, hook and group, and exits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

from tests.unit.deploy.test_instance_health import plan

REPO = Path(__file__).resolve().parents[3]


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class Metadata(BaseHTTPRequestHandler):
    answers = {
        "/latest/meta-data/instance-id": "i-0watchdog",
        "/latest/meta-data/autoscaling/target-lifecycle-state": "Terminated",
    }

    def do_PUT(self) -> None:
        self._reply(b"token")

    def do_GET(self) -> None:
        answer = self.answers.get(self.path)
        if answer is None or self.headers.get("X-aws-ec2-metadata-token") != "token":
            self.send_response(404)
            self.end_headers()
            return
        self._reply(answer.encode())

    def _reply(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class AutoScaling(BaseHTTPRequestHandler):
    received: list[dict[str, list[str]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        AutoScaling.received.append(parse_qs(self.rfile.read(length).decode()))
        body = (
            b'<CompleteLifecycleActionResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">'
            b"<CompleteLifecycleActionResult/><ResponseMetadata><RequestId>r</RequestId>"
            b"</ResponseMetadata></CompleteLifecycleActionResponse>"
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_the_watchdog_process_completes_the_lifecycle_action_on_termination(tmp_path: Path) -> None:
    plan_file = tmp_path / "boot.json"
    plan_file.write_text(plan().to_json())
    AutoScaling.received.clear()
    with serving(Metadata) as imds, serving(AutoScaling) as autoscaling:
        env = {
            **os.environ,
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds,
            "AWS_ENDPOINT_URL_AUTO_SCALING": autoscaling,
            "PATH": str(tmp_path),  # no systemctl here: stopping the units is skipped, not fatal
        }
        ran = subprocess.run(
            [sys.executable, "-m", "deploy.watchdog", "--plan", str(plan_file), "--root", str(tmp_path)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (request,) = AutoScaling.received
    assert request["Action"] == ["CompleteLifecycleAction"]
    assert request["InstanceId"] == ["i-0watchdog"]
    assert request["LifecycleHookName"] == ["app-dev-release-leases"]
    assert request["AutoScalingGroupName"] == ["app-dev-workers"]
    assert request["LifecycleActionResult"] == ["CONTINUE"]


def test_the_watchdog_refuses_to_run_off_an_instance(tmp_path: Path) -> None:
    plan_file = tmp_path / "boot.json"
    plan_file.write_text(plan().to_json())
    env = {**os.environ, "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:9"}
    ran = subprocess.run(
        [sys.executable, "-m", "deploy.watchdog", "--plan", str(plan_file)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 2 and "not on an instance" in ran.stderr
