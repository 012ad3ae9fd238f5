"""Create on the local AWS endpoint what ``cdk deploy`` creates in AWS, from the same catalog and settings."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from infra.lifecycle import lake_lifecycle
from kafkalake.environments import EnvironmentConfig
from kafkalake.lftags import TAG_VALUES, pairs
from kafkalake.permissions import AccessModel, access_model
from kafkalake.personal import MIN_KEY_BYTES, PseudonymKey
from kafkalake.s3_location import notification_filter
from kafkalake.topic_catalog import TopicCatalog
from kafkalake_dev.local.endpoints import LOCAL_PSEUDONYM_SECRET, LOCAL_RESTRICTED_KEY_ALIAS

GLUE_ROLE = "arn:aws:iam::123456789012:role/kafkalake-crawler"
PROVISIONED_SERVICES = ("s3", "kms", "sqs", "glue", "events", "secretsmanager", "lakeformation")
"""The clients ``provision`` takes, by service name."""


@dataclass(frozen=True)
class Provisioned:
    bucket: str
    queue_url: str
    dlq_url: str
    event_bus: str
    databases: tuple[str, ...]
    crawlers: tuple[str, ...]
    restricted_key_arn: str
    """The key the archiver writes restricted quarantine objects with (the endpoints' ``restricted_key_arn``)."""


def _ignore_exists(call: Any, **kwargs: Any) -> None:
    try:
        call(**kwargs)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in (
            "AlreadyExistsException",
            "BucketAlreadyOwnedByYou",
            "ResourceAlreadyExistsException",
            "ResourceExistsException",
        ):
            raise


def ensure_pseudonym_key(secretsmanager: Any) -> None:
    """The local stack's pseudonym key: random bytes, made once (pseudonyms stay stable while the stack runs)."""
    _ignore_exists(
        secretsmanager.create_secret,
        Name=LOCAL_PSEUDONYM_SECRET,
        SecretString=PseudonymKey.secret_string("local-1", secrets.token_bytes(MIN_KEY_BYTES)),
    )


def ensure_restricted_key(kms: Any) -> str:
    """The ARN of the local stack's restricted key (``LOCAL_RESTRICTED_KEY_ALIAS``), made once; another process
    making it at the same time is fine: the alias that won names the key both use."""
    try:
        return str(kms.describe_key(KeyId=LOCAL_RESTRICTED_KEY_ALIAS)["KeyMetadata"]["Arn"])
    except kms.exceptions.NotFoundException:
        pass
    key = kms.create_key(Description="kafkalake local: raw quarantined records with personal fields")["KeyMetadata"]
    _ignore_exists(kms.create_alias, AliasName=LOCAL_RESTRICTED_KEY_ALIAS, TargetKeyId=key["KeyId"])
    return str(kms.describe_key(KeyId=LOCAL_RESTRICTED_KEY_ALIAS)["KeyMetadata"]["Arn"])


def ensure_lake_bucket(s3: Any, bucket: str, region: str) -> None:
    """The lake bucket as the template makes it, where the local stack can honour it: versioned. Idempotent.
    Lifecycle rules are ``provision``'s (they follow an environment's settings and topics). Not made locally:
    - SSE-KMS default encryption: S3A (AWS SDK v1, hadoop-aws 3.3.4) copies an SSE-KMS object, as every rename of
      Spark's commit does, with the source's key, and that SDK refuses to send KMS parameters over plain HTTP, which
      is what the local endpoint speaks;
    - the bucket policy: moto evaluates its Deny statements wrongly (it would refuse every restricted PUT, the
      right key's too).
    The permission check evaluates both against the recorded calls instead (docs/testing.md)."""
    _ignore_exists(s3.create_bucket, Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})


def provision(clients: dict[str, Any], region: str, env: EnvironmentConfig, catalog: TopicCatalog) -> Provisioned:
    """Idempotent: the bucket (``ensure_lake_bucket``) with the template's lifecycle rules (``infra.lifecycle``),
    the restricted key (``ensure_restricted_key``), DLQ, queue with redrive, S3→SQS notifications, Glue databases
    and crawlers, the LF-tags and their databases' tags, bus, and the pseudonym key (random bytes, made once:
    pseudonyms stay stable while the stack runs). Consumer grants and the data location are AWS's only (the local
    endpoint enforces neither)."""
    s3, sqs, glue, events = clients["s3"], clients["sqs"], clients["glue"], clients["events"]
    ensure_pseudonym_key(clients["secretsmanager"])
    ensure_lake_bucket(s3, env.bucket, region)
    topics = catalog.for_env(env.name)
    s3.put_bucket_lifecycle_configuration(
        Bucket=env.bucket, LifecycleConfiguration={"Rules": [r.s3_rule() for r in lake_lifecycle(env, topics)]}
    )
    dlq_url = sqs.create_queue(QueueName=env.dead_letter_queue_name)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue_url = sqs.create_queue(
        QueueName=env.queue_name,
        Attributes={
            "VisibilityTimeout": str(env.queue_visibility_timeout_seconds),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": env.max_receive_count}),
        },
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(
        Bucket=env.bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {"QueueArn": queue_arn, "Events": ["s3:ObjectCreated:*"], "Filter": notification_filter()}
            ]
        },
    )
    databases = sorted({t.database for t in topics})
    for database in databases:
        _ignore_exists(glue.create_database, DatabaseInput={"Name": database})
    _tag_databases(clients["lakeformation"], access_model(env, topics))
    crawlers = []
    for topic in topics:
        if topic.crawled:
            _ignore_exists(glue.create_crawler, **topic.crawler(env.bucket).request(GLUE_ROLE))
            crawlers.append(topic.crawler_name)
    _ignore_exists(events.create_event_bus, Name=env.event_bus_name)
    return Provisioned(
        env.bucket,
        queue_url,
        dlq_url,
        env.event_bus_name,
        tuple(databases),
        tuple(crawlers),
        ensure_restricted_key(clients["kms"]),
    )


def _tag_databases(lakeformation: Any, model: AccessModel) -> None:
    """The LF-tags and each database's, as ``infra.constructs.lake_access`` creates them."""
    for tag_key, values in TAG_VALUES.items():
        _ignore_exists(lakeformation.create_lf_tag, TagKey=tag_key, TagValues=list(values))
    for database, tags in model.databases.items():
        lakeformation.add_lf_tags_to_resource(Resource={"Database": {"Name": database}}, LFTags=pairs(tags))
