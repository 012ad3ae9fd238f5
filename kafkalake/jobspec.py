"""The EMR Serverless job runs, specified once: what runs (entry point, arguments), with what (the packaged
assets, the Spark release and connectors) and where (the ``KAFKALAKE_*`` settings).

The jobs' option defaults are defined here once; the jobs' argument parsers, environments.yaml's settings and
the ``kafkalake`` command line read them.

A ``JobRun`` renders itself as a boto3 ``start_job_run`` request (``kafkalake compact submit``) and as the input of
an EventBridge Scheduler target (the CDK stack), so the two cannot drift apart. An environment's runs are built in
``kafkalake.job_runs``, from its ``environments.yaml`` entry, which reads its defaults here: this module imports no
environment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from kafkalake.endpoints import Endpoints

SPARK_VERSION: Final = "3.5.3"
"""EMR Serverless emr-7.7.0 runs Spark 3.5.3 (the newest emr-7.x Spark whose Kafka connector is on Maven
Central: spark-sql-kafka 3.5.4-3.5.6 are not published there). PySpark is pinned to it in requirements.txt."""
EMR_RELEASE: Final = "emr-7.7.0"
HADOOP_VERSION: Final = "3.3.4"
"""The Hadoop PySpark 3.5 bundles; hadoop-aws must match it."""
SPARK_CONNECTORS: Final = (
    f"org.apache.spark:spark-sql-kafka-0-10_2.12:{SPARK_VERSION}",
    f"org.apache.spark:spark-token-provider-kafka-0-10_2.12:{SPARK_VERSION}",
    "org.apache.kafka:kafka-clients:3.4.1",
    "org.apache.commons:commons-pool2:2.11.1",
    f"org.apache.spark:spark-avro_2.12:{SPARK_VERSION}",
    "software.amazon.msk:aws-msk-iam-auth:2.3.5",
)
"""The connectors the jobs need beyond Spark itself, with their runtime dependencies: shipped as jars. The MSK IAM
login handler (``kafkalake.kafka_access.MSK_IAM_SPARK_OPTIONS``) signs with the AWS SDK for Java v2, which the
platform carries: emr-7.7.0 ships SDK 2.29.44 (EMR Release Guide, "Application versions in Amazon EMR 7.x releases";
that its Spark classpath holds it is not verified here, no EMR being reachable); locally the Iceberg AWS bundle of
the platform jars."""
ICEBERG_VERSION: Final = "1.7.1"
"""The Iceberg EMR Serverless emr-7.7.0 bundles (1.7.1-amzn-0): on EMR its own jar (``EMR_ICEBERG_JAR``), locally the
open-source release of the same version from Maven Central (``kafkalake_dev``), so nothing is downloaded at run time."""
EMR_ICEBERG_JAR: Final = "/usr/share/aws/iceberg/lib/iceberg-spark3-runtime.jar"
"""Iceberg's Spark runtime as EMR Serverless ships it (its release guide: "Using Apache Iceberg with EMR
Serverless"); the AWS SDK it needs is on EMR's classpath."""
ICEBERG_CATALOG: Final = "glue_catalog"
"""The Spark catalog of the Iceberg tables (the Glue Data Catalog): ``glue_catalog.<database>.<table>``."""
CATALOG_DIR: Final = "catalog"
"""Where ``catalog.zip`` is unpacked in the job's working directory."""
ENVIRONMENT_DIR: Final = "environment"
"""Where ``environment.tgz`` (the jobs' Python dependencies and launcher) is unpacked."""
ARCHIVER_CONCURRENCY: Final = 4
"""The archiver's heavy topics carried out at once, each in Spark jobs of its own (``--concurrency``)."""
ARCHIVER_REQUEST_THREADS: Final = 16
"""The archiver driver's threads for its topics' requests (leases and plans, registry reads, receipts, offset
commits), which mostly wait on S3, Kafka and the registry; ``--concurrency`` does not bound them. Measured on 28 Nov
over a run of 156 light topics on the local stack: 4 threads took 8.5-9.3 s, 16 threads 7.6 s, for the same CPU; with
50 ms added to each of the driver's S3 requests (AWS's small-object latency is of that order), 15.8-17.2 s against
9.1-9.7 s (three alternated pairs)."""
ARCHIVER_BUDGET_MINUTES: Final = 15.0
"""No new archiver plan starts after this (``--budget-minutes``; ``archiver_budget_minutes`` in environments.yaml)."""
LEASE_TTL_SECONDS: Final = 300
"""A job's lease on a topic (archiver) or table (compactor) turns stale this long after its holder's last renewal, by
S3's clock and at most ``kafkalake.lease.STALE_WITHIN`` later (``--lease-ttl-seconds``). The holder renews it in the
background once half of it passed without a write (``kafkalake.lease.quiet_spell``), so only a dead run (lost driver,
SIGKILL) or an S3 outage longer than it lets it lapse; a shorter one hands a dead run's work over sooner, a longer one
rides out longer S3 stalls and costs fewer renewals. Five minutes (issue #37; one, then three, before): renewals are S3
writes billed as PUTs, and in the full fleet of 160 topics they were most of the archiver's (a light topic holds its
lease from its take until its pass is committed: ~5 renewals a run at one minute, ~2 at three), so a lease held less
than two and a half minutes without a write costs none. The price: a dead run's topics are taken over five minutes after
its last write, before the next run of the default 8-minute schedule; at the shortest schedule an environment may set (5
minutes) the next run may still find them held and skip them, and the run after takes them."""
COMPACTOR_TARGET_FILE_MB: Final = 128
"""The compactor's target size of merged files (``--target-file-mb``)."""
COMPACTOR_MIN_INPUT_FILES: Final = 10
"""The compactor merges partitions with at least this many new files (``--min-input-files``)."""
COMPACTOR_GRACE_MINUTES: Final = 60
"""The compactor keeps a partition's replaced files this long after the swap (``--grace-minutes``), because Glue's
``UpdatePartition`` switches new queries at once but not those already running, nor readers holding the old
location in a cache. It must exceed the longest query plus the longest metadata cache of any reader:
Athena's DML queries time out after 30 minutes by default (a service quota: raise this with it); Trino's Glue
metastore cache is off by default (``hive.metastore-cache-ttl=0s`` in 476; when set, add its TTL); Spark with the
Glue catalog fetches a table's partitions per query and caches file listings by path, so a swapped partition is
listed afresh (only a DataFrame kept from before the swap reads the old files: re-read it or ``REFRESH TABLE``).
Until then the old files stay, so whole-table SDK for pandas reads without a ``partition_filter`` count a swapped
partition twice during this window (see ``kafkalake.layout``)."""
TERMINAL_STATES: Final = ("SUCCESS", "FAILED", "CANCELLED")
SCHEDULED_TIME: Final = "<aws.scheduler.scheduled-time>"
"""EventBridge Scheduler's context attribute: the same for every attempt of one scheduled run."""
SESSION_CONF: Final = {"spark.sql.session.timeZone": "UTC", "spark.scheduler.mode": "FAIR"}
"""Set for every job run and by the jobs' own session builder: UTC whatever the machine's zone; FAIR pools for the
archiver's topics in flight."""


