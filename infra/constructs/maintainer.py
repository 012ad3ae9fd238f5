"""The metastore maintainer: the Lambda (its code asset, least-privilege role, log group) and its schedule."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.assets import maintainer_bundle
from infra.constructs.functions import function_logs, invocation_dlq, python_function, schedule
from infra.constructs.iam import glue_arn, glue_table_findings, glue_table_resources, object_finding
from infra.nag import acknowledge
from kafkalake.environments import EnvironmentConfig
from kafkalake.lambda_env import MaintainerEnvironment
from kafkalake.layout import COMPLETENESS_CLAIMS, DATA_ROOT, LATE_DATA_MARKERS
from kafkalake.metrics import MAINTAINER_SERVICE, NAMESPACE
from kafkalake.naming import crawler_name_for
from kafkalake.topic_catalog import Topic

MAINTAINER_GLUE_ACTIONS = (
    "glue:GetTable",
    "glue:CreateTable",
    "glue:UpdateTable",
    "glue:GetPartitions",
    "glue:BatchGetPartition",
    "glue:BatchCreatePartition",
    "glue:BatchUpdatePartition",
)


def crawler_patterns(topics: list[Topic], databases: list[str]) -> list[str]:
    """The crawlers the maintainer may look up and start: by convention in each database (tables outside the
    catalog), plus every catalog crawler whose name is overridden."""
    convention = [crawler_name_for(db, "*") for db in databases]
    crawled = [t for t in topics if t.crawled]
    overridden = sorted({t.crawler_name for t in crawled if t.crawler_name != crawler_name_for(t.database, t.table)})
    return [*convention, *overridden]


def function_environment(
    settings: EnvironmentConfig, queue: sqs.IQueue, bus: events.IEventBus, region: str
) -> dict[str, str]:
    """The function's variables: its validated ``MaintainerEnvironment`` and Powertools' names."""
    environment = MaintainerEnvironment.model_validate(
        {
            "KAFKALAKE_ENV": settings.name,
            "KAFKALAKE_BUCKET": settings.bucket,
            "KAFKALAKE_QUEUE_URL": queue.queue_url,
            "KAFKALAKE_EVENT_BUS": bus.event_bus_name,
            "AWS_REGION": region,
            "KAFKALAKE_CACHE_TTL_SECONDS": settings.cache_ttl_seconds,
            "KAFKALAKE_COMPLETENESS_DELAY_SECONDS": settings.completeness_delay_seconds,
        }
    )
    powertools = {"POWERTOOLS_SERVICE_NAME": MAINTAINER_SERVICE, "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE}
    return {**environment.to_env(), **powertools}


class Maintainer(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentConfig,
        topics: list[Topic],
        databases: list[str],
        bucket: s3.IBucket,
        lake_key: kms.IKey,
        queue_key: kms.IKey,
        queue: sqs.IQueue,
        bus: events.IEventBus,
        build_dir: Path,
    ) -> None:
        super().__init__(scope, construct_id)
        name = f"kafkalake-{settings.name}-maintainer"
        self.key = lake_key
        log_group = function_logs(self, name, self.key)
        self.dead_letters = invocation_dlq(self, "the maintainer", queue_key)
        self.role = self._role(log_group, topics, databases, bucket, (lake_key, queue_key), queue, bus)
        self.code = lambda_.Code.from_asset(str(maintainer_bundle(build_dir, topics)))
        """The Lambdas' bundle, shared with the reconciler."""
        self.function = python_function(
            self,
            settings=settings,
            name=name,
            handler="lambdas.maintainer.handler.handler",
            code=self.code,
            role=self.role,
            log_group=log_group,
            dead_letters=self.dead_letters,
            key=self.key,
            timeout=Duration.seconds(settings.maintainer_timeout_seconds),
            environment=function_environment(settings, queue, bus, Stack.of(self).region),
            reserved_concurrency=settings.maintainer_reserved_concurrency,
        )
        minutes = Duration.minutes(settings.maintainer_schedule_minutes)
        schedule(self, self.function, events.Schedule.rate(minutes), self.dead_letters)

    def _role(  # noqa: PLR0917 - the resources the role grants access to
        self,
        log_group: logs.ILogGroup,
        topics: list[Topic],
        databases: list[str],
        bucket: s3.IBucket,
        keys: tuple[kms.IKey, kms.IKey],
        queue: sqs.IQueue,
        bus: events.IEventBus,
    ) -> iam.Role:
        stack = Stack.of(self)
        lake_key, _ = keys
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        crawlers = crawler_patterns(topics, databases)
        statements = [
            (["logs:CreateLogStream", "logs:PutLogEvents"], [log_group.log_group_arn]),
            (
                ["sqs:ReceiveMessage", "sqs:DeleteMessage"],  # the drain's only queue calls (it has the queue's URL)
                [queue.queue_arn],
            ),
            (["kms:Decrypt"], [k.key_arn for k in keys]),
            (list(MAINTAINER_GLUE_ACTIONS), glue_table_resources(stack, databases)),
            # Looked up only for a table of our databases (lambdas/maintainer/sync.py: TableSync._resolve).
            (["glue:GetCrawler", "glue:StartCrawler"], [f"{glue_arn(stack)}:crawler/{c}" for c in crawlers]),
            (["s3:GetObject"], [bucket.arn_for_objects(f"{DATA_ROOT}/*")]),
            (["s3:PutObject"], [bucket.arn_for_objects(p) for p in (LATE_DATA_MARKERS, COMPLETENESS_CLAIMS)]),
            # A claim whose creation was refused (412) is read back: it may be this drain's own, its answer lost.
            (["s3:GetObject"], [bucket.arn_for_objects(COMPLETENESS_CLAIMS)]),
            (["kms:GenerateDataKey"], [lake_key.key_arn]),
            (["events:PutEvents"], [bus.event_bus_arn]),
            (["lakeformation:AddLFTagsToResource"], ["*"]),
        ]
        for actions, resources in statements:
            role.add_to_policy(iam.PolicyStatement(actions=actions, resources=resources))
        acknowledge(
            role,
            "X-Ray trace upload and Lake Formation's AddLFTagsToResource (tagging the tables it creates; Lake "
            "Formation's ASSOCIATE grant scopes it to our tags) have no resource-level permissions (AWS requires *). "
            "Tables and crawlers are "
            "created at run time, so their ARNs end in a wildcard scoped to our databases and crawler naming "
            "convention; data objects are read by key under the data prefix, and late-data markers and "
            "completeness-event claims are written by key under each topic's state prefix.",
            "AwsSolutions-IAM5[Resource::*]",
            object_finding(bucket, DATA_ROOT),
            object_finding(bucket, LATE_DATA_MARKERS.removesuffix("/*")),
            object_finding(bucket, COMPLETENESS_CLAIMS.removesuffix("/*")),
            *glue_table_findings(stack, databases),
            *[
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:glue:{stack.region}:<AWS::AccountId>:crawler/{c}]"
                for c in crawlers
                if "*" in c
            ],
        )
        return role
