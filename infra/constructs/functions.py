"""What the stack's Lambdas share: an encrypted log group, an invocation dead-letter queue, and the function itself
(Python on arm64, the environment's layers, X-Ray, no retries), with the scanner findings they all answer alike."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.constructs.queues import dead_letter_queue
from infra.nag import acknowledge, skip_scanners
from kafkalake.environments import EnvironmentConfig


def function_logs(scope: Construct, name: str, key: kms.IKey) -> logs.LogGroup:
    return logs.LogGroup(
        scope,
        "Logs",
        log_group_name=f"/aws/lambda/{name}",
        retention=logs.RetentionDays.THREE_MONTHS,
        encryption_key=key,
        removal_policy=RemovalPolicy.DESTROY,
    )


def invocation_dlq(scope: Construct, name: str, key: kms.IKey) -> sqs.Queue:
    return dead_letter_queue(scope, "InvocationDlq", key=key, purpose=f"the dead-letter queue of {name}'s invocations")


def python_function(
    scope: Construct,
    *,
    settings: EnvironmentConfig,
    name: str,
    handler: str,
    code: lambda_.Code,
    role: iam.IRole,
    log_group: logs.ILogGroup,
    dead_letters: sqs.IQueue,
    key: kms.IKey,
    timeout: Duration,
    environment: dict[str, str],
    reserved_concurrency: int | None = None,
) -> lambda_.Function:
    """A scheduled function: a failed invocation is not retried (the next scheduled one does its work) and goes to
    ``dead_letters``."""
    function = lambda_.Function(
        scope,
        "Function",
        function_name=name,
        runtime=lambda_.Runtime.PYTHON_3_13,
        architecture=lambda_.Architecture.ARM_64,
        handler=handler,
        code=code,
        layers=[
            lambda_.LayerVersion.from_layer_version_arn(scope, f"Layer{i}", arn)
            for i, arn in enumerate(settings.maintainer_layers)
        ],
        memory_size=1024,
        timeout=timeout,
        reserved_concurrent_executions=reserved_concurrency,
        retry_attempts=0,
        max_event_age=Duration.hours(1),
        dead_letter_queue=dead_letters,
        environment_encryption=key,
        role=role,
        log_group=log_group,
        tracing=lambda_.Tracing.ACTIVE,
        environment=environment,
    )
    skip_scanners(
        function,
        "The function calls only AWS APIs (SQS, Glue, S3, EventBridge) over TLS with IAM; in a VPC it would need "
        "endpoints or a NAT for each, and it reaches no VPC resource. CDK adds the role dependency itself. "
        "Reserved concurrency is a setting (maintainer_reserved_concurrency, maintainer only), unset by default: "
        "reserving fails in accounts with the default quota; runs stay single-flight as each schedule's interval "
        "exceeds its timeout and failed invocations are not retried.",
        cfn_lint=["W3005"],
        checkov=["CKV_AWS_117", "CKV_AWS_115"],
    )
    acknowledge(
        function,
        "Pinned to python3.13, the runtime of the Powertools and SDK-for-pandas layers "
        "configured in environments.yaml; upgrade together with the layers.",
        "AwsSolutions-L1",
    )
    return function


def schedule(
    scope: Construct, function: lambda_.IFunction, expression: events.Schedule, dead_letters: sqs.IQueue
) -> None:
    """Invoke ``function`` on ``expression``; deliveries EventBridge cannot make go to ``dead_letters``."""
    rule = events.Rule(
        scope,
        "Schedule",
        schedule=expression,
        targets=[targets.LambdaFunction(function, dead_letter_queue=dead_letters, retry_attempts=2)],
    )
    skip_scanners(
        rule,
        "The function has an EventInvokeConfig (no retries, events at most an hour old); the rule compares the "
        "permission's function ARN with the config's function name and does not see it.",
        cfn_lint=["ES1007"],
    )
