"""Erasure benchmark (``python -m bench erasure``): the erasure job's cost follows the partitions that hold matching
rows, not the size of the lake.

One table shaped like ``customer-updated`` (subject field ``customer_id``) of BENCH_ERASE_PARTITIONS (default 200)
Glue partitions, BENCH_ERASE_FILES (default 3) archiver-shaped files each, in a versioned bucket as the stack's is.
BENCH_ERASE_SUBJECTS (default 100) people have rows only in BENCH_ERASE_HOLDING (default 10) of the partitions,
among many other customers everywhere. On one Spark session, as the job meets the lake when it runs hourly:

1. an erasure run with no request builds the table's subject index (``spark_jobs.erasure.index``), as the job's
   earlier runs would have, object by object, as the lake grew: its seconds (once per object, not per request);
2. one more hour of the archiver's files lands (not in Glue yet), and one explicit request per subject is stored
   (hashed, as ``kafkalake erase --subject`` stores it);
3. the first baseline: the scan the job made before it had the index, every file of the table read for the
   requests' subjects (``matching.find`` without the index): its seconds, and the rows and partitions it finds;
4. one erasure run (no grace period, so it also deletes every replaced object version) carries every request out:
   its seconds, split at the end of finding the rows (the index brought up to date with the new hour, looked up,
   the partitions it names read) and what follows (rewrite, verify, swap, version deletion, receipts), and the
   seconds of the version deletion alone (one ListObjectVersions per partition, which moto answers by copying
   every version in the bucket: locally it grows with the table, on S3 with the partition);
5. the second baseline: the compactor (same grace period) on a second table holding byte-for-byte copies of exactly
   the partitions the erasure rewrote: its seconds.

Reported: the ratio erasure ÷ compactor on the same partitions (also without the version deletion, which the
compactor's run does not do: its clean-up comes a run later), the ratio of finding the rows with the index ÷ the
whole-table scan, the objects the run read into the index, and partitions read and rewritten ÷ partitions in the
table. The run is checked, not trusted: the job finds what the whole-table scan finds (the receipts' partitions and
rows), every request done, rows removed = the subjects' rows, and every other row still read through Glue.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession

from bench.common import say, timed, write_result
from bench.compactor import bench_topic
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import RequestStore, new_request
from kafkalake.glue import table_partitions
from kafkalake.layout import DataKey, Partition
from kafkalake.personal import load_key, load_keys
from kafkalake.topic_catalog import Topic
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.provision import ensure_pseudonym_key
from kafkalake_dev.local.sandbox import customer_file, put_table, with_bucket
from kafkalake_dev.local.spark import local_session
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Action, Knobs
from spark_jobs.erasure import matching
from spark_jobs.erasure.job import Eraser, Outcome

PARTITIONS = int(os.environ.get("BENCH_ERASE_PARTITIONS", "200"))
FILES = int(os.environ.get("BENCH_ERASE_FILES", "3"))
ROWS = int(os.environ.get("BENCH_ERASE_ROWS", "2000"))
"""Rows per file."""
SUBJECTS = int(os.environ.get("BENCH_ERASE_SUBJECTS", "100"))
HOLDING = int(os.environ.get("BENCH_ERASE_HOLDING", "10"))
"""Partitions that hold the subjects' rows."""
BUCKET_PREFIX = "kafkalake-bench-erasure"
"""A bucket of its own per run: moto answers ListObjectVersions by copying every version in the bucket (S3 lists the
prefix only), so the purge's per-partition listings would grow with what earlier runs left in a shared bucket."""
KAFKA_PARTITIONS = 3
START = datetime(2026, 11, 1, tzinfo=UTC)
NO_GRACE = Knobs(min_input_files=1, grace_period=timedelta(0))


@dataclasses.dataclass(frozen=True)
class Lake:
    """The table's files, decided without writing anything: file bodies by partition, the subjects' rows."""

    files: dict[Partition, list[tuple[DataKey, bytes]]]
    subject_rows: dict[str, int]
    rows: int


def plan_lake(topic: Topic, seed: int = 7) -> Lake:
    """PARTITIONS hours of FILES files of ROWS rows; each subject has one or two rows in one of HOLDING partitions,
    every other row belongs to one of many other customers."""
    draw = random.Random(seed)
    hours = [START + timedelta(hours=h) for h in range(PARTITIONS)]
    partitions = [Partition(1, at.date(), at.hour) for at in hours]
    holding = set(draw.sample(range(PARTITIONS), HOLDING))
    subjects = [f"subject-{i:03d}" for i in range(SUBJECTS)]
    homes = {s: draw.choice(sorted(holding)) for s in subjects}
    subject_rows: dict[str, int] = {}
    files: dict[Partition, list[tuple[DataKey, bytes]]] = {}
    offsets = [0] * KAFKA_PARTITIONS
    for index, partition in enumerate(partitions):
        mine = [s for s in subjects if homes[s] == index]
        for number in range(FILES):
            kafka_partition = number % KAFKA_PARTITIONS
            first = offsets[kafka_partition]
            customers = [f"customer-{draw.randrange(10**7):07d}" for _ in range(ROWS)]
            for subject in mine if number == 0 else []:  # a subject's rows sit in its partition's first file
                for _ in range(draw.choice((1, 2))):
                    customers[draw.randrange(ROWS)] = subject
            for subject in mine:
                subject_rows[subject] = subject_rows.get(subject, 0) + customers.count(subject)
            key = DataKey(topic.prefix, partition, kafka_partition, first, first + ROWS - 1)
            files.setdefault(partition, []).append((key, customer_file(customers, kafka_partition, first, partition)))
            offsets[kafka_partition] += ROWS
    return Lake(files, {s: n for s, n in subject_rows.items() if n}, PARTITIONS * FILES * ROWS)


