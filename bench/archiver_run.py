"""Child process of bench/archiver.py: archive benchmark topics until caught up (as the archiver job does, several at
a time, with the environment's pseudonym key read first when a topic hashes), report the Spark start, the run's time
and CPU seconds after it (``bench.proc``), the records read, the objects and bytes stored, the driver's API calls
(``bench.calls``) and the keyed hash used. ``bench.hashing`` sets its variant (``bench.hashing.VARIANT``) for it:
its topic's schema, personal fields and keyed hash; ``bench.iceberg`` its table format (``TABLE_FORMAT``);
``DRIVER_S3_LATENCY`` a delay of the driver's S3 requests."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from bench.calls import count_every_client, delay_every_s3_request
from bench.common import started_session
from bench.hashing import hash_in_use, topic_pii, topic_schema
from bench.proc import cpu_since, tree_cpu
from bench.protobuf import payment, protobuf_child
from kafkalake.aws import list_objects, make_client
from kafkalake.jobspec import Job
from kafkalake.naming import TableInference
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import ArchivePolicy, TableFormat, TopicSpec, ValueFormat
from kafkalake_dev.local.endpoints import local_credentials
from spark_jobs.archiver.job import archive_fleet, read_pseudonym_key
from spark_jobs.archiver.summary import PHASES

SCHEMA_FILE = "bench.v1.avsc"
TABLE_FORMAT = "BENCH_TABLE_FORMAT"
"""The environment variable naming the benchmark topics' table format (``hive`` by default)."""
DRIVER_S3_LATENCY = "BENCH_DRIVER_S3_LATENCY_MS"
"""The environment variable naming the milliseconds each of the driver's S3 requests waits before it is sent
(``bench.calls.delay_every_s3_request``; 0 by default): the round trip moto does not have."""


def driver_s3_latency_ms() -> float:
    """The delay ``DRIVER_S3_LATENCY`` names, in milliseconds (0: none)."""
    return float(os.environ.get(DRIVER_S3_LATENCY, "0"))


def bench_topic(argument: str, per_run: int) -> Topic:
    """``KAFKA_TOPIC``: a table in an environment of its own (so each run archives the topic afresh); or
    ``KAFKA_TOPIC=ENV/COMPANY/DOMAIN/NAME``: that table, as the catalog would name it (``bench.fleet``). Its
    catalog declares the schema the benchmark registers (a version the catalog lacks would be held:
    ``kafkalake.undeclared``) and, under a ``bench.hashing`` variant that hashes, its personal fields."""
    kafka_topic, _, table = argument.partition("=")
    env, company, domain, name = (
        table.split("/") if table else (f"t{uuid.uuid4().hex[:8]}", "bench", "bench", "payments")
    )
    archive = ArchivePolicy(max_records_per_run=per_run)
    table_format = TableFormat(os.environ.get(TABLE_FORMAT, TableFormat.HIVE.value))
    settings = {"table_format": table_format} if table_format == TableFormat.ICEBERG else {}
    inference = {} if settings else {"table_inference": TableInference.NATIVE}
    if protobuf_child():  # the table's columns are the registered Protobuf message's rendering
        protobuf = {"value_format": ValueFormat.PROTOBUF}
        spec = TopicSpec(kafka_topic=kafka_topic, archive=archive, **protobuf, **settings, **inference)
        return Topic(name, company, domain, env, spec, (payment()[0],), Path(SCHEMA_FILE))
    spec = TopicSpec(kafka_topic=kafka_topic, archive=archive, pii=topic_pii(), **settings, **inference)
    return Topic(name, company, domain, env, spec, (topic_schema(),), Path(SCHEMA_FILE))


def main() -> None:
    """``python -m bench.archiver_run RESULT_FILE PER_RUN CONCURRENCY KAFKA_TOPIC[=TABLE]...``, into BENCH_BUCKET
    (``bench.common.BUCKET`` by default)."""
    result_file, per_run, concurrency = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    topics = [bench_topic(name, per_run) for name in sys.argv[4:]]
    spark, endpoints, session_seconds = started_session("kafkalake-bench-archiver", Job.ARCHIVE)
    key = read_pseudonym_key(endpoints, topics)  # once, before the run, as the job does (None: nothing hashes)
    glue = make_client(endpoints, "glue")
    for database in {t.database for t in topics if t.spec.table_format == TableFormat.ICEBERG}:
        with contextlib.suppress(glue.exceptions.AlreadyExistsException):  # the stack deploys the databases
            glue.create_database(DatabaseInput={"Name": database})
    calls: Counter[str] = Counter()
    count_every_client(calls)  # the driver's calls; each executor's are its objects' PUTs
    latency_ms = driver_s3_latency_ms()
    if latency_ms:
        delay_every_s3_request(latency_ms / 1000)
    with hash_in_use() as keyed_hash:
        cpu_before, started = tree_cpu(), time.monotonic()
        results = archive_fleet(
            spark,
            endpoints,
            topics,
            concurrency=concurrency,
            deadline=time.monotonic() + 3600,
            pseudonym_key=key,
            say=lambda _: None,
        )
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise SystemExit(f"archiver failed: {failed}")
    run_seconds, run_cpu = time.monotonic() - started, cpu_since(cpu_before, tree_cpu())
    driver_calls = dict(sorted(calls.items()))
    s3 = make_client(endpoints, "s3")
    stored = [list_objects(s3, endpoints.bucket, topic.prefix.data_prefix()) for topic in topics]
    timings = {phase: sum(r.timings()[phase] for r in results) for phase in PHASES}
    later = [s for r in results for s in r.plans[1:] if s.plan]
    after_first = {"records": sum(s.read for s in later), "seconds": sum(s.seconds for s in later)}
    outcome = {
        "topics": len(topics),
        "records": sum(r.totals()["read"] for r in results),
        "plans": sum(len([s for s in r.plans if s.plan]) for r in results),
        "objects": sum(r.totals()["objects"] for r in results),
        "stored_bytes": sum(sum(found.values()) for found in stored),
        "lease_requests": sum(r.lease_requests for r in results),
        "driver_calls": driver_calls,
        "session_seconds": session_seconds,
        "run_seconds": run_seconds,
        "run_cpu_seconds": run_cpu,
        "seconds": session_seconds + run_seconds,
        "phase_seconds_summed_over_topics": timings,
        "plans_after_the_first": after_first,
        "keyed_hash": keyed_hash if key is not None else None,
        "driver_s3_latency_ms": latency_ms,
    }
    result_file.write_text(json.dumps(outcome))


if __name__ == "__main__":
    with local_credentials():  # the archiver's driver and executors write to moto
        main()
