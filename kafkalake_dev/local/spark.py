"""Local Spark sessions: the connector jars from the cache (no resolution at run time), S3A on the local endpoint."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from infra.assets import spark_jars
from kafkalake.endpoints import Endpoints
from kafkalake_dev.local.endpoints import ACCESS_KEY
from kafkalake_dev.local.principals import DAEMON_MODULE, S3A_PROVIDER, s3a_credentials_jar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL_CONF = {"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
"""Local Spark, in-process sessions and the runner's spark-submit alike: two cores, no UI, no progress bars."""


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


def local_session(endpoints: Endpoints, app_name: str = "kafkalake") -> SparkSession:
    """A local[2] session with the Kafka, Avro and S3A jars handed over from the cache (no resolution at run time).
    Its S3A requests and Python workers name the principal of the code that runs a Spark job, once
    ``kafkalake_dev.local.principals.follow_in_spark`` follows it (moto's test key otherwise)."""
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
    for key, value in {**LOCAL_CONF, **s3a_conf(endpoints), **principals}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
