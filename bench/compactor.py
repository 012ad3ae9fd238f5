"""Compactor: the compactor against a plain Spark read + write of the same bytes, and reader scans before vs after.

One partition of BENCH_COMPACT_FILES (default 420) small Parquet files, about BENCH_COMPACT_MB (default 320) MB in
all, shaped like the archiver's output (one Kafka partition and offset range per file, random payloads that do not
compress away). In one run, on one Spark session:

1. scans before: a full count and a filtered count over the location Glue holds (the raw partition directory);
2. baseline: ``spark.read.parquet(inputs).write.parquet(elsewhere)``, the least a merge can cost;
3. the compactor on the same partition (snapshot, write, measure and re-pack, verify, swap);
4. the same scans after, over the location Glue now holds (the compaction output).

Each scan is repeated BENCH_SCAN_REPEATS (default 3) times; the median is reported.
"""

from __future__ import annotations

import dataclasses
import io
import os
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import date
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from bench.common import write_result
from infra.repo import catalog_dir
from kafkalake.aws import make_client
from kafkalake.catalog import Topic, load_catalog
from kafkalake.layout import DataKey, Partition
from kafkalake.settings import Endpoints
from kafkalake_dev import stack
from kafkalake_dev.local import local_endpoints
from kafkalake_dev.sandbox import register_complete_partition, with_bucket
from kafkalake_dev.spark import local_session
from spark_jobs.compactor import Compactor, Knobs

FILES = int(os.environ.get("BENCH_COMPACT_FILES", "420"))
TOTAL_MB = int(os.environ.get("BENCH_COMPACT_MB", "320"))
REPEATS = int(os.environ.get("BENCH_SCAN_REPEATS", "3"))
KAFKA_PARTITIONS = 6
PARTITION = Partition(1, date(2026, 11, 20), 7)
BUCKET = "kafkalake-bench-compactor"
NOTE_BYTES = 96  # random hex characters per row: about as large stored as in memory


