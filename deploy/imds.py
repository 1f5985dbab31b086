"""The instance metadata service (IMDSv2, which the launch template requires), standard library only."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

# botocore's variable for the same purpose; a test may point it elsewhere.
ENDPOINT_VARIABLE = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
_DEFAULT_ENDPOINT = "http://169.254.169.254"


def _endpoint() -> str:
    return os.environ.get(ENDPOINT_VARIABLE, _DEFAULT_ENDPOINT).rstrip("/")


def metadata(path: str, timeout: float = 2.0) -> str | None:
    """``/latest/meta-data/<path>``, or ``None`` when IMDS does not answer it (e.g. 404 for the
    lifecycle state before Auto Scaling set one)."""
    base = _endpoint()
    try:
        token_request = urllib.request.Request(
            f"{base}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
        )
        with urllib.request.urlopen(token_request, timeout=timeout) as response:
            token = response.read().decode()
        request = urllib.request.Request(
            f"{base}/latest/meta-data/{path}", headers={"X-aws-ec2-metadata-token": token}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return str(response.read().decode()).strip()
    except (urllib.error.URLError, OSError):
        return None
