"""EMR Serverless: the packaged jobs as assets, the application, the archiver's and compactor's job roles, and the
Scheduler schedules that start them with the job-run specification of ``kafkalake.jobspec``."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Stack
from aws_cdk import aws_emrserverless as emr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from infra.assets import job_environment, jobs_bundle
from infra.constructs.iam import (
    READ_GRANT_FINDINGS,
    asset_bucket_finding,
    glue_table_findings,
    glue_table_resources,
    object_finding,
)
from infra.nag import acknowledge
from kafkalake.catalog import Topic
from kafkalake.environments import EnvironmentSettings
from kafkalake.jobspec import EMR_RELEASE, JobArtifacts, JobRun, archiver_run, compactor_run
from kafkalake.layout import COMPACTED_ROOT, DATA_ROOT, QUARANTINE_ROOT, STATE_ROOT
from kafkalake.metrics import NAMESPACE

ARCHIVER_ROOTS = (DATA_ROOT, QUARANTINE_ROOT, STATE_ROOT)
COMPACTOR_ROOTS = (DATA_ROOT, COMPACTED_ROOT, STATE_ROOT)


class Jobs(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentSettings,
        topics: list[Topic],
        databases: list[str],
        bucket: s3.IBucket,
        key: kms.IKey,
        build_dir: Path,
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings, self.bucket, self.key, self.databases = settings, bucket, key, databases
        bundle = jobs_bundle(build_dir)
        self.assets = (
            s3_assets.Asset(self, "JobPackage", path=str(bundle / "kafkalake_jobs.zip")),
            s3_assets.Asset(self, "JobEntrypoint", path=str(bundle / "entrypoint.py")),
            s3_assets.Asset(self, "JobCatalog", path=str(bundle / "catalog.zip")),
            s3_assets.Asset(self, "JobEnvironment", path=str(job_environment(build_dir / "environment"))),
        )
        package, entrypoint, catalog, environment = self.assets
        artifacts = JobArtifacts(
            entrypoint.s3_object_url, package.s3_object_url, catalog.s3_object_url, environment.s3_object_url
        )
        network = None
        if settings.subnet_ids:
            network = emr.CfnApplication.NetworkConfigurationProperty(
                subnet_ids=list(settings.subnet_ids), security_group_ids=list(settings.security_group_ids)
            )
        self.application = emr.CfnApplication(
            self,
            "Spark",
            name=f"kafkalake-{settings.name}",
            release_label=EMR_RELEASE,
            type="SPARK",
            auto_start_configuration=emr.CfnApplication.AutoStartConfigurationProperty(enabled=True),
            auto_stop_configuration=emr.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=15
            ),
            network_configuration=network,
        )
        self.archiver_role = self._archiver_role()
        self.compactor_role = self._compactor_role()
        names = [t.name for t in topics]
        self.schedules = {
            "Archiver": self._schedule(
                "Archiver",
                f"rate({settings.archiver_schedule_minutes} minutes)",
                self.archiver_role,
                archiver_run(settings, artifacts),
            ),
            "Compactor": self._schedule(
                "Compactor", "rate(1 hour)", self.compactor_role, compactor_run(settings, artifacts, names)
            ),
        }

    def _job_role(self, name: str, roots: tuple[str, ...], object_actions: list[str]) -> iam.Role:
        role = iam.Role(self, name, assumed_by=iam.ServicePrincipal("emr-serverless.amazonaws.com"))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=object_actions, resources=[self.bucket.arn_for_objects(f"{root}/*") for root in roots]
            )
        )
        role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn]))
        for asset in self.assets:
            asset.grant_read(role)
        self.key.grant_encrypt_decrypt(role)
        return role

    def _archiver_role(self) -> iam.Role:
        role = self._job_role("ArchiverJobRole", ARCHIVER_ROOTS, ["s3:GetObject", "s3:PutObject"])
        role.add_to_policy(
            iam.PolicyStatement(actions=["s3:DeleteObject"], resources=[self.bucket.arn_for_objects(f"{STATE_ROOT}/*")])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": NAMESPACE}},
            )
        )
        if self.settings.kafka_secret_arn:
            secret = self.settings.kafka_secret_arn
            role.add_to_policy(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[secret]))
        acknowledge(
            role,
            "The archiver writes objects it names at run time under the data, quarantine and "
            "state prefixes, and reads its job package from the CDK asset bucket (CDK's grant_read actions). "
            "PutMetricData has no resource-level permissions (AWS requires *); a condition limits it to the "
            "kafkalake namespace.",
            "AwsSolutions-IAM5[Resource::*]",
            *READ_GRANT_FINDINGS,
            *(object_finding(self.bucket, root) for root in ARCHIVER_ROOTS),
            asset_bucket_finding(Stack.of(self)),
        )
        return role

    def _compactor_role(self) -> iam.Role:
        stack = Stack.of(self)
        role = self._job_role("CompactorJobRole", COMPACTOR_ROOTS, ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"])
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["glue:GetPartitions", "glue:GetPartition", "glue:UpdatePartition", "glue:GetTable"],
                resources=glue_table_resources(stack, self.databases),
            )
        )
        acknowledge(
            role,
            "The compactor reads and deletes objects under the data prefix, writes and deletes its own "
            "output and manifests, and updates partitions of tables created at run time in our databases; it "
            "reads its job package from the CDK asset bucket (CDK's grant_read actions).",
            *READ_GRANT_FINDINGS,
            *(object_finding(self.bucket, root) for root in COMPACTOR_ROOTS),
            *glue_table_findings(stack, self.databases),
            asset_bucket_finding(stack),
        )
        return role

    def _schedule(self, name: str, expression: str, job_role: iam.Role, run: JobRun) -> scheduler.CfnSchedule:
        """An EventBridge Scheduler schedule that starts ``run`` on the application."""
        scheduler_role = iam.Role(
            self, f"{name}SchedulerRole", assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com")
        )
        scheduler_role.add_to_policy(
            iam.PolicyStatement(actions=["emr-serverless:StartJobRun"], resources=[self.application.attr_arn])
        )
        scheduler_role.add_to_policy(iam.PolicyStatement(actions=["iam:PassRole"], resources=[job_role.role_arn]))
        request = run.scheduler_input(self.application.attr_application_id, job_role.role_arn)
        return scheduler.CfnSchedule(
            self,
            f"{name}Schedule",
            name=run.name,
            schedule_expression=expression,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn="arn:aws:scheduler:::aws-sdk:emrserverless:startJobRun",
                role_arn=scheduler_role.role_arn,
                input=Stack.of(self).to_json_string(request),
            ),
        )
