"""Child process of ``bench.peer``: kafkalake's archiver on the peer's JSON topic (``value_format: json``, the columns
of ``bench.archiver.SCHEMA``; ``table_format: iceberg``) until caught up, into a table of a fresh environment; reports
the Spark start, the run's time and CPU seconds after it (``bench.proc``), the records read and the table's name."""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

from bench.archiver import SCHEMA
from bench.common import started_session
from bench.proc import cpu_since, tree_cpu
from kafkalake.aws import make_client
from kafkalake.jobspec import Job
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import ArchivePolicy, TableFormat, TopicSpec, ValueFormat
from kafkalake_dev.local.endpoints import local_credentials
from spark_jobs.archiver.job import archive_fleet
from spark_jobs.common import Run

LEASE_SECONDS = 10


def json_topic(kafka_topic: str, per_run: int, env: str) -> Topic:
    """The archiver's view of the peer's topic, its table in environment ``env``."""
    spec = TopicSpec(
        kafka_topic=kafka_topic,
        archive=ArchivePolicy(max_records_per_run=per_run),
        value_format=ValueFormat.JSON,
        table_format=TableFormat.ICEBERG,
    )
    return Topic("payments", "bench", "bench", env, spec, (SCHEMA,), Path("bench.v1.avsc"))


def main() -> None:
    """``python -m bench.peer_archive RESULT_FILE PER_RUN KAFKA_TOPIC [ENV]``: into a fresh environment's table, or
    into ENV's (``bench.peer_kills`` restarts a killed run on the same) with the run's leases stale LEASE_SECONDS
    after their last renewal, so that a run killed moments ago does not hold the topic for the job's default."""
    result_file, per_run, kafka_topic = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    restarted = len(sys.argv) > 4
    topic = json_topic(kafka_topic, per_run, sys.argv[4] if restarted else f"t{uuid.uuid4().hex[:8]}")
    spark, endpoints, session_seconds = started_session("kafkalake-bench-peer", Job.ARCHIVE)
    glue = make_client(endpoints, "glue")
    with contextlib.suppress(glue.exceptions.AlreadyExistsException):  # a restarted run's
        glue.create_database(DatabaseInput={"Name": topic.database})
    run = Run.new(spark, timedelta(seconds=LEASE_SECONDS) if restarted else None)
    cpu_before, started = tree_cpu(), time.monotonic()
    [result] = archive_fleet(
        spark, endpoints, [topic], concurrency=1, deadline=started + 3600, run=run, pseudonym_key=None, say=print
    )
    if not result.ok:
        raise SystemExit(f"archiver failed: {result.error}")
    outcome = {
        "records": result.totals()["read"],
        "session_seconds": session_seconds,
        "run_seconds": time.monotonic() - started,
        "run_cpu_seconds": cpu_since(cpu_before, tree_cpu()),
        "table": f"{topic.database}.{topic.table}",
        "skipped": result.skipped,
    }
    result_file.write_text(json.dumps(outcome))


if __name__ == "__main__":
    with local_credentials():  # the archiver's driver and executors write to moto
        main()
