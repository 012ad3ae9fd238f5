"""EMR Serverless: the packaged jobs as assets, one application per job (so capacity and failures stay apart), the
job roles, and the Scheduler schedules that start the runs specified by ``kafkalake.jobspec``.

Past 400 lines by a few: the worker sizes and the job roles' actions sit beside the applications they configure, each
with why."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from aws_cdk import Stack
from aws_cdk import aws_emrserverless as emr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from infra.assets import connector_jars, job_environment, jobs_bundle
from infra.constructs.iam import glue_table_findings, glue_table_resources, object_finding
from infra.constructs.personal import PersonalData
from infra.constructs.queues import dead_letter_queue
from infra.msk import CLUSTER_ACTIONS, GROUP_ACTIONS, SHARED_GROUP_ACTIONS, TOPIC_ACTIONS, archiver_resources
from infra.nag import acknowledge
from kafkalake.environments import EnvironmentConfig
from kafkalake.job_runs import archiver_run, compactor_run, erasure_run
from kafkalake.jobspec import EMR_RELEASE, JobArtifacts, JobRun
from kafkalake.layout import (
    COMPACTED_DIR,
    DATA_ROOT,
    ERASURE_ROOT,
    LEGACY_COMPACTED_ROOT,
    QUARANTINE_ROOT,
    STATE_ROOT,
    erasure_prefix,
    erasure_requests_prefix,
    subject_indexes_prefix,
)
from kafkalake.metrics import NAMESPACE
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TableFormat

ARCHIVER_ROOTS = (DATA_ROOT, QUARANTINE_ROOT, STATE_ROOT)
COMPACTOR_ROOTS = (DATA_ROOT, LEGACY_COMPACTED_ROOT, STATE_ROOT)
"""The compactor reads and deletes under these; it writes only its manifests and its output."""
COMPACTOR_WRITES = (STATE_ROOT, f"{DATA_ROOT}/*/{COMPACTED_DIR}")
"""Manifests, and the output under each table's location (``kafkalake.layout``); never raw files, never the legacy
root."""
ERASURE_ROOTS = (DATA_ROOT, QUARANTINE_ROOT, STATE_ROOT)
"""The erasure job reads, writes and deletes under these and under its environment's ``erasure_prefix``: rewritten
partitions (as the compactor), quarantine objects rewritten in place, manifests and leases; requests, receipts, its
lease and the subject indexes."""
ERASURE_LEGACY = (LEGACY_COMPACTED_ROOT,)
"""Partitions compacted before the output moved under the tables: the erasure job reads them (its scan and subject
index) and deletes what its rewrite replaced, as the compactor does; it never writes there (its output goes under
the table's ``_compacted/`` folder)."""
ERASURE_PURGES = (DATA_ROOT, LEGACY_COMPACTED_ROOT, QUARANTINE_ROOT)
"""Where the erasure job deletes object versions by id (s3:DeleteObjectVersion): the data (the legacy compaction
root included) and quarantine, and its environment's subject indexes and requests (old segments, and the versions of
a done request before what remains of it, hold erased subjects' digests)."""
REWRITER_GLUE_ACTIONS = ("glue:GetPartitions", "glue:GetPartition", "glue:UpdatePartition")
"""The compactor and the erasure job read a table's partitions and re-point them (``kafkalake.glue``); neither reads
the table itself (the permission check saw no GetTable)."""
ICEBERG_COMMITTER_GLUE_ACTIONS = ("glue:GetDatabase", "glue:GetTable", "glue:CreateTable", "glue:UpdateTable")
"""The archiver makes an Iceberg topic's table at its first plan (pyiceberg reads its database first) and commits every
plan to it (``kafkalake.iceberg``): each commit reads the table and swaps its metadata location under Glue's
optimistic lock."""
ICEBERG_REWRITER_GLUE_ACTIONS = ("glue:GetTable", "glue:UpdateTable")
"""The compactor's and the erasure job's Iceberg commits (rewrites, deletes, snapshot expiry) on existing tables."""
ICEBERG_REWRITER_OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")
"""Under an Iceberg table's location only: rewritten data files and new metadata written, expired ones deleted."""
KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")
"""What S3 asks KMS for on a job's behalf with the lake key: a data key to write an SSE-KMS object (a multipart upload
and a copy's destination too), and its decryption to read one (a multipart upload's parts too). Nothing encrypts or
re-encrypts with the key directly."""
COMPACTOR_SIZES: dict[str, str] = {
    "spark.driver.cores": "2",
    "spark.driver.memory": "3g",
    "spark.driver.memoryOverhead": "1g",
    "spark.executor.cores": "4",
    "spark.executor.memory": "3g",
    "spark.executor.memoryOverhead": "5g",
}
"""The compactor's driver and executors; the erasure job rewrites partitions with the same merge tasks."""
WORKER_SIZES: dict[str, dict[str, str]] = {
    "Archiver": {
        "spark.driver.cores": "2",
        "spark.driver.memory": "2g",
        "spark.driver.memoryOverhead": "2g",
        "spark.executor.cores": "2",
        "spark.executor.memory": "2g",
        "spark.executor.memoryOverhead": "2g",
    },
    "Compactor": COMPACTOR_SIZES,
    "Erasure": COMPACTOR_SIZES,
}
"""Each application's driver and executor (EMR Serverless's ``spark-defaults``), sized from the peak memory the
benchmarks measured (the peaks per plan size in the results bench/results/INDEX.json adopts, sized by bench/sizing.py; a
unit test checks these equal what the adopted results derive, see docs/benchmarks.md), where EMR's default is 4 vCPU /
16 GB for both: 2-vCPU / 4 GB drivers, the archiver's executors 2 vCPU / 4 GB (``bench.sizing.ARCHIVER_EXECUTOR_CORES``:
a run at the default schedule is billed the one-minute minimum of each worker), the compactor's 4 vCPU / 8 GB (its
merges buffer a row group of up to 128 MiB per Python worker). The Python driver and workers live in each worker's
memory overhead."""


def asset_object_arn(stack: Stack, asset: s3_assets.Asset) -> str:
    """The one object of an asset in the CDK assets bucket: a job role may read its job's assets, nothing else."""
    return f"arn:{stack.partition}:s3:::{asset.s3_bucket_name}/{asset.s3_object_key}"


class Jobs(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentConfig,
        topics: list[Topic],
        databases: list[str],
        bucket: s3.IBucket,
        key: kms.IKey,
        queue_key: kms.IKey,
        personal: PersonalData,
        build_dir: Path,
    ) -> None:
        super().__init__(scope, construct_id)
        self.settings, self.bucket, self.key, self.databases = settings, bucket, key, databases
        self.iceberg_topics = [t for t in topics if t.spec.table_format == TableFormat.ICEBERG]
        self.kafka_topics = [t.kafka_topic for t in topics]
        self.assets = self._assets(build_dir)
        package, entrypoint, catalog, environment, *jars = (asset.s3_object_url for asset in self.assets)
        artifacts = JobArtifacts(entrypoint, package, catalog, environment, tuple(jars))
        self.applications = {name: self._application(name) for name in ("Archiver", "Compactor", "Erasure")}
        self.archiver_role = self._archiver_role()
        personal.grant_archiver(self.archiver_role)
        archiver = archiver_run(settings, artifacts)
        self.compactor_role = self._compactor_role()
        self.erasure_role = self._erasure_role()
        personal.grant_eraser(self.erasure_role)
        erasure = erasure_run(settings, artifacts)
        self.group = scheduler.CfnScheduleGroup(self, "ScheduleGroup", name=f"kafkalake-{settings.name}")
        self.dead_letters = dead_letter_queue(
            self, "ScheduleDlq", key=queue_key, purpose="the dead-letter queue of the job schedules"
        )
        self.schedules = {
            "Archiver": self._schedule(
                "Archiver",
                f"rate({settings.archiver_schedule_minutes} minutes)",
                self.archiver_role,
                dataclasses.replace(archiver, endpoints=personal.endpoints(archiver.endpoints)),
                queue_key,
            ),
            "Compactor": self._schedule(
                "Compactor",
                "rate(1 hour)",
                self.compactor_role,
                compactor_run(settings, artifacts, [t.name for t in topics]),
                queue_key,
            ),
            "Erasure": self._schedule(
                "Erasure",
                "rate(1 hour)",
                self.erasure_role,
                dataclasses.replace(erasure, endpoints=personal.endpoints(erasure.endpoints)),
                queue_key,
            ),
        }

    def _assets(self, build_dir: Path) -> list[s3_assets.Asset]:
        """The jobs zip, the entry point, the catalog, the Python environment, then one asset per jar the jobs ship."""
        bundle = jobs_bundle(build_dir)
        files = [
            ("JobPackage", bundle / "kafkalake_jobs.zip"),
            ("JobEntrypoint", bundle / "entrypoint.py"),
            ("JobCatalog", bundle / "catalog.zip"),
            ("JobEnvironment", job_environment(build_dir / "environment")),
            *((f"Jar-{jar.stem}", jar) for jar in connector_jars()),
        ]
        return [s3_assets.Asset(self, name, path=str(path)) for name, path in files]

    def _application(self, name: str) -> emr.CfnApplication:
        settings = self.settings
        network = None
        if settings.subnet_ids:
            network = emr.CfnApplication.NetworkConfigurationProperty(
                subnet_ids=list(settings.subnet_ids), security_group_ids=list(settings.security_group_ids)
            )
        return emr.CfnApplication(
            self,
            name,
            name=f"kafkalake-{settings.name}-{name.lower()}",
            release_label=EMR_RELEASE,
            type="SPARK",
            auto_start_configuration=emr.CfnApplication.AutoStartConfigurationProperty(enabled=True),
            auto_stop_configuration=emr.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=15
            ),
            maximum_capacity=emr.CfnApplication.MaximumAllowedResourcesProperty(
                cpu=f"{settings.emr_max_vcpu} vCPU",
                memory=f"{settings.emr_max_memory_gb} GB",
                disk=f"{settings.emr_max_disk_gb} GB",
            ),
            network_configuration=network,
            runtime_configuration=[
                emr.CfnApplication.ConfigurationObjectProperty(
                    classification="spark-defaults", properties=WORKER_SIZES[name]
                )
            ],
        )

    def _job_role(self, name: str, roots: tuple[str, ...], object_actions: list[str]) -> iam.Role:
        stack = Stack.of(self)
        applications = f"arn:{stack.partition}:emr-serverless:{stack.region}:{stack.account}:/applications/*"
        principal = iam.ServicePrincipal(
            "emr-serverless.amazonaws.com",
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {"aws:SourceArn": applications},
            },
        )
        role = iam.Role(self, name, assumed_by=principal)
        statements = [
            (object_actions, [self.bucket.arn_for_objects(f"{root}/*") for root in roots]),
            (["s3:ListBucket"], [self.bucket.bucket_arn]),
            (["s3:GetObject"], [asset_object_arn(stack, a) for a in self.assets]),
            (list(KEY_ACTIONS), [self.key.key_arn]),
        ]
        for actions, resources in statements:
            role.add_to_policy(iam.PolicyStatement(actions=actions, resources=resources))
        return role

    def _archiver_role(self) -> iam.Role:
        # No s3:DeleteObject: the archiver's plans live in the topic's lease, which is rewritten, never deleted.
        role = self._job_role("ArchiverJobRole", ARCHIVER_ROOTS, ["s3:GetObject", "s3:PutObject"])
        # A by_key topic's tombstones become an erasure request (spark_jobs/archiver/topic_run.py): one plain PUT
        # per plan into this environment's requests, never read back.
        requests = erasure_requests_prefix(self.settings.name).rstrip("/")
        role.add_to_policy(
            iam.PolicyStatement(actions=["s3:PutObject"], resources=[self.bucket.arn_for_objects(f"{requests}/*")])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": NAMESPACE}},
            )
        )
        self._grant_iceberg(role, ICEBERG_COMMITTER_GLUE_ACTIONS, ())
        if self.settings.kafka_secret_arn:
            secret = self.settings.kafka_secret_arn
            role.add_to_policy(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[secret]))
        if self.settings.msk_cluster_arn:
            self._grant_msk(role, self.settings.msk_cluster_arn)
        acknowledge(
            role,
            "The archiver writes objects it names at run time under the data, quarantine and state prefixes and "
            "tombstones' erasure requests under this environment's requests prefix, and uses the lake key for "
            "them. PutMetricData has no resource-level permissions (AWS requires *); a "
            "condition limits it to the kafkalake namespace.",
            "AwsSolutions-IAM5[Resource::*]",
            *(object_finding(self.bucket, root) for root in (*ARCHIVER_ROOTS, requests)),
        )
        return role

    def _grant_msk(self, role: iam.Role, cluster_arn: str) -> None:
        """MSK with IAM access control: Connect on the cluster, DescribeTopic and ReadData on each catalog topic,
        DescribeGroup and AlterGroup on each topic's consumer group, DescribeGroup on the light passes' shared group,
        each by its exact ARN (``infra.msk``): no topic or group beyond the catalog's."""
        found = archiver_resources(cluster_arn, self.kafka_topics)
        role.add_to_policy(iam.PolicyStatement(actions=list(CLUSTER_ACTIONS), resources=[found.cluster]))
        # a statement per ARN: CDK merges them into statements of at most 2,000 characters, which it can spread
        # over the role's managed overflow policies (6,144 characters each); one statement of every topic's ARN
        # passes IAM's policy size at a few dozen topics and fails the deployment
        for topic in found.topics:
            role.add_to_policy(iam.PolicyStatement(actions=list(TOPIC_ACTIONS), resources=[topic]))
        for group in found.groups:
            role.add_to_policy(iam.PolicyStatement(actions=list(GROUP_ACTIONS), resources=[group]))
        role.add_to_policy(iam.PolicyStatement(actions=list(SHARED_GROUP_ACTIONS), resources=[found.shared_group]))

    def _compactor_role(self) -> iam.Role:
        stack = Stack.of(self)
        role = self._job_role("CompactorJobRole", COMPACTOR_ROOTS, ["s3:GetObject", "s3:DeleteObject"])
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"], resources=[self.bucket.arn_for_objects(f"{w}/*") for w in COMPACTOR_WRITES]
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=list(REWRITER_GLUE_ACTIONS),
                resources=glue_table_resources(stack, self.databases),
            )
        )
        self._grant_iceberg(role, ICEBERG_REWRITER_GLUE_ACTIONS, ICEBERG_REWRITER_OBJECT_ACTIONS)
        acknowledge(
            role,
            "The compactor reads and deletes objects under the data prefix (and the legacy compaction root), writes "
            "its output (under each table's _compacted/ folder) and manifests with the lake key, and updates "
            "partitions of tables created at run time in our databases.",
            *(object_finding(self.bucket, root) for root in sorted({*COMPACTOR_ROOTS, *COMPACTOR_WRITES})),
            *glue_table_findings(stack, self.databases),
        )
        return role

    def _erasure_role(self) -> iam.Role:
        stack = Stack.of(self)
        actions = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
        roots = (*ERASURE_ROOTS, erasure_prefix(self.settings.name).rstrip("/"))
        role = self._job_role("ErasureJobRole", roots, actions)
        ancestors = [ERASURE_ROOT, erasure_prefix(self.settings.name).rstrip("/")]
        statements = [
            (
                ["s3:DeleteObjectVersion"],
                [
                    *(self.bucket.arn_for_objects(f"{root}/*") for root in ERASURE_PURGES),
                    self.bucket.arn_for_objects(f"{subject_indexes_prefix(self.settings.name)}*"),
                    self.bucket.arn_for_objects(f"{erasure_requests_prefix(self.settings.name)}*"),
                ],
            ),
            (["s3:GetObject", "s3:DeleteObject"], [self.bucket.arn_for_objects(f"{r}/*") for r in ERASURE_LEGACY]),
            (["s3:ListBucketVersions"], [self.bucket.bucket_arn]),
            # Spark writes the subject indexes through Hadoop's S3 filesystem, which probes each ancestor "directory"
            # of its output (a HEAD: s3:GetObject on these exact keys, which never hold objects) and deletes the
            # empty-directory marker at the root after writing (seen by the permission check).
            (["s3:GetObject"], [self.bucket.arn_for_objects(key) for key in ancestors]),
            (["s3:DeleteObject"], [self.bucket.arn_for_objects(f"{ERASURE_ROOT}/")]),
            (
                list(REWRITER_GLUE_ACTIONS),
                glue_table_resources(stack, self.databases),
            ),
        ]
        for granted, resources in statements:
            role.add_to_policy(iam.PolicyStatement(actions=granted, resources=resources))
        self._grant_iceberg(role, ICEBERG_REWRITER_GLUE_ACTIONS, ())
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": NAMESPACE}},
            )
        )
        acknowledge(
            role,
            "The erasure job rewrites partitions as the compactor does, rewrites quarantine objects, deletes the "
            "replaced objects' versions under the data (legacy compaction root included) and quarantine prefixes, "
            "and writes its receipts, what remains of done requests (deleting their earlier versions) and the "
            "tables' subject indexes (deleting their old segments' versions), all named at run time, with the lake "
            "key; it updates partitions of tables "
            "created at run time in our databases. "
            "PutMetricData has no resource-level permissions (AWS requires *); a condition limits it to the "
            "kafkalake namespace.",
            "AwsSolutions-IAM5[Resource::*]",
            *(object_finding(self.bucket, root) for root in (*roots, *ERASURE_LEGACY)),
            object_finding(self.bucket, subject_indexes_prefix(self.settings.name).rstrip("/")),
            object_finding(self.bucket, erasure_requests_prefix(self.settings.name).rstrip("/")),
            *glue_table_findings(stack, self.databases),
        )
        return role

    def _grant_iceberg(self, role: iam.Role, glue_actions: tuple[str, ...], object_actions: tuple[str, ...]) -> None:
        """``glue_actions`` on the tables of the databases that hold Iceberg topics (with those databases and the
        catalog, which Glue's table calls name too) and ``object_actions`` under each Iceberg topic's location;
        nothing when the environment has none. The tables are named per database, not per topic: the permission
        check evaluates the stack tests' calls, whose Iceberg tables are other topics of the same databases."""
        if not self.iceberg_topics:
            return
        stack = Stack.of(self)
        databases = sorted({t.database for t in self.iceberg_topics})
        role.add_to_policy(
            iam.PolicyStatement(actions=list(glue_actions), resources=glue_table_resources(stack, databases))
        )
        acknowledge(
            role,
            "An Iceberg table is made and committed at run time in a database that holds Iceberg topics.",
            *glue_table_findings(stack, databases),
        )
        if object_actions:
            roots = [t.prefix.data_prefix().rstrip("/") for t in self.iceberg_topics]
            locations = [self.bucket.arn_for_objects(f"{root}/*") for root in roots]
            role.add_to_policy(iam.PolicyStatement(actions=list(object_actions), resources=locations))
            why = "An Iceberg table's rewrites write and delete files Iceberg names at run time under its own location."
            acknowledge(role, why, *(object_finding(self.bucket, root) for root in roots))

    def _schedule(
        self, name: str, expression: str, job_role: iam.Role, run: JobRun, queue_key: kms.IKey
    ) -> scheduler.CfnSchedule:
        """A schedule that starts ``run`` on the job's application; failed calls are retried with the same client
        token, and go to the dead-letter queue when the retries are spent."""
        stack = Stack.of(self)
        principal = iam.ServicePrincipal(
            "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}
        )
        scheduler_role = iam.Role(self, f"{name}SchedulerRole", assumed_by=principal)
        application = self.applications[name]
        scheduler_role.add_to_policy(
            iam.PolicyStatement(actions=["emr-serverless:StartJobRun"], resources=[application.attr_arn])
        )
        scheduler_role.add_to_policy(iam.PolicyStatement(actions=["iam:PassRole"], resources=[job_role.role_arn]))
        scheduler_role.add_to_policy(
            iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[self.dead_letters.queue_arn])
        )
        scheduler_role.add_to_policy(
            iam.PolicyStatement(actions=["kms:GenerateDataKey", "kms:Decrypt"], resources=[queue_key.key_arn])
        )
        request = run.scheduler_input(application.attr_application_id, job_role.role_arn)
        schedule = scheduler.CfnSchedule(
            self,
            f"{name}Schedule",
            name=run.name,
            group_name=self.group.ref,
            schedule_expression=expression,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            target=scheduler.CfnSchedule.TargetProperty(
                arn="arn:aws:scheduler:::aws-sdk:emrserverless:startJobRun",
                role_arn=scheduler_role.role_arn,
                input=stack.to_json_string(request),
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                    maximum_retry_attempts=self.settings.scheduler_retry_attempts,
                    maximum_event_age_in_seconds=self.settings.scheduler_max_event_age_seconds,
                ),
                dead_letter_config=scheduler.CfnSchedule.DeadLetterConfigProperty(arn=self.dead_letters.queue_arn),
            ),
        )
        return schedule
