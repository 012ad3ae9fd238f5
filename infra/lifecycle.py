"""The lake bucket's lifecycle rules as plain data: the one description both the CDK bucket
(``infra.constructs.storage``) and the local stack's bucket (``kafkalake_dev.local.provision``) are made from, so
the two cannot drift apart. No CDK import here: the local stack reads it without the toolchain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kafkalake.environments import EnvironmentConfig
from kafkalake.layout import DATA_ROOT, LEGACY_COMPACTED_ROOT, QUARANTINE_ROOT, RESTRICTED_QUARANTINE_ROOT
from kafkalake.topic_catalog import Topic

TIERED_STORAGE_CLASS = "INTELLIGENT_TIERING"


@dataclass(frozen=True)
class LifecycleRule:
    """One rule: what it applies to (``prefix``, the whole bucket when empty) and what it does after how many days."""

    rule_id: str
    prefix: str = ""
    expiration_days: int | None = None
    transition_days: int | None = None
    """Days until current objects move to ``TIERED_STORAGE_CLASS``."""
    noncurrent_version_days: int | None = None
    abort_incomplete_upload_days: int | None = None

    def s3_rule(self) -> dict[str, Any]:
        """The rule as S3's ``PutBucketLifecycleConfiguration`` takes it (and ``GetBucketLifecycleConfiguration``
        returns it)."""
        rule: dict[str, Any] = {"ID": self.rule_id, "Status": "Enabled", "Filter": {"Prefix": self.prefix}}
        if self.expiration_days is not None:
            rule["Expiration"] = {"Days": self.expiration_days}
        if self.transition_days is not None:
            rule["Transitions"] = [{"Days": self.transition_days, "StorageClass": TIERED_STORAGE_CLASS}]
        if self.noncurrent_version_days is not None:
            rule["NoncurrentVersionExpiration"] = {"NoncurrentDays": self.noncurrent_version_days}
        if self.abort_incomplete_upload_days is not None:
            rule["AbortIncompleteMultipartUpload"] = {"DaysAfterInitiation": self.abort_incomplete_upload_days}
        return rule


def lake_lifecycle(settings: EnvironmentConfig, topics: list[Topic]) -> list[LifecycleRule]:
    """Abort stale uploads; tier data by age; expire each topic's data after its retention (GDPR), quarantined
    records after theirs (raw records with personal data after a shorter one), and noncurrent object versions
    after a few days. Compaction output lies under each table's data prefix (``kafkalake.layout``), so the data
    rules tier and expire it too; output from before it moved there keeps its retention rule under the legacy root
    until the compactor has moved it."""
    rules = [
        LifecycleRule("abort-incomplete-uploads", abort_incomplete_upload_days=1),
        LifecycleRule("tier-data", prefix=f"{DATA_ROOT}/", transition_days=settings.data_transition_days),
        LifecycleRule(
            "expire-quarantine", prefix=f"{QUARANTINE_ROOT}/", expiration_days=settings.quarantine_retention_days
        ),
        LifecycleRule(
            "expire-restricted-quarantine",
            prefix=f"{RESTRICTED_QUARANTINE_ROOT}/",
            expiration_days=settings.restricted_quarantine_retention_days,
        ),
        LifecycleRule("expire-noncurrent-versions", noncurrent_version_days=settings.noncurrent_version_days),
    ]
    for topic in topics:
        if topic.spec.retention_days is None:
            continue
        prefixes = (
            (DATA_ROOT, topic.prefix.data_prefix()),
            (LEGACY_COMPACTED_ROOT, topic.prefix.legacy_compacted_prefix()),
        )
        for root, prefix in prefixes:
            rule_id = f"retain-{root}-{topic.database}-{topic.table}"[:255]
            rules.append(LifecycleRule(rule_id, prefix=prefix, expiration_days=topic.spec.retention_days))
    return rules
