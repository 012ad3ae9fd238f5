"""cdk-nag (v3) acknowledgments: every suppressed finding is named exactly and carries its reason."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Acknowledgment, CfnResource, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, reason: str, *findings: str) -> None:
    """Acknowledge findings such as ``AwsSolutions-S1`` or ``AwsSolutions-IAM5[Resource::*]`` on ``scope``."""
    for finding in findings:
        Validations.of(scope).acknowledge(Acknowledgment(id=finding, reason=reason))


def skip_scanners(scope: IConstruct, reason: str, *, cfn_lint: Sequence[str] = (), checkov: Sequence[str] = ()) -> None:
    """Suppress cfn-lint rules and checkov checks on every CloudFormation resource under ``scope``, with the
    reason beside them in the template (``kafkalake:why``)."""
    for construct in scope.node.find_all():
        if not isinstance(construct, CfnResource):
            continue
        construct.add_metadata("kafkalake:why", reason)
        if cfn_lint:
            construct.add_metadata("cfn-lint", {"config": {"ignore_checks": list(cfn_lint)}})
        if checkov:
            construct.add_metadata("checkov", {"skip": [{"id": check, "comment": reason} for check in checkov]})
