"""B-uploads (``python -m bench uploads``): the archiver's writer against S3's latency, its uploads a few at a time
(``spark_jobs.archiver.uploads``) against one at a time, as it wrote until 2026-11-28.

The workload is one task's share of the light pass of the fleet benchmark (``bench.fleet``: 156 light topics of 2,000
records in 3 Kafka partitions each, on two cores): MEMBERS (78) plans of ROWS_PER_PARTITION (667) records in each of
3 Kafka partitions, one hour, in Arrow batches of Spark's 10,000 rows, through ``PlanWriter`` in this process: 234
objects, each a PUT of its own at the task's end. The local S3 (moto) answers a small PUT in about 2 ms; S3 in a
region answers requests under 512 KB in a median of tens of milliseconds (AWS, "Best Practices Design Patterns:
Optimizing Amazon S3 Performance", *Timeouts and Retries for Latency-Sensitive Applications*,
https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/timeouts-and-retries-for-latency-sensitive-applications.html).
So every PUT of the writer's client waits BENCH_S3_LATENCY_MS (default 30) before it is sent (a sleep, which holds no
lock, as a wait on the network holds none), and the same pairs run once more with no added wait: what the local
benchmarks see.

BENCH_PAIRS (3) alternated pairs each: the baseline (the writer one upload at a time), then the writer as it ships
(``uploads.UPLOADS`` at a time). Reported: each run's seconds, the ratio ours ÷ baseline per pair, their median and
spread.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from bench.common import BUCKET, pair_ratios, paired_ratio, say, spread, write_result
from kafkalake.endpoints import Endpoints
from kafkalake.layout import TablePrefix
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.sandbox import with_bucket
from spark_jobs.archiver import uploads
from spark_jobs.archiver.writer import PlanLayout, PlanWriter
from spark_jobs.common import worker_s3_client

MEMBERS = 78
ROWS_PER_PARTITION = 667
PARTITIONS = 3
BATCH_ROWS = 10_000
"""Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch`` default."""
LATENCY_MS = float(os.environ.get("BENCH_S3_LATENCY_MS", "30"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "3"))
VALUE = pa.struct([pa.field("id", pa.string()), pa.field("amount_cents", pa.int64()), pa.field("note", pa.string())])
HOUR = datetime(2026, 11, 20, 9, tzinfo=UTC)


def pass_rows() -> pa.Table:
    """The task's rows as ``transform.plan_rows`` gives them to the writer: member after member, each Kafka partition
    in offset order, every record a good one of schema version 1 whose business time is its Kafka time."""
    count = MEMBERS * PARTITIONS * ROWS_PER_PARTITION
    member = [m for m in range(MEMBERS) for _ in range(PARTITIONS * ROWS_PER_PARTITION)]
    partition = [p for _ in range(MEMBERS) for p in range(PARTITIONS) for _ in range(ROWS_PER_PARTITION)]
    offset = [o for _ in range(MEMBERS * PARTITIONS) for o in range(ROWS_PER_PARTITION)]
    at = [HOUR + timedelta(seconds=o) for o in offset]
    values = [{"id": f"p-{i:012d}", "amount_cents": i * 7, "note": "n" * 140} for i in range(count)]
    nothing = pa.nulls(count)
    return pa.table(
        {
            "_member": pa.array(member, pa.int32()),
            "_kafka_partition": pa.array(partition, pa.int32()),
            "_kafka_offset": pa.array(offset, pa.int64()),
            "_kafka_timestamp": pa.array(at, pa.timestamp("us", tz="UTC")),
            "_key": nothing.cast(pa.binary()),
            "_raw_value": nothing.cast(pa.binary()),
            "_schema_id": pa.array([1] * count, pa.int64()),
            "_error": nothing.cast(pa.string()),
            "_schema_version": pa.array([1] * count, pa.int32()),
            "_value_v1": pa.array(values, VALUE),
        }
    )


def layouts(endpoints: Endpoints, run: str) -> list[PlanLayout]:
    return [
        PlanLayout(endpoints, TablePrefix("bench", run, "uploads", f"t{m}"), ((1, "_value_v1"),), (), False, 1_000_000)
        for m in range(MEMBERS)
    ]


def write_once(endpoints: Endpoints, rows: pa.Table, in_flight: int) -> tuple[float, int]:
    """The task's rows through the writer, ``in_flight`` uploads at a time: its seconds and objects."""
    writer = PlanWriter(layouts(endpoints, uuid.uuid4().hex[:8]), uploads=in_flight)
    started = time.monotonic()
    outcome = pa.Table.from_batches(list(writer(iter(rows.to_batches(max_chunksize=BATCH_ROWS)))))
    seconds = time.monotonic() - started
    return seconds, sum(1 for kind in outcome.column("kind").to_pylist() if kind == "data")


@contextmanager
def delayed(latency_ms: float) -> Iterator[None]:
    """Every PUT of the writer's client waits ``latency_ms`` before it is sent, inside the block."""
    events = worker_s3_client(with_bucket(local_endpoints(), BUCKET)).meta.events

    def wait(**_: Any) -> None:
        time.sleep(latency_ms / 1000)

    events.register_first("before-send.s3.PutObject", wait, unique_id="bench-uploads-latency")
    try:
        yield
    finally:
        events.unregister("before-send.s3.PutObject", unique_id="bench-uploads-latency")


def pairs(endpoints: Endpoints, rows: pa.Table, latency_ms: float) -> dict[str, Any]:
    shipped = uploads.UPLOADS
    baseline, ours, objects = [], [], set()
    with delayed(latency_ms):
        for index in range(PAIRS):
            seconds, written = write_once(endpoints, rows, 1)
            baseline.append(seconds)
            objects.add(written)
            seconds, written = write_once(endpoints, rows, shipped)
            ours.append(seconds)
            objects.add(written)
            say(
                f"uploads, {latency_ms:.0f} ms added, pair {index + 1}: {baseline[-1]:.2f} s one at a "
                f"time, {ours[-1]:.2f} s {shipped} at a time"
            )
    if len(objects) != 1:
        raise SystemExit(f"the runs wrote different numbers of objects: {sorted(objects)}")
    return {
        "added_latency_ms": latency_ms,
        "objects": objects.pop(),
        "uploads_in_flight": shipped,
        "seconds": ours,
        "baseline_seconds": baseline,
        "ratios": pair_ratios(ours, baseline),
        "ratio": paired_ratio(ours, baseline),
        "ratio_spread": spread(pair_ratios(ours, baseline)),
    }


def main() -> None:
    endpoints = with_bucket(local_endpoints(), BUCKET)
    rows = pass_rows()
    write_once(endpoints, rows, uploads.UPLOADS)  # warm: imports, the client, moto's bucket
    write_result(
        "uploads",
        {
            "members": MEMBERS,
            "records": rows.num_rows,
            "s3_latency": pairs(endpoints, rows, LATENCY_MS),
            "local": pairs(endpoints, rows, 0.0),
        },
    )
