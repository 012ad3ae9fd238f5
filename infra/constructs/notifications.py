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
from infra.nag import acknowledge
from kafkalake.environments import EnvironmentSettings
from kafkalake.layout import NOTIFICATION_PREFIX, NOTIFICATION_SUFFIX


class Notifications(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, settings: EnvironmentSettings, bucket: s3.Bucket
    ) -> None:
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
        self.dlq = sqs.Queue(
            self,
            "NotificationsDlq",
            queue_name=settings.dead_letter_queue_name,
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        acknowledge(self.dlq, "This queue is the dead-letter queue of the notification queue.", "AwsSolutions-SQS3")
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
        acknowledge(
            Stack.of(self),
            "CDK's own BucketNotificationsHandler custom resource (it configures the bucket notification) "
            "uses the AWS-managed basic execution role; it runs only during deployments.",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
        )
        # Only S3, from this bucket in this account, may send: two denials, since the conditions of one
        # statement must all hold for it to apply (another bucket OR another account is refused).
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
        self.bus = events.EventBus(self, "Bus", event_bus_name=settings.event_bus_name)
