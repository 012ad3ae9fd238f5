"""Child process of bench/archiver.py: archive one benchmark topic until caught up, report time and records."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

from kafkalake.catalog import ArchiveSettings, Topic, TopicSpec
from kafkalake_dev.local import local_endpoints
from kafkalake_dev.sandbox import with_bucket
from kafkalake_dev.spark import local_session
from spark_jobs.archiver import archive_topic

SCHEMA_FILE = "bench.v1.avsc"


def bench_topic(kafka_topic: str, per_run: int) -> Topic:
    spec = TopicSpec(
        kafka_topic=kafka_topic, archive=ArchiveSettings(max_records_per_run=per_run, max_records_per_file=per_run)
    )
    name = f"t{uuid.uuid4().hex[:8]}"
    return Topic("payments", "bench", "bench", name, spec, (), Path(SCHEMA_FILE))


def main() -> None:
    kafka_topic, per_run, result_file = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    endpoints = with_bucket(local_endpoints(), "kafkalake-bench")
    spark = local_session(endpoints, "kafkalake-bench-archiver")
    spark.sparkContext.setLogLevel("ERROR")
    topic = bench_topic(kafka_topic, per_run)
    records, runs = 0, 0
    started = time.monotonic()
    while True:
        summary = archive_topic(spark, endpoints, topic, say=lambda _: None)
        if not summary.plan:
            break
        records, runs = records + summary.read, runs + 1
        print(f"[bench] archiver run {runs}: {summary.read} records ({time.monotonic() - started:.0f}s)", flush=True)
    seconds = time.monotonic() - started
    result_file.write_text(json.dumps({"records": records, "seconds": seconds, "runs": runs}))


if __name__ == "__main__":
    main()
