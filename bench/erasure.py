"""Erasure benchmark (``python -m bench erasure``): the erasure job's cost follows the partitions that hold matching
rows, not the size of the lake.

One table shaped like ``customer-updated`` (subject field ``customer_id``) of BENCH_ERASE_PARTITIONS (default 200)
Glue partitions, BENCH_ERASE_FILES (default 3) archiver-shaped files each, in a versioned bucket as the stack's is.
BENCH_ERASE_SUBJECTS (default 100) people have rows only in BENCH_ERASE_HOLDING (default 10) of the partitions,
among many other customers everywhere. On one Spark session:

1. one explicit request per subject is stored (hashed, as ``kafkalake erase --subject`` stores it), then one erasure
   run (no grace period, so it also deletes every replaced object version) carries all of them out: its seconds,
   the partitions it rewrote (from the receipts), the rows it removed;
2. the baseline: the compactor (same grace period) on a second table holding byte-for-byte copies of exactly the
   partitions the erasure rewrote: its seconds.

Reported: the ratio erasure ÷ compactor, the erasure's seconds split at the end of its scan (one Spark scan of the
subject column of every file of the table, which finds the rows and the partitions holding them) and what follows
(rewrite, verify, swap, version deletion, receipts: the part that follows the partitions holding matches), and
partitions rewritten ÷ partitions in the table. The run is checked, not
trusted: every receipt, rows removed = the subjects' rows, and every other row still read through Glue.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession

from bench.common import say, timed, write_result
from bench.compactor import bench_topic
from kafkalake.aws import make_client
from kafkalake.catalog import Topic
from kafkalake.erasure import RequestStore, new_request
from kafkalake.glue import table_partitions
from kafkalake.layout import DataKey, Partition
from kafkalake.personal import load_key
from kafkalake.settings import Endpoints
from kafkalake_dev import stack
from kafkalake_dev.local import local_endpoints
from kafkalake_dev.provision import ensure_pseudonym_key
from kafkalake_dev.sandbox import customer_file, put_table, with_bucket
from kafkalake_dev.spark import local_session
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Action, Knobs
from spark_jobs.erasure.job import Eraser

PARTITIONS = int(os.environ.get("BENCH_ERASE_PARTITIONS", "200"))
FILES = int(os.environ.get("BENCH_ERASE_FILES", "3"))
ROWS = int(os.environ.get("BENCH_ERASE_ROWS", "2000"))
"""Rows per file."""
SUBJECTS = int(os.environ.get("BENCH_ERASE_SUBJECTS", "100"))
HOLDING = int(os.environ.get("BENCH_ERASE_HOLDING", "10"))
"""Partitions that hold the subjects' rows."""
BUCKET = "kafkalake-bench-erasure"
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
        endpoints = with_bucket(local_endpoints(), BUCKET)
        s3 = make_client(endpoints, "s3")
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        ensure_pseudonym_key(make_client(endpoints, "secretsmanager"))
        topic = erasure_topic("erase")
        lake = plan_lake(topic)
        put_table(endpoints, topic, lake.files)
        subjects = sorted(lake.subject_rows)
        say(f"wrote {PARTITIONS} partitions of {FILES} files ({lake.rows} rows); {len(subjects)} subjects")
        record_requests(endpoints, topic.env, subjects)
        spark = local_session(endpoints, "kafkalake-bench-erasure")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            before = glue_rows(spark, endpoints, topic, subjects)
            marks: list[tuple[float, str]] = []
            eraser = Eraser(spark, endpoints, topic.env, [topic], NO_GRACE, say=lambda line: mark(marks, line))
            started = time.perf_counter()
            erase_seconds, outcome = timed(eraser.run)
            scan_seconds = next(at for at, line in marks if line.startswith("erasure batch")) - started
            after = glue_rows(spark, endpoints, topic, subjects)
            receipts = RequestStore(s3, BUCKET, topic.env).receipts()
            table = f"{topic.database}.{topic.table}"
            rewritten = sorted({tuple(p) for r in receipts.values() for p in r["tables"][table]["partitions"]})
            removed = sum(r["tables"][table]["rows_removed"] for r in receipts.values())
            check(lake, outcome.failed, (len(receipts), removed), before, after)
            baseline = erasure_topic("compact")
            chosen = {p: f for p, f in lake.files.items() if tuple(p.values()) in set(rewritten)}
            put_table(endpoints, baseline, chosen)
            compact_seconds, results = timed(Compactor(spark, endpoints, [baseline], NO_GRACE, say=say).run)
        finally:
            spark.stop()
        if sorted(tuple(r.partition) for r in results if r.action == Action.COMPACTED) != rewritten:
            raise RuntimeError(f"the compactor did not rewrite exactly the erased partitions: {results}")
        write_result(
            "erasure",
            {
                "partitions_total": PARTITIONS,
                "files_per_partition": FILES,
                "rows_total": lake.rows,
                "subjects": len(subjects),
                "requests_done": len(receipts),
                "partitions_holding_subjects": HOLDING,
                "partitions_rewritten": len(rewritten),
                "share_of_partitions_rewritten": len(rewritten) / PARTITIONS,
                "rows_removed": removed,
                "erasure_seconds": erase_seconds,
                "erasure_scan_seconds": scan_seconds,
                "erasure_after_scan_seconds": erase_seconds - scan_seconds,
                "compactor_seconds_same_partitions": compact_seconds,
                "ratio_erasure_to_compactor": erase_seconds / compact_seconds,
                "ratio_erasure_after_scan_to_compactor": (erase_seconds - scan_seconds) / compact_seconds,
            },
        )


def mark(marks: list[tuple[float, str]], line: str) -> None:
    """The erasure job's line, said, and when: its batch line marks the end of the scan that found the rows."""
    marks.append((time.perf_counter(), line))
    say(line)


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
