"""The lake bucket (private, TLS only, SSE-KMS with the lake key, versioned, lifecycle per topic) and its
access-log bucket."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.nag import acknowledge, skip_scanners
from kafkalake.environments import EnvironmentConfig
from kafkalake.layout import DATA_ROOT, LEGACY_COMPACTED_ROOT, QUARANTINE_ROOT, RESTRICTED_QUARANTINE_ROOT
from kafkalake.topic_catalog import Topic


def lifecycle_rules(settings: EnvironmentConfig, topics: list[Topic]) -> list[s3.LifecycleRule]:
    """Abort stale uploads; tier data by age; expire each topic's data after its retention (GDPR), quarantined
    records after theirs (raw records with personal data after a shorter one), and noncurrent object versions
    after a few days. Compaction output lies under each table's data prefix (``kafkalake.layout``), so the data
    rules tier and expire it too; output from before it moved there keeps its retention rule under the legacy root
    until the compactor has moved it."""
    rules = [
        s3.LifecycleRule(id="abort-incomplete-uploads", abort_incomplete_multipart_upload_after=Duration.days(1)),
        s3.LifecycleRule(
            id="tier-data",
            prefix=f"{DATA_ROOT}/",
            transitions=[
                s3.Transition(
                    storage_class=s3.StorageClass.INTELLIGENT_TIERING,
                    transition_after=Duration.days(settings.data_transition_days),
                )
            ],
        ),
        s3.LifecycleRule(
            id="expire-quarantine",
            prefix=f"{QUARANTINE_ROOT}/",
            expiration=Duration.days(settings.quarantine_retention_days),
        ),
        s3.LifecycleRule(
            id="expire-restricted-quarantine",
            prefix=f"{RESTRICTED_QUARANTINE_ROOT}/",
            expiration=Duration.days(settings.restricted_quarantine_retention_days),
        ),
        s3.LifecycleRule(
            id="expire-noncurrent-versions",
            noncurrent_version_expiration=Duration.days(settings.noncurrent_version_days),
        ),
    ]
    for topic in topics:
        if topic.spec.retention_days is None:
            continue
        prefixes = (
            (DATA_ROOT, topic.prefix.data_prefix()),
            (LEGACY_COMPACTED_ROOT, topic.prefix.legacy_compacted_prefix()),
        )
        for root, prefix in prefixes:
            rules.append(
                s3.LifecycleRule(
                    id=f"retain-{root}-{topic.database}-{topic.table}"[:255],
                    prefix=prefix,
                    expiration=Duration.days(topic.spec.retention_days),
                )
            )
    return rules


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
