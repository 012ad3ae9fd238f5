"""What the jobs need and none of them owns: the Spark session of a job run, the run's identity for the leases it
takes, and the S3 client of an executor's Python worker. Every job (``spark_jobs.archiver``, ``spark_jobs.compaction``,
``spark_jobs.erasure``) may import this module; it imports none of them."""

from __future__ import annotations

import argparse
import functools
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pyspark.sql import SparkSession

from kafkalake.aws import RetryCount, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import LEASE_TTL_SECONDS, SESSION_CONF


def job_session(app_name: str) -> SparkSession:
    """The job's session: whatever the platform configured, plus ``SESSION_CONF`` (what the jobs' results depend
    on) also when the job run's parameters lack it."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", SESSION_CONF["spark.sql.session.timeZone"])
    return spark


@dataclass(frozen=True)
class Run:
    """Who is running a job: the run's id (written in every lease it takes) and how long its leases outlive it."""

    run_id: str
    lease_ttl: timedelta = timedelta(seconds=LEASE_TTL_SECONDS)

    @classmethod
    def new(cls, spark: SparkSession, lease_ttl: timedelta | None = None) -> Run:
        """A run named after its Spark application (the job run on EMR Serverless) plus a random part."""
        run_id = f"{spark.sparkContext.applicationId}-{uuid.uuid4().hex[:8]}"
        return cls(run_id) if lease_ttl is None else cls(run_id, lease_ttl)


def add_lease_argument(parser: argparse.ArgumentParser) -> None:
    """``--lease-ttl-seconds``, the same for every job (``Run.lease_ttl``)."""
    parser.add_argument(
        "--lease-ttl-seconds",
        type=float,
        default=LEASE_TTL_SECONDS,
        help="a run's lease on a topic or table is stale this long after its holder's last renewal",
    )


@functools.cache
def worker_s3_client(endpoints: Endpoints) -> Any:
    """One client per Python worker process (workers are reused across tasks; building a client costs ~0.1 s)."""
    return make_client(endpoints, "s3")


@functools.cache
def worker_s3_retries(endpoints: Endpoints) -> RetryCount:
    """The retries of the worker's ``worker_s3_client``: a task's are the growth of ``total`` while it runs (a worker
    runs one task at a time)."""
    return RetryCount(worker_s3_client(endpoints))
