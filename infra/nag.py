"""cdk-nag (v3) acknowledgments: every suppressed finding is named exactly and carries its reason."""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, reason: str, *findings: str) -> None:
    """Acknowledge findings such as ``AwsSolutions-S1`` or ``AwsSolutions-IAM5[Resource::*]`` on ``scope``."""
    for finding in findings:
        Validations.of(scope).acknowledge(Acknowledgment(id=finding, reason=reason))