def glue_rows(spark: SparkSession, endpoints: Endpoints, topic: Topic, subjects: list[str]) -> tuple[int, int]:
    """Rows read through the locations Glue holds, and how many of them belong to ``subjects``."""
    partitions = table_partitions(make_client(endpoints, "glue"), topic.database, topic.table) or []
    locations = [p["StorageDescriptor"]["Location"].replace("s3://", "s3a://") for p in partitions]
    frame = spark.read.parquet(*locations)
    return frame.count(), frame.where(frame.customer_id.isin(subjects)).count()


def record_requests(endpoints: Endpoints, env: str, subjects: list[str]) -> None:
    """One explicit request per subject, as ``kafkalake erase --subject`` stores it."""
    key = load_key(make_client(endpoints, "secretsmanager"), endpoints.pseudonym_secret_arn)
    store = RequestStore(make_client(endpoints, "s3"), endpoints.bucket, env)
    for subject in subjects:
        store.put(new_request([key.digest(subject)], [], 1, key.key_id, datetime.now(UTC)))


def main() -> None:
    with stack.running():
        endpoints = with_bucket(local_endpoints(), f"{BUCKET_PREFIX}-{uuid.uuid4().hex[:8]}")
        make_client(endpoints, "s3").put_bucket_versioning(
            Bucket=endpoints.bucket, VersioningConfiguration={"Status": "Enabled"}
        )
        ensure_pseudonym_key(make_client(endpoints, "secretsmanager"))
        topic = erasure_topic("erase")
        lake = plan_lake(topic)
        put_table(endpoints, topic, lake.files)
        say(f"wrote {PARTITIONS} partitions of {FILES} files ({lake.rows} rows); {len(lake.subject_rows)} subjects")
        spark = local_session(endpoints, "kafkalake-bench-erasure")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            figures = measure(spark, endpoints, topic, lake)
        finally:
            spark.stop()
            drop_bucket(make_client(endpoints, "s3"), endpoints.bucket)
        write_result("erasure", figures)


def drop_bucket(s3: Any, bucket: str) -> None:
    """Every version in the run's bucket, and the bucket: the local endpoint keeps them in its memory otherwise."""
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        doomed = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
        ]
        if doomed:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": doomed, "Quiet": True})
    s3.delete_bucket(Bucket=bucket)


def measure(spark: SparkSession, endpoints: Endpoints, topic: Topic, lake: Lake) -> dict[str, Any]:
    """Steps 1 to 5 of the module's docstring, checked; the figures."""
    s3, subjects = make_client(endpoints, "s3"), sorted(lake.subject_rows)
    keys = load_keys(make_client(endpoints, "secretsmanager"), endpoints.pseudonym_secret_arn)
    before = glue_rows(spark, endpoints, topic, subjects)
    build_seconds, built = timed(Eraser(spark, endpoints, topic.env, [topic], NO_GRACE, say=say).run)
    say(f"subject index built in {build_seconds:.1f} s")
    land_next_hour(endpoints, topic)
    record_requests(endpoints, topic.env, subjects)
    requests, _ = RequestStore(s3, endpoints.bucket, topic.env).requests()
    wanted = matching.scope(topic, requests)
    full_seconds, full = timed(lambda: matching.find(spark, s3, endpoints.bucket, topic, keys=keys, wanted=wanted))
    say(f"whole-table scan: {full_seconds:.1f} s, rows in {len(full.partitions)} partitions")
    erase_seconds, find_seconds, purge_seconds, outcome = erase(spark, endpoints, topic)
    after = glue_rows(spark, endpoints, topic, subjects)
    receipts = RequestStore(s3, endpoints.bucket, topic.env).receipts()
    table = f"{topic.database}.{topic.table}"
    rewritten = sorted({tuple(p) for r in receipts.values() for p in r["tables"][table]["partitions"]})
    removed = sum(r["tables"][table]["rows_removed"] for r in receipts.values())
    check(lake, outcome.failed, (len(receipts), removed), before, after)
    scanned = sorted(tuple(p.values) for p in full.partitions.values())
    if scanned != rewritten or sum(len(p.keys) for p in full.partitions.values()) != removed:
        raise RuntimeError(f"with its index the job erased {rewritten}, the whole-table scan finds {scanned}")
    compact_seconds = compactor_baseline(spark, endpoints, lake, rewritten)
    return {
        "partitions_total": PARTITIONS,
        "files_per_partition": FILES,
        "rows_total": lake.rows,
        "subjects": len(subjects),
        "requests_done": len(receipts),
        "partitions_holding_subjects": HOLDING,
        "partitions_rewritten": len(rewritten),
        "share_of_partitions_rewritten": len(rewritten) / PARTITIONS,
        "rows_removed": removed,
        "index_build_seconds": build_seconds,
        "index_build_objects": sum(built.indexed.values()),
        "objects_indexed_by_the_run": sum(outcome.indexed.values()),
        "erasure_seconds": erase_seconds,
        "erasure_find_seconds": find_seconds,
        "erasure_after_find_seconds": erase_seconds - find_seconds,
        "erasure_purge_seconds": purge_seconds,
        "whole_table_scan_seconds": full_seconds,
        "ratio_find_to_whole_table_scan": find_seconds / full_seconds,
        "compactor_seconds_same_partitions": compact_seconds,
        "ratio_erasure_to_compactor": erase_seconds / compact_seconds,
        "ratio_erasure_before_purge_to_compactor": (erase_seconds - purge_seconds) / compact_seconds,
    }


