"""The Glue side: one database per company and environment, one crawler per crawler-mode topic (defined by
``kafkalake.glue.CrawlerSpec``, as the local provisioning defines it), their role and security configuration."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.iam import glue_table_findings, glue_table_resources, object_finding
from infra.nag import acknowledge
from kafkalake.environments import EnvironmentConfig
from kafkalake.layout import DATA_ROOT
from kafkalake.topic_catalog import Topic

CRAWLER_GLUE_ACTIONS = (
    "glue:GetDatabase",
    "glue:GetTable",
    "glue:GetTables",
    "glue:CreateTable",
    "glue:UpdateTable",
    "glue:GetPartition",
    "glue:GetPartitions",
    "glue:BatchGetPartition",
    "glue:CreatePartition",
    "glue:BatchCreatePartition",
    "glue:UpdatePartition",
    "glue:BatchUpdatePartition",
)
CRAWLER_LOG_GROUPS = "/aws-glue/crawlers*"
"""Glue names a crawler's log group after its role and security configuration, under this prefix."""


class GlueDatabases(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentConfig,
        topics: list[Topic],
        bucket: s3.IBucket,
        key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        self.databases = sorted({t.database for t in topics})
        self.database_resources = {
            database: glue.CfnDatabase(
                self,
                f"Database-{database}",
                catalog_id=Stack.of(self).account,
                # No IAMAllowedPrincipals grant on new tables: Lake Formation decides (infra.constructs.lake_access).
                database_input=glue.CfnDatabase.DatabaseInputProperty(
                    name=database, create_table_default_permissions=[]
                ),
            )
            for database in self.databases
        }
        self.security_configuration = self._security_configuration(settings, key)
        self.crawler_role = self._crawler_role(bucket, key)
        self.crawlers = [self._crawler(topic, settings.bucket) for topic in topics if topic.crawled]

    def _crawler_role(self, bucket: s3.IBucket, key: kms.IKey) -> iam.Role:
        """Scoped to what the crawlers do: read the data prefix, write tables and partitions of our databases, and
        write their logs (encrypted with the lake key) to the crawler log groups."""
        stack = Stack.of(self)
        role = iam.Role(
            self,
            "CrawlerRole",
            assumed_by=iam.ServicePrincipal(
                "glue.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
        )
        logs = f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{CRAWLER_LOG_GROUPS}"
        statements = [
            (list(CRAWLER_GLUE_ACTIONS), glue_table_resources(stack, self.databases)),
            (["glue:GetSecurityConfiguration"], ["*"]),
            (["s3:GetObject"], [bucket.arn_for_objects(f"{DATA_ROOT}/*")]),
            (["s3:ListBucket"], [bucket.bucket_arn]),
            (["kms:Decrypt", "kms:GenerateDataKey"], [key.key_arn]),
            (["logs:CreateLogGroup", "logs:AssociateKmsKey"], [logs]),
            (["logs:CreateLogStream", "logs:PutLogEvents"], [f"{logs}:log-stream:*"]),
        ]
        for actions, resources in statements:
            role.add_to_policy(iam.PolicyStatement(actions=actions, resources=resources))
        acknowledge(
            role,
            "Crawlers read every object under the data prefix and write tables and partitions created at run "
            "time in our databases; their log groups are named by Glue (role and security configuration). "
            "GetSecurityConfiguration has no resource-level permissions.",
            "AwsSolutions-IAM5[Resource::*]",
            object_finding(bucket, DATA_ROOT),
            *glue_table_findings(stack, self.databases),
            f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:{stack.region}:<AWS::AccountId>:log-group:"
            f"{CRAWLER_LOG_GROUPS}]",
            f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:{stack.region}:<AWS::AccountId>:log-group:"
            f"{CRAWLER_LOG_GROUPS}:log-stream:*]",
        )
        return role

    def _security_configuration(self, settings: EnvironmentConfig, key: kms.IKey) -> glue.CfnSecurityConfiguration:
        encryption = glue.CfnSecurityConfiguration
        return glue.CfnSecurityConfiguration(
            self,
            "GlueSecurity",
            name=f"kafkalake-{settings.name}",
            encryption_configuration=encryption.EncryptionConfigurationProperty(
                cloud_watch_encryption=encryption.CloudWatchEncryptionProperty(
                    cloud_watch_encryption_mode="SSE-KMS", kms_key_arn=key.key_arn
                ),
                job_bookmarks_encryption=encryption.JobBookmarksEncryptionProperty(
                    job_bookmarks_encryption_mode="CSE-KMS", kms_key_arn=key.key_arn
                ),
                s3_encryptions=[encryption.S3EncryptionProperty(s3_encryption_mode="SSE-KMS", kms_key_arn=key.key_arn)],
            ),
        )

    def _crawler(self, topic: Topic, bucket_name: str) -> glue.CfnCrawler:
        """Its database and security configuration by reference: CloudFormation creates them first."""
        spec = topic.crawler(bucket_name)
        return glue.CfnCrawler(
            self,
            f"Crawler-{topic.database}-{topic.table}",
            name=spec.name,
            role=self.crawler_role.role_arn,
            database_name=self.database_resources[spec.database].ref,
            targets=glue.CfnCrawler.TargetsProperty(
                s3_targets=[glue.CfnCrawler.S3TargetProperty(path=spec.location, exclusions=list(spec.exclusions))]
            ),
            recrawl_policy=glue.CfnCrawler.RecrawlPolicyProperty(recrawl_behavior=spec.recrawl_behavior),
            schema_change_policy=glue.CfnCrawler.SchemaChangePolicyProperty(
                update_behavior=spec.update_behavior, delete_behavior=spec.delete_behavior
            ),
            configuration=spec.configuration,
            crawler_security_configuration=self.security_configuration.ref,
        )
