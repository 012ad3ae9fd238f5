"""What both jobs need and neither owns: the Spark session of a job run, and the S3 client of an executor's Python
worker. ``spark_jobs.archiver`` and ``spark_jobs.compaction`` import this module and never each other."""

from __future__ import annotations

import functools
from typing import Any

from pyspark.sql import SparkSession

from kafkalake.aws import RetryCount, make_client
from kafkalake.jobspec import SESSION_CONF
from kafkalake.settings import Endpoints


def job_session(app_name: str) -> SparkSession:
    """The job's session: whatever the platform configured, plus ``SESSION_CONF`` (what the jobs' results depend
    on) also when the job run's parameters lack it."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", SESSION_CONF["spark.sql.session.timeZone"])
    return spark


@functools.cache
def worker_s3_client(endpoints: Endpoints) -> Any:
    """One client per Python worker process (workers are reused across tasks; building a client costs ~0.1 s)."""
    return make_client(endpoints, "s3")


@functools.cache
def worker_s3_retries(endpoints: Endpoints) -> RetryCount:
    """The retries of the worker's ``worker_s3_client``: a task's are the growth of ``total`` while it runs (a worker
    runs one task at a time)."""
    return RetryCount(worker_s3_client(endpoints))
