"""cdk-nag's AwsSolutions pack on every stack, with a written reason for each accepted finding.

cdk-nag 3 reports through CDK's policy-validation plugins: an unacknowledged error fails the synth
and is listed in ``policy-validation-report.json`` in the cloud assembly. Acknowledgments are scoped
to the construct they concern and, for wildcard findings, to the exact finding
(``AwsSolutions-IAM5[Resource::...]``), so a new wildcard elsewhere still fails the check.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Stack, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct


def apply_nag(stack: Stack) -> None:
    Validations.of(stack).add_plugins(AwsSolutionsChecks(stack, verbose=True))


def suppress(construct: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge ``rule`` (a rule id, or ``Rule[finding]``) on ``construct`` and its children."""
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
