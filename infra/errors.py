"""The infra package's one exception hierarchy."""

from __future__ import annotations


class InfraError(Exception):
    """Base of every error raised while building the CDK app."""


class InfraConfigError(InfraError):
    """Settings that cannot be turned into stacks; the message names the key to fix."""