def small_file(rng: np.random.Generator, kafka_partition: int, first: int, rows: int) -> bytes:
    notes = rng.bytes(rows * NOTE_BYTES // 2).hex()
    table = pa.table(
        {
            "id": [f"p-{kafka_partition}-{first + i:012d}" for i in range(rows)],
            "amount_cents": pa.array(rng.integers(0, 1_000_000, rows), pa.int64()),
            "currency": pa.array(rng.choice(["EUR", "USD", "GBP", "CHF"], rows)),
            "note": [notes[i * NOTE_BYTES : (i + 1) * NOTE_BYTES] for i in range(rows)],
            "_kafka_partition": pa.array([kafka_partition] * rows, pa.int32()),
            "_kafka_offset": pa.array(range(first, first + rows), pa.int64()),
            "_kafka_timestamp": pa.array(rng.integers(1_763_600_000_000, 1_763_603_600_000, rows), pa.int64()),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy")
    return out.getvalue()


def rows_per_file(rng: np.random.Generator) -> int:
    """Rows that make one file of about TOTAL_MB / FILES, measured on a sample."""
    sample = 10_000
    return max(1, int(sample * TOTAL_MB * 1024 * 1024 / FILES / len(small_file(rng, 0, 0, sample))))


def put_inputs(endpoints: Endpoints, topic: Topic) -> tuple[int, int]:
    s3, rng = make_client(endpoints, "s3"), np.random.default_rng(7)
    rows, offsets, total_bytes = rows_per_file(rng), [0] * KAFKA_PARTITIONS, 0
    for index in range(FILES):
        kafka_partition = index % KAFKA_PARTITIONS
        first = offsets[kafka_partition]
        body = small_file(rng, kafka_partition, first, rows)
        key = DataKey(topic.prefix, PARTITION, kafka_partition, first, first + rows - 1).key()
        s3.put_object(Bucket=endpoints.bucket, Key=key, Body=body)
        offsets[kafka_partition] += rows
        total_bytes += len(body)
        if index % 50 == 0:
            print(f"[bench] wrote {index + 1}/{FILES} input files ({total_bytes / 2**20:.0f} MiB)", flush=True)
    sample = pq.read_schema(io.BytesIO(small_file(rng, 0, 0, 1)))
    register_complete_partition(make_client(endpoints, "glue"), topic, endpoints.bucket, sample, PARTITION)
    return rows * FILES, total_bytes


def glue_location(endpoints: Endpoints, topic: Topic) -> str:
    answer = make_client(endpoints, "glue").get_partition(
        DatabaseName=topic.database, TableName=topic.table, PartitionValues=PARTITION.values()
    )
    return str(answer["Partition"]["StorageDescriptor"]["Location"]).replace("s3://", "s3a://")


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = action()
    return time.perf_counter() - started, value


def scans(spark: SparkSession, location: str) -> dict[str, Any]:
    """Median seconds of a full count and a filtered count (a predicate no file statistic can prune)."""
    measured: dict[str, list[float]] = {"count": [], "filtered_count": []}
    answers: dict[str, int] = {}
    for _ in range(REPEATS):
        frame = spark.read.parquet(location)
        seconds, answers["count"] = timed(frame.count)
        measured["count"].append(seconds)
        seconds, answers["filtered_count"] = timed(frame.where("note LIKE '%abc%' AND currency = 'EUR'").count)
        measured["filtered_count"].append(seconds)
    files = len(spark.read.parquet(location).inputFiles())
    return {"files": files, "answers": answers, **{f"{k}_seconds": statistics.median(v) for k, v in measured.items()}}


def main() -> None:
    with stack.running():
        endpoints = with_bucket(local_endpoints(), BUCKET)
        suffix = uuid.uuid4().hex[:8]
        template = load_catalog(catalog_dir()).get("sensor-readings", "staging")
        spec = template.spec.model_copy(update={"database": f"bench_compact_{suffix}"})
        topic = dataclasses.replace(template, env=f"b{suffix}", spec=spec)
        rows, input_bytes = put_inputs(endpoints, topic)
        spark = local_session(endpoints, "kafkalake-bench-compactor")
        try:
            raw = glue_location(endpoints, topic)
            spark.read.parquet(raw).count()  # warm the JVM and the S3A connection pool before anything is timed
            before = scans(spark, raw)
            print(f"[bench] scans before: {before}", flush=True)
            target = f"s3a://{BUCKET}/bench/plain-{suffix}/"
            plain_seconds, _ = timed(lambda: spark.read.parquet(raw).write.parquet(target))
            plain_files = len(spark.read.parquet(target).inputFiles())
            print(f"[bench] plain read + write: {plain_seconds:.1f}s, {plain_files} files", flush=True)
            compactor = Compactor(spark, endpoints, topic, Knobs(), say=lambda line: print(f"[bench] {line}"))
            compact_seconds, [result] = timed(compactor.run)
            print(f"[bench] compactor: {compact_seconds:.1f}s, {result}", flush=True)
            after = scans(spark, glue_location(endpoints, topic))
            print(f"[bench] scans after: {after}", flush=True)
        finally:
            spark.stop()
        if before["answers"] != after["answers"] or result.rows != rows:
            raise RuntimeError(f"compaction changed the answers: {before['answers']} → {after['answers']}")
        write_result(
            "compactor",
            {
                "input_files": FILES,
                "input_bytes": input_bytes,
                "rows": rows,
                "target_file_bytes": Knobs().target_file_bytes,
                "compactor": {"seconds": compact_seconds, **dataclasses.asdict(result)},
                "plain_read_write": {"seconds": plain_seconds, "files": plain_files},
                "ratio_compactor_to_plain_read_write": compact_seconds / plain_seconds,
                "scans_before": before,
                "scans_after": after,
                "speedup_count": before["count_seconds"] / after["count_seconds"],
                "speedup_filtered_count": before["filtered_count_seconds"] / after["filtered_count_seconds"],
            },
        )
