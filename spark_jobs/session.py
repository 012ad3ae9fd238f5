"""The Spark session of a job run: whatever the platform configured, plus what the jobs' results depend on."""

from __future__ import annotations

from pyspark.sql import SparkSession

SESSION_TIME_ZONE = "UTC"
"""dt/hour partitions and zone-less ISO times are computed in the session zone: pinned, whatever the machine's."""


def job_session(app_name: str) -> SparkSession:
    spark = SparkSession.builder.appName(app_name).getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", SESSION_TIME_ZONE)
    return spark
