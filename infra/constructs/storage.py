"""The lake bucket (private, TLS only, SSE-KMS with the lake key, versioned, lifecycle per topic) and its
access-log bucket."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.lifecycle import TIERED_STORAGE_CLASS, lake_lifecycle
from infra.nag import acknowledge, skip_scanners
from kafkalake.environments import EnvironmentConfig
from kafkalake.topic_catalog import Topic


def lifecycle_rules(settings: EnvironmentConfig, topics: list[Topic]) -> list[s3.LifecycleRule]:
    """The lake's lifecycle rules (``infra.lifecycle``, which says what each does) as CDK rules."""
    return [
        s3.LifecycleRule(
            id=rule.rule_id,
            prefix=rule.prefix or None,
            expiration=_days(rule.expiration_days),
            transitions=None
            if rule.transition_days is None
            else [
                s3.Transition(
                    storage_class=s3.StorageClass(TIERED_STORAGE_CLASS),
                    transition_after=Duration.days(rule.transition_days),
                )
            ],
            noncurrent_version_expiration=_days(rule.noncurrent_version_days),
            abort_incomplete_multipart_upload_after=_days(rule.abort_incomplete_upload_days),
        )
        for rule in lake_lifecycle(settings, topics)
    ]


def _days(days: int | None) -> Duration | None:
    return None if days is None else Duration.days(days)


class Storage(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, settings: EnvironmentConfig, topics: list[Topic], key: kms.IKey
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            encryption=s3.BucketEncryption.S3_MANAGED,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(expiration=Duration.days(365), noncurrent_version_expiration=Duration.days(7))
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        skip_scanners(
            self.access_logs,
            "This is the access-log bucket itself; logging it to itself loops.",
            checkov=["CKV_AWS_18"],
        )
        acknowledge(
            self.access_logs, "This is the access-log bucket itself; logging it to itself loops.", "AwsSolutions-S1"
        )
        # Versioning: on. The archiver's overwrites are byte-identical redos and the compactor deletes inputs
        # only after a grace period, so old versions are not needed long: they expire after a few days.
        self.bucket = s3.Bucket(
            self,
            "Lake",
            bucket_name=settings.bucket,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="lake/",
            lifecycle_rules=lifecycle_rules(settings, topics),
            removal_policy=RemovalPolicy.RETAIN,
        )
