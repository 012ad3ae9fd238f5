"""S3 object-created events for data objects → an encrypted SQS queue with a dead-letter queue; the event bus the
maintainer publishes to."""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_notifications as s3n
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.iam import admit_cloudwatch_alarms
from infra.constructs.queues import dead_letter_queue
from infra.nag import acknowledge, skip_scanners
from kafkalake.environments import EnvironmentConfig
from kafkalake.s3_location import NOTIFICATION_PREFIX, NOTIFICATION_SUFFIX


class Notifications(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, settings: EnvironmentConfig, bucket: s3.Bucket) -> None:
        super().__init__(scope, construct_id)
        # A key of their own: S3 must be allowed to use it for this bucket, and a policy on the bucket's key
        # naming the bucket would make key and bucket depend on each other.
        self.key = kms.Key(
            self,
            "QueueKey",
            enable_key_rotation=True,
            alias=f"alias/kafkalake-{settings.name}-notifications",
            description=f"kafkalake {settings.name}: notification queues and alarms",
        )
        admit_cloudwatch_alarms(self.key)
        self.dlq = dead_letter_queue(
            self,
            "NotificationsDlq",
            key=self.key,
            purpose="the dead-letter queue of the notification queue",
            queue_name=settings.dead_letter_queue_name,
        )
        self.queue = sqs.Queue(
            self,
            "Notifications",
            queue_name=settings.queue_name,
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.key,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(settings.queue_visibility_timeout_seconds),
            retention_period=Duration.days(14),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dlq, max_receive_count=settings.max_receive_count),
        )
        key_filter = s3.NotificationKeyFilter(prefix=NOTIFICATION_PREFIX, suffix=NOTIFICATION_SUFFIX)
        bucket.add_event_notification(s3.EventType.OBJECT_CREATED, s3n.SqsDestination(self.queue), key_filter)
        skip_scanners(
            bucket.node.find_child("Notifications"),
            "CDK makes the notification configuration depend on the queue policy explicitly as well as by reference.",
            cfn_lint=["W3005"],
        )
        acknowledge(
            Stack.of(self),
            "CDK's own BucketNotificationsHandler custom resource (it configures the bucket notification) "
            "uses the AWS-managed basic execution role; it runs only during deployments.",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        )
        self._skip_cdk_handler()
        self._deny_other_senders(bucket)
        self.bus = events.EventBus(self, "Bus", event_bus_name=settings.event_bus_name)

    def _skip_cdk_handler(self) -> None:
        for handler in Stack.of(self).node.children:
            if handler.node.id.startswith("BucketNotificationsHandler"):
                skip_scanners(
                    handler,
                    "CDK's BucketNotificationsHandler: a function CDK defines and runs only while the stack deploys "
                    "(it sets the bucket's notification configuration); its properties are not ours to set.",
                    cfn_lint=["ES1005", "WS1000", "WS1004", "W3005"],
                    checkov=["CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117"],
                )

    def _deny_other_senders(self, bucket: s3.IBucket) -> None:
        """Only S3, from this bucket in this account, may send: two denials, since the conditions of one statement
        must all hold for it to apply (another bucket OR another account is refused)."""
        for sid, condition in (
            ("OnlyThisBucket", {"ArnNotEquals": {"aws:SourceArn": bucket.bucket_arn}}),
            ("OnlyThisAccount", {"StringNotEquals": {"aws:SourceAccount": Stack.of(self).account}}),
        ):
            self.queue.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=sid,
                    effect=iam.Effect.DENY,
                    principals=[iam.ServicePrincipal("s3.amazonaws.com")],
                    actions=["sqs:SendMessage"],
                    resources=[self.queue.queue_arn],
                    conditions=condition,
                )
            )
