"""The Spark session of a job run: whatever the platform configured, plus what the jobs' results depend on."""

from __future__ import annotations

from pyspark.sql import SparkSession

from kafkalake.jobspec import SESSION_CONF


def job_session(app_name: str) -> SparkSession:
    """The job's session, with ``SESSION_CONF`` set also when the job run's parameters lack it."""
    builder = SparkSession.builder.appName(app_name)
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", SESSION_CONF["spark.sql.session.timeZone"])
    return spark
