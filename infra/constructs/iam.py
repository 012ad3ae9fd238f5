"""IAM resources and cdk-nag finding names the constructs share."""

from __future__ import annotations

from aws_cdk import DefaultStackSynthesizer, Stack
from aws_cdk import aws_s3 as s3

READ_GRANT_FINDINGS = tuple(
    f"AwsSolutions-IAM5[Action::{a}]"
    for a in ("s3:GetObject*", "s3:GetBucket*", "s3:List*", "kms:ReEncrypt*", "kms:GenerateDataKey*")
)
"""The wildcard actions of CDK's ``grant_read`` / ``grant_encrypt_decrypt``."""


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


def asset_bucket_finding(stack: Stack) -> str:
    """The cdk-nag name of the CDK assets bucket's object wildcard (``grant_read`` on an asset)."""
    qualifier = DefaultStackSynthesizer.DEFAULT_QUALIFIER
    bucket = f"cdk-{qualifier}-assets-<AWS::AccountId>-{stack.region}"
    return f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{bucket}/*]"
