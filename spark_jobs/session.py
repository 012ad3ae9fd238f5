"""The Spark session of a job run: whatever the platform configured, plus what the jobs' results depend on."""

from __future__ import annotations

from pyspark.sql import SparkSession

SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.scheduler.mode": "FAIR",
}
"""UTC: the transforms do not depend on the session zone, but timestamps shown and written stay in UTC whatever the
machine's zone. FAIR: the archiver runs several topics at once, each in its own pool."""


def job_session(app_name: str) -> SparkSession:
    builder = SparkSession.builder.appName(app_name)
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.conf.set("spark.sql.session.timeZone", SESSION_CONF["spark.sql.session.timeZone"])
    return spark
