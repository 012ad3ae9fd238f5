"""IAM resources and cdk-nag finding names the constructs share."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3


def glue_arn(stack: Stack) -> str:
    return f"arn:{stack.partition}:glue:{stack.region}:{stack.account}"


def glue_table_resources(stack: Stack, databases: list[str]) -> list[str]:
    """The catalog, our databases and every table in them (tables are created at run time)."""
    arn = glue_arn(stack)
    return [
        f"{arn}:catalog",
        *(f"{arn}:database/{db}" for db in databases),
        *(f"{arn}:table/{db}/*" for db in databases),
    ]


def glue_table_findings(stack: Stack, databases: list[str]) -> list[str]:
    """The cdk-nag names of the table wildcards of ``glue_table_resources``."""
    return [
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:glue:{stack.region}:<AWS::AccountId>:table/{db}/*]"
        for db in databases
    ]


def object_finding(bucket: s3.IBucket, root: str) -> str:
    """The cdk-nag name of a ``<bucket>/<root>/*`` object wildcard."""
    lake_id = Stack.of(bucket).resolve(bucket.bucket_arn)["Fn::GetAtt"][0]
    return f"AwsSolutions-IAM5[Resource::<{lake_id}.Arn>/{root}/*]"


def admit_logs(key: kms.Key) -> None:
    """Let CloudWatch Logs in this region use ``key`` for this account's log groups (crawler and Lambda logs)."""
    stack = Stack.of(key)
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="CloudWatchLogs",
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            resources=["*"],
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": (
                        f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
                    )
                }
            },
        )
    )


def admit_cloudwatch_alarms(key: kms.Key) -> None:
    """Let CloudWatch alarms publish to SNS topics encrypted with ``key``."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="CloudWatchAlarms",
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"],
            resources=["*"],
            conditions={"StringEquals": {"aws:SourceAccount": Stack.of(key).account}},
        )
    )
