"""The reconciler: a Lambda that compares S3 with Glue on a schedule (``reconcile_schedule``) and adds the partitions
whose S3 events were lost; its metric ``ReconcilePartitionsRepaired`` has an alarm in ``Monitoring``."""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.functions import function_logs, invocation_dlq, python_function, schedule
from infra.constructs.iam import glue_table_findings, glue_table_resources
from infra.nag import acknowledge
from kafkalake.environments import EnvironmentConfig
from kafkalake.lambda_env import ReconcilerEnvironment
from kafkalake.layout import DATA_ROOT, LEGACY_COMPACTED_ROOT
from kafkalake.metrics import NAMESPACE, RECONCILER_SERVICE

RECONCILER_GLUE_ACTIONS = ("glue:GetTable", "glue:GetPartitions", "glue:BatchCreatePartition")


class Reconciler(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentConfig,
        databases: list[str],
        bucket: s3.IBucket,
        key: kms.IKey,
        queue_key: kms.IKey,
        code: lambda_.Code,
    ) -> None:
        super().__init__(scope, construct_id)
        name = f"kafkalake-{settings.name}-reconciler"
        log_group = function_logs(self, name, key)
        self.dead_letters = invocation_dlq(self, "the reconciler", queue_key)
        environment = ReconcilerEnvironment.model_validate(
            {"KAFKALAKE_BUCKET": settings.bucket, "AWS_REGION": Stack.of(self).region}
        )
        powertools = {"POWERTOOLS_SERVICE_NAME": RECONCILER_SERVICE, "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE}
        self.role = self._role(log_group, databases, bucket)
        self.function = python_function(
            self,
            settings=settings,
            name=name,
            handler="lambdas.reconciler.handler.handler",
            code=code,
            role=self.role,
            log_group=log_group,
            dead_letters=self.dead_letters,
            key=key,
            timeout=Duration.seconds(settings.reconciler_timeout_seconds),
            environment={**environment.to_env(), **powertools},
        )
        schedule(self, self.function, events.Schedule.expression(settings.reconcile_schedule), self.dead_letters)

    def _role(self, log_group: logs.ILogGroup, databases: list[str], bucket: s3.IBucket) -> iam.Role:
        """Logs, our Glue tables (read, add partitions), and listing the data prefix (compaction output included) and
        the legacy compaction root (partitions compacted before the output moved under the tables)."""
        stack = Stack.of(self)
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        listing = {"StringLike": {"s3:prefix": [f"{DATA_ROOT}/*", f"{LEGACY_COMPACTED_ROOT}/*"]}}
        statements = [
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]
            ),
            iam.PolicyStatement(
                actions=list(RECONCILER_GLUE_ACTIONS), resources=glue_table_resources(stack, databases)
            ),
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn], conditions=listing),
        ]
        for statement in statements:
            role.add_to_policy(statement)
        acknowledge(
            role,
            "X-Ray trace upload has no resource-level permissions (AWS requires *). Tables are created at run time "
            "by the maintainer, so their ARNs end in a wildcard scoped to our databases.",
            "AwsSolutions-IAM5[Resource::*]",
            *glue_table_findings(stack, databases),
        )
        return role
