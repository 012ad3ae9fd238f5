"""Create on the local AWS endpoint what ``cdk deploy`` creates in AWS, from the same catalog and settings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from kafkalake.catalog import Catalog
from kafkalake.environments import EnvironmentSettings
from kafkalake.glue import s3_uri
from kafkalake.layout import DATA_ROOT
from kafkalake.naming import TableInference

GLUE_ROLE = "arn:aws:iam::123456789012:role/kafkalake-crawler"


@dataclass(frozen=True)
class Provisioned:
    bucket: str
    queue_url: str
    dlq_url: str
    event_bus: str
    databases: tuple[str, ...]
    crawlers: tuple[str, ...]


def notification_filter() -> dict[str, Any]:
    """Only data-layout Parquet objects notify; the CDK stack uses the same filter."""
    return {
        "Key": {"FilterRules": [{"Name": "prefix", "Value": f"{DATA_ROOT}/"}, {"Name": "suffix", "Value": ".parquet"}]}
    }


def crawler_request(name: str, database: str, table_location: str) -> dict[str, Any]:
    """A crawler that creates new tables and schema versions when triggered (CRAWL_EVERYTHING), combining
    compatible schemas into one table whose partitions inherit from it."""
    return {
        "Name": name,
        "Role": GLUE_ROLE,
        "DatabaseName": database,
        "Targets": {"S3Targets": [{"Path": table_location}]},
        "RecrawlPolicy": {"RecrawlBehavior": "CRAWL_EVERYTHING"},
        "SchemaChangePolicy": {"UpdateBehavior": "UPDATE_IN_DATABASE", "DeleteBehavior": "LOG"},
        "Configuration": json.dumps(
            {
                "Version": 1.0,
                "Grouping": {"TableGroupingPolicy": "CombineCompatibleSchemas", "TableLevelConfiguration": 5},
                "CrawlerOutput": {"Partitions": {"AddOrUpdateBehavior": "InheritFromTable"}},
            }
        ),
    }


def _ignore_exists(call: Any, **kwargs: Any) -> None:
    try:
        call(**kwargs)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in (
            "AlreadyExistsException",
            "BucketAlreadyOwnedByYou",
            "ResourceAlreadyExistsException",
        ):
            raise


def provision(clients: dict[str, Any], region: str, env: EnvironmentSettings, catalog: Catalog) -> Provisioned:
    """Idempotent: bucket, DLQ, queue with redrive, S3→SQS notifications, Glue databases and crawlers, bus."""
    s3, sqs, glue, events = clients["s3"], clients["sqs"], clients["glue"], clients["events"]
    _ignore_exists(s3.create_bucket, Bucket=env.bucket, CreateBucketConfiguration={"LocationConstraint": region})
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
    topics = catalog.for_env(env.name)
    databases = sorted({t.database for t in topics})
    for database in databases:
        _ignore_exists(glue.create_database, DatabaseInput={"Name": database})
    crawlers = []
    for topic in topics:
        if topic.spec.table_inference == TableInference.CRAWLER:
            location = s3_uri(env.bucket, topic.prefix.data_prefix())
            _ignore_exists(glue.create_crawler, **crawler_request(topic.crawler_name, topic.database, location))
            crawlers.append(topic.crawler_name)
    _ignore_exists(events.create_event_bus, Name=env.event_bus_name)
    return Provisioned(env.bucket, queue_url, dlq_url, env.event_bus_name, tuple(databases), tuple(crawlers))