def iceberg_conf(endpoints: Endpoints) -> dict[str, str]:
    """Spark settings of the Iceberg catalog (``ICEBERG_CATALOG``) on the Glue Data Catalog, its files through
    Iceberg's S3 client; with the local endpoint (dev tooling) for Glue and S3 alike, path-style."""
    prefix = f"spark.sql.catalog.{ICEBERG_CATALOG}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "glue",
        f"{prefix}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"{prefix}.warehouse": f"s3://{endpoints.bucket}/warehouse",
        f"{prefix}.client.region": endpoints.region,
    }
    if endpoints.aws_endpoint_url:
        conf |= {
            f"{prefix}.glue.endpoint": endpoints.aws_endpoint_url,
            f"{prefix}.s3.endpoint": endpoints.aws_endpoint_url,
            f"{prefix}.s3.path-style-access": "true",
        }
    return conf


class Job(StrEnum):
    """The entry point's first argument."""

    ARCHIVE = "archive"
    COMPACT = "compact"
    ERASE = "erase"


JVM_OPTIONS: Final = {Job.ARCHIVE: "-XX:TieredStopAtLevel=1"}
"""The options of a job's JVMs, driver and executors alike (``jvm_conf``), where a job has its own.

The archiver's JVMs compile with C1 alone: a run lasts seconds to minutes, and C2's compilations cost more than the
faster code they buy back. With Java's default tiered compilation, a run of 156 light topics spent 7.5 of its JVM's
13 CPU seconds after the Spark start compiling, 6.1 of them in C2 (its threads' CPU, read from /proc). Measured
locally (issue #37), C1 alone against the default, after the Spark start, two alternated pairs each, with the
jobs' bytecode at hand (``infra.assets.compiled``):
- one light topic (2,000 records): 4.2 CPU seconds instead of 6.6, 3.0 s instead of 3.8;
- 156 light topics: 13.1 CPU seconds instead of 18.5, 14.4 s instead of 15.3;
- 4 heavy topics of one 8-minute cycle (1.1M records): 12.8 CPU seconds instead of 15.4, 7.7 s instead of 8.6;
- a backlog of 2.5M records in one topic (three plans): the same CPU (18.1 against 17.4-19.0), but 12.5 s
  instead of 10.3-11.2: a long catch-up is about 15% slower, the price of every regular cycle's saving.
Neither G1's replacement by the serial or parallel collector changed a figure beyond the noise. The compactor keeps
Java's defaults: its B3 benchmark twice each way gave its partition 5.1-5.3 s by default and 4.4-5.6 s with C1 alone,
within the noise (its merge is pyarrow's, in the Python workers). The erasure job's scan, Spark's own Parquet reader
over whole tables, may run long enough for C2 to pay: not measured, so it keeps the defaults too."""


