"""The Glue side: one database per company and environment, one crawler per crawler-mode topic (defined by
``kafkalake.glue.CrawlerSpec``, as the local provisioning defines it), their role and security configuration."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.iam import READ_GRANT_FINDINGS, object_finding
from infra.nag import acknowledge
from kafkalake.catalog import Topic
from kafkalake.environments import EnvironmentSettings
from kafkalake.layout import DATA_ROOT
from kafkalake.naming import TableInference


class GlueCatalog(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentSettings,
        topics: list[Topic],
        bucket: s3.IBucket,
        key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        self.databases = sorted({t.database for t in topics})
        for database in self.databases:
            glue.CfnDatabase(
                self,
                f"Database-{database}",
                catalog_id=Stack.of(self).account,
                database_input=glue.CfnDatabase.DatabaseInputProperty(name=database),
            )
        self.crawler_role = self._crawler_role(bucket, key)
        self.security_configuration = self._security_configuration(settings, key)
        self.crawlers = [
            self._crawler(topic, settings.bucket)
            for topic in topics
            if topic.spec.table_inference == TableInference.CRAWLER
        ]

    def _crawler_role(self, bucket: s3.IBucket, key: kms.IKey) -> iam.Role:
        role = iam.Role(
            self,
            "CrawlerRole",
            assumed_by=iam.ServicePrincipal("glue.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSGlueServiceRole")],
        )
        acknowledge(
            role,
            "AWSGlueServiceRole is the role AWS documents for Glue crawlers.",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSGlueServiceRole]",
        )
        bucket.grant_read(role, f"{DATA_ROOT}/*")
        key.grant_encrypt_decrypt(role)
        acknowledge(
            role,
            "Crawlers read every object under the data prefix (CDK's grant_read actions) and "
            "decrypt them with the lake key (grant_encrypt_decrypt's key actions).",
            *READ_GRANT_FINDINGS,
            object_finding(bucket, DATA_ROOT),
        )
        return role

    def _security_configuration(self, settings: EnvironmentSettings, key: kms.IKey) -> glue.CfnSecurityConfiguration:
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
        spec = topic.crawler(bucket_name)
        return glue.CfnCrawler(
            self,
            f"Crawler-{topic.database}-{topic.table}",
            name=spec.name,
            role=self.crawler_role.role_arn,
            database_name=spec.database,
            targets=glue.CfnCrawler.TargetsProperty(s3_targets=[glue.CfnCrawler.S3TargetProperty(path=spec.location)]),
            recrawl_policy=glue.CfnCrawler.RecrawlPolicyProperty(recrawl_behavior=spec.recrawl_behavior),
            schema_change_policy=glue.CfnCrawler.SchemaChangePolicyProperty(
                update_behavior=spec.update_behavior, delete_behavior=spec.delete_behavior
            ),
            configuration=spec.configuration,
            crawler_security_configuration=self.security_configuration.name,
        )
