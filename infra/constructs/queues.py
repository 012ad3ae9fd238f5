"""Dead-letter queues: encrypted, TLS only, kept 14 days, and exempt from needing a dead-letter queue themselves."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.nag import acknowledge, skip_scanners


def dead_letter_queue(
    scope: Construct, construct_id: str, *, key: kms.IKey, purpose: str, queue_name: str | None = None
) -> sqs.Queue:
    """A dead-letter queue for ``purpose`` (as in "the notification queue's dead-letter queue")."""
    queue = sqs.Queue(
        scope,
        construct_id,
        queue_name=queue_name,
        encryption=sqs.QueueEncryption.KMS,
        encryption_master_key=key,
        enforce_ssl=True,
        retention_period=Duration.days(14),
    )
    reason = f"This queue is {purpose}: a dead-letter queue has none of its own."
    acknowledge(queue, reason, "AwsSolutions-SQS3")
    skip_scanners(queue, reason, cfn_lint=["ES6000"])
    return queue