def jvm_conf(job: Job) -> dict[str, str]:
    """The Spark settings of ``job``'s JVM options (``JVM_OPTIONS``): none when it has none."""
    options = JVM_OPTIONS.get(job)
    if not options:
        return {}
    return {"spark.driver.extraJavaOptions": options, "spark.executor.extraJavaOptions": options}


def terminal(state: str) -> bool:
    return state in TERMINAL_STATES


@dataclass(frozen=True)
class JobArtifacts:
    """The s3:// URIs of what a job run needs (the CDK assets of the stack)."""

    entry_point: str
    """spark_jobs/entrypoint.py"""
    py_files: str
    """kafkalake_jobs.zip: the core package and the jobs"""
    catalog_archive: str
    """catalog.zip: the topic catalog"""
    environment_archive: str
    """environment.tgz: the jobs' Python dependencies and the launcher of EMR's Python 3.11"""
    jars: tuple[str, ...]
    """The connectors' jars (``spark.jars``): nothing is resolved from Maven at run time (private subnets)."""


@dataclass(frozen=True)
class JobRun:
    name: str
    job: Job
    arguments: tuple[str, ...]
    endpoints: Endpoints
    artifacts: JobArtifacts
    timeout_minutes: int
    """The job run's execution timeout."""

    def entry_point_arguments(self) -> list[str]:
        return [self.job.value, *self.arguments]

    def spark_submit_parameters(self) -> str:
        """--py-files, the catalog and environment archives, the Python to run, the KAFKALAKE_* settings for
        driver and executors, the connector jars, the job's JVM options, and the session settings the results
        depend on."""
        python = f"./{ENVIRONMENT_DIR}/bin/python"
        env = self.endpoints.to_env()
        driver_env = {**env, "PYSPARK_DRIVER_PYTHON": python, "PYSPARK_PYTHON": python}
        artifacts = self.artifacts
        archives = f"{artifacts.catalog_archive}#{CATALOG_DIR},{artifacts.environment_archive}#{ENVIRONMENT_DIR}"
        conf = {
            "spark.archives": archives,
            "spark.jars": ",".join([*artifacts.jars, EMR_ICEBERG_JAR]),
            **SESSION_CONF,
            **jvm_conf(self.job),
            **iceberg_conf(self.endpoints),
            **{f"spark.emr-serverless.driverEnv.{k}": v for k, v in driver_env.items()},
            **{f"spark.executorEnv.{k}": v for k, v in {**env, "PYSPARK_PYTHON": python}.items()},
        }
        return " ".join([f"--py-files {artifacts.py_files}", *(f"--conf {k}={v}" for k, v in conf.items())])

    def start_job_run(self, application_id: str, role_arn: str, client_token: str) -> dict[str, Any]:
        """The ``StartJobRun`` request, in boto3's shape."""
        return {
            "applicationId": application_id,
            "executionRoleArn": role_arn,
            "clientToken": client_token,
            "name": self.name,
            "jobDriver": {
                "sparkSubmit": {
                    "entryPoint": self.artifacts.entry_point,
                    "entryPointArguments": self.entry_point_arguments(),
                    "sparkSubmitParameters": self.spark_submit_parameters(),
                }
            },
            "executionTimeoutMinutes": self.timeout_minutes,
        }

    def scheduler_input(self, application_id: str, role_arn: str) -> dict[str, Any]:
        """The same request as the input of a Scheduler universal target (``aws-sdk:emrserverless:startJobRun``),
        whose parameters are PascalCase. The client token is the run's scheduled time, the same for every retry
        of one scheduled run, so a retried call never starts a second job run."""
        return pascal_case(self.start_job_run(application_id, role_arn, f"{self.job}-{SCHEDULED_TIME}"))


def pascal_case(request: dict[str, Any]) -> dict[str, Any]:
    """Upper-case the first letter of every key, recursively (values are left as they are)."""
    return {
        re.sub(r"^[a-z]", lambda m: m.group(0).upper(), key): pascal_case(value) if isinstance(value, dict) else value
        for key, value in request.items()
    }
