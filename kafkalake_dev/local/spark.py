"""Local Spark sessions: the connector jars from the cache (no resolution at run time), S3A on the local endpoint."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from infra.assets import spark_jars
from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import Job, iceberg_conf, jvm_conf
from kafkalake_dev.local.endpoints import ACCESS_KEY
from kafkalake_dev.local.principals import DAEMON_MODULE, S3A_PROVIDER, follow_in_spark, install, s3a_credentials_jar
from kafkalake_dev.local.stack import state_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL_CONF = {"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
"""Local Spark, in-process sessions and the runner's spark-submit alike: two cores, no UI, no progress bars."""

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
JVM_OPTION_SETTINGS = (JAVA_OPTIONS, "spark.executor.extraJavaOptions")
LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""
"""Spark's and the JVM's log lines of an in-process session, appended to a file: never between the demo's or a
command's own lines (Spark's default sends them to the terminal, from the JVM's start on)."""


def under_platform(job: Mapping[str, str], platform: Mapping[str, str]) -> dict[str, str]:
    """A job's Spark settings with the platform's over them (the platform's win), except the JVM options both give,
    which are joined: the platform's first, then the job's (``kafkalake.jobspec.jvm_conf``), so a job's option wins
    where the two conflict (the JVM takes the last). The local runner and the in-process sessions alike."""
    settings = {**job, **platform}
    for key in JVM_OPTION_SETTINGS:
        if key in job and key in platform:
            settings[key] = f"{platform[key]} {job[key]}"
    return settings


def scratch_conf(folder: Path) -> dict[str, str]:
    """Spark's scratch space (``spark.local.dir``: the copies of every jar and archive a session is given, about
    275 MB, its shuffle and spill files) and the JVM's temporary files, all in ``folder``, which its owner removes."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"spark.local.dir": str(folder), JAVA_OPTIONS: f"-Djava.io.tmpdir={folder}"}


def session_scratch() -> Path:
    """This process's Spark scratch folder, under the stack's state. Spark deletes its scratch only when its JVM
    exits cleanly, so every session killed with SIGKILL (the crash tests kill dozens) left 275 MB in ``/tmp`` for
    good, until the disk was full. The folders of processes no longer alive are removed here, by the next session."""
    root = state_dir() / "spark-scratch"
    for folder in root.glob("*"):
        if folder.name.isdigit() and not _alive(int(folder.name)):
            shutil.rmtree(folder, ignore_errors=True)
    return root / str(os.getpid())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        pass
    return True


def spark_log() -> Path:
    """Where the in-process sessions' Spark and JVM log lines go (the stack's ``logs/spark.log``)."""
    return state_dir() / "logs" / "spark.log"


def log_option(log: Path) -> str:
    """The JVM option that appends log4j2's output to ``log``, its configuration written beside it (replaced whole,
    so a JVM starting meanwhile never reads half of one)."""
    config, text = log.with_name(f"{log.stem}-log4j2.properties"), LOG4J2.format(log=log)
    if not config.exists() or config.read_text() != text:
        config.parent.mkdir(parents=True, exist_ok=True)
        written = config.with_name(f"{config.name}.{os.getpid()}")
        written.write_text(text)
        written.replace(config)
    return f"-Dlog4j2.configurationFile=file:{config}"


def s3a_conf(endpoints: Endpoints, access_key: str = ACCESS_KEY) -> dict[str, str]:
    """Hadoop S3A settings; locally path-style against the moto endpoint with ``access_key`` (moto's test key, or a
    principal's: ``kafkalake_dev.local.principals``), in AWS the defaults."""
    if not endpoints.aws_endpoint_url:
        return {}
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoints.aws_endpoint_url,
        "spark.hadoop.fs.s3a.endpoint.region": endpoints.region,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.access.key": access_key,
        "spark.hadoop.fs.s3a.secret.key": ACCESS_KEY,
        "spark.hadoop.fs.s3a.change.detection.mode": "none",
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",  # the s3:// the jobs use, as on EMR
    }


def local_session(endpoints: Endpoints, app_name: str = "kafkalake", job: Job | None = None) -> SparkSession:
    """A local[2] session with the Kafka, Avro and S3A jars handed over from the cache (no resolution at run time),
    its JVM started with ``job``'s options as EMR starts the job's (``kafkalake.jobspec.jvm_conf``; without one,
    Java's defaults, as the demo's session, which runs every job, keeps them). Its S3A requests and Python workers
    name the principal of the code that runs a Spark job once it is followed (``principal_session``), moto's test
    key otherwise. Spark's and the JVM's log lines go to ``spark_log()``."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this virtualenv
    jars = spark_jars()
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.jars", ",".join(str(p) for p in [*jars, s3a_credentials_jar(jars)]))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")
    )
    principals = {
        "spark.python.daemon.module": DAEMON_MODULE,
        "spark.hadoop.fs.s3a.aws.credentials.provider": S3A_PROVIDER,
    }
    settings = {
        **LOCAL_CONF,
        **s3a_conf(endpoints),
        **iceberg_conf(endpoints),
        **principals,
        **scratch_conf(session_scratch()),
    }
    settings[JAVA_OPTIONS] = f"{settings[JAVA_OPTIONS]} {log_option(spark_log())}"
    for key, value in under_platform(jvm_conf(job) if job else {}, settings).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def principal_session(endpoints: Endpoints, app_name: str, job: Job | None = None) -> SparkSession:
    """``local_session`` whose calls name the principal that makes them (``kafkalake_dev.local.principals``): this
    process's botocore clients and the Spark jobs it starts. What the permission check records: the tests' session,
    and the job commands (``kafkalake archive``, ``compact run``, ``erase run``) a crash test runs as subprocesses;
    the demo and the benchmarks leave it out."""
    session = local_session(endpoints, app_name, job)
    install()
    follow_in_spark(session)
    return session