def erase(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> tuple[float, float, float, Outcome]:
    """One erasure run: its seconds, those to the end of finding the rows, those of the version deletion."""
    marks: list[tuple[float, str]] = []
    eraser = Eraser(spark, endpoints, topic.env, [topic], NO_GRACE, say=lambda line: mark(marks, line))
    started = time.perf_counter()
    seconds, outcome = timed(eraser.run)
    find_seconds = next(at for at, line in marks if line.startswith("erasure batch")) - started
    return seconds, find_seconds, phase(marks, "rewritten without", "erasure batch"), outcome


def compactor_baseline(
    spark: SparkSession, endpoints: Endpoints, lake: Lake, rewritten: list[tuple[Any, ...]]
) -> float:
    """The compactor's seconds on a second table of byte-for-byte copies of exactly the partitions erased."""
    baseline = erasure_topic("compact")
    chosen = {p: f for p, f in lake.files.items() if tuple(p.values()) in set(rewritten)}
    put_table(endpoints, baseline, chosen)
    seconds, results = timed(Compactor(spark, endpoints, [baseline], NO_GRACE, say=say).run)
    if sorted(tuple(r.partition) for r in results if r.action == Action.COMPACTED) != rewritten:
        raise RuntimeError(f"the compactor did not rewrite exactly the erased partitions: {results}")
    return seconds


def land_next_hour(endpoints: Endpoints, topic: Topic) -> None:
    """FILES archiver files of the hour after the lake's last, none of them the subjects' (not in Glue yet): what
    the archiver wrote since the job's last run, which the run reads into the index."""
    draw = random.Random(11)
    at = START + timedelta(hours=PARTITIONS)
    partition = Partition(1, at.date(), at.hour)
    s3 = make_client(endpoints, "s3")
    for number in range(FILES):
        first = 10**9 + number * ROWS
        customers = [f"customer-{draw.randrange(10**7):07d}" for _ in range(ROWS)]
        key = DataKey(topic.prefix, partition, number % KAFKA_PARTITIONS, first, first + ROWS - 1)
        body = customer_file(customers, number % KAFKA_PARTITIONS, first, partition)
        s3.put_object(Bucket=endpoints.bucket, Key=key.key(), Body=body)


def phase(marks: list[tuple[float, str]], after: str, until: str) -> float:
    """Seconds from the last line starting ``after`` (past the table's name) to the last starting ``until``: the
    purge of replaced objects and their versions runs from the last partition rewritten to the batch's end."""
    start = max(at for at, line in marks if after in line)
    return max(at for at, line in marks if line.startswith(until)) - start


def mark(marks: list[tuple[float, str]], line: str) -> None:
    """The erasure job's line, said, and when: its batch line marks the end of finding the rows."""
    marks.append((time.perf_counter(), line))
    say(f"+{marks[-1][0] - marks[0][0]:.1f} s {line}")


def erasure_topic(tag: str) -> Topic:
    """A table of its own shaped like the demo's ``customer-updated``, erased by ``customer_id`` only."""
    topic = bench_topic(tag, "customer-updated")
    return dataclasses.replace(topic, spec=topic.spec.model_copy(update={"erasure": "none"}))


def check(lake: Lake, failed: dict[str, str], done: tuple[int, int], before: Any, after: Any) -> None:
    """The run did what it reports: every request done (receipts, rows removed), exactly the subjects' rows gone,
    every other row read through Glue."""
    receipts, removed = done
    expected = sum(lake.subject_rows.values())
    if failed or receipts != len(lake.subject_rows) or removed != expected:
        raise RuntimeError(f"erasure: failed {failed}, {receipts} receipts, {removed} rows removed of {expected}")
    if before != (lake.rows, expected) or after != (lake.rows - expected, 0):
        raise RuntimeError(f"erasure: rows (all, subjects') through Glue {before} before, {after} after")
