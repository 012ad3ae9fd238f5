"""Compactor benchmarks: the compactor against a plain read + write of the same bytes with the compactor's committer.

B3 (``python -m bench compactor``): BENCH_PAIRS (default 3) tables of one partition each, of BENCH_COMPACT_FILES
(default 420) small Parquet files, about BENCH_COMPACT_MB (default 320) MB in all, shaped like the archiver's output
(one Kafka partition and offset range per file, random payloads that do not compress away). On one Spark session:

1. scans before: a full count and a filtered count over the location Glue holds (the first table's raw partition);
2. the earlier baseline, ``spark.read.parquet(inputs).write.parquet(elsewhere)`` (S3A's rename commit: a copy and a
   delete per file on S3) over the first table's partition, once, so that the old figures can be read against the
   new;
3. per table, a pair: the baseline (``bench.plain``; ``plain_read_write`` in the result), the least a merge can cost
   with the compactor's committer: the same inputs in the same number of output files, consecutive in key order,
   each one Spark task that reads its inputs and uploads one Parquet object under a key it names (boto3 from the
   Python worker, no S3A, no rename), with nothing else (no footers, digests, manifests, inspection or swap), timed
   from the listing of its inputs; then right after it the compactor on the same partition (select, which lists
   them, plan, write, inspect, swap), with the peak memory of this process tree while it runs (``bench.proc.Peaks``)
   and the EMR worker sizes it calls for (``bench.sizing``). The same sampler runs during the baseline (until
   2026-11-27 it ran during the compactor only, and the baseline's listing fell before its timer);
4. the same scans after, over the location Glue now holds for the first table (the compaction output).

The ratio is the median of the pairs' ratios (``bench.common.paired_ratio``: each pair saw the same load of a shared
machine), with every pair's ratio and their spread; the compactor's figures are its median run's, the baseline's
seconds the median of its runs. Each scan is repeated BENCH_SCAN_REPEATS (default 3) times; the median is reported.

B3-fleet (``python -m bench compactor-fleet``): 5 tables, 10 partitions each, 40 small files each (BENCH_FLEET_MB,
default 200 MB, in all): one compactor run over the five tables against one plain read + write of all 50 partitions
(both baselines, as above).
"""

from __future__ import annotations

import dataclasses
import io
import os
import statistics
import uuid
from collections import Counter
from datetime import date, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from bench.calls import count_every_client
from bench.common import LOCAL_CORES, pair_ratios, paired_ratio, say, spread, timed, write_result
from bench.plain import baselines, plain_copy, ratios, s3a_copy
from bench.proc import Peaks
from bench.sizing import EmrSizes, sizes_for
from infra.repo import catalog_dir
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.layout import DataKey, Partition
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.sandbox import register_complete_partitions, with_bucket
from kafkalake_dev.local.spark import local_session
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Knobs, PartitionResult

FILES = int(os.environ.get("BENCH_COMPACT_FILES", "420"))
TOTAL_MB = int(os.environ.get("BENCH_COMPACT_MB", "320"))
REPEATS = int(os.environ.get("BENCH_SCAN_REPEATS", "3"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "3"))
KAFKA_PARTITIONS = 6
PARTITION = Partition(1, date(2026, 11, 20), 7)
BUCKET = "kafkalake-bench-compactor"
NOTE_BYTES = 96  # random hex characters per row: about as large stored as in memory


def small_file(
    rng: np.random.Generator, kafka_partition: int, first: int, rows: int, business_hour: datetime | None = None
) -> bytes:
    """An archiver-shaped file; with ``business_hour``, its rows' business time (an Iceberg table is partitioned by
    it) in that hour."""
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
    if business_hour is not None:
        moments = [business_hour + timedelta(seconds=int(s)) for s in rng.integers(0, 3600, rows)]
        table = table.append_column("_business_time", pa.array(moments, pa.timestamp("us", tz="UTC")))
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy")
    return out.getvalue()


FLEET_TABLES, FLEET_PARTITIONS, FLEET_FILES = 5, 10, 40
FLEET_MB = int(os.environ.get("BENCH_FLEET_MB", "200"))


def rows_per_file(rng: np.random.Generator, file_bytes: float) -> int:
    """Rows that make one file of about ``file_bytes``, measured on a sample."""
    sample = 10_000
    return max(1, int(sample * file_bytes / len(small_file(rng, 0, 0, sample))))


def put_partition(
    s3: Any, bucket: str, topic: Topic, partition: Partition, *, files: int, rows: int, business_time: bool = False
) -> int:
    """``files`` archiver-shaped files of ``rows`` rows in one partition (with their business time, in the
    partition's hour, when asked); the bytes written."""
    rng, offsets, total_bytes = np.random.default_rng(7), [0] * KAFKA_PARTITIONS, 0
    hour = partition.start if business_time else None
    for index in range(files):
        kafka_partition = index % KAFKA_PARTITIONS
        first = offsets[kafka_partition]
        body = small_file(rng, kafka_partition, first, rows, hour)
        key = DataKey(topic.prefix, partition, kafka_partition, first, first + rows - 1).key()
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        offsets[kafka_partition] += rows
        total_bytes += len(body)
    return total_bytes


def register(endpoints: Endpoints, topic: Topic, partitions: list[Partition]) -> None:
    sample = pq.read_schema(io.BytesIO(small_file(np.random.default_rng(7), 0, 0, 1)))
    register_complete_partitions(make_client(endpoints, "glue"), topic, endpoints.bucket, sample, partitions)


def bench_topic(tag: str, template_name: str = "sensor-readings") -> Topic:
    """The demo catalog's ``template_name`` topic in an environment and Glue database of its own."""
    suffix = uuid.uuid4().hex[:8]
    template = load_topic_catalog(catalog_dir()).get(template_name, "staging")
    spec = template.spec.model_copy(update={"database": f"bench_{tag}_{suffix}"})
    return dataclasses.replace(template, env=f"b{suffix}", spec=spec)


def glue_location(endpoints: Endpoints, topic: Topic) -> str:
    answer = make_client(endpoints, "glue").get_partition(
        DatabaseName=topic.database, TableName=topic.table, PartitionValues=PARTITION.values()
    )
    return str(answer["Partition"]["StorageDescriptor"]["Location"]).replace("s3://", "s3a://")


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


def compactor_sizes(peaks: dict[str, float], rows: int) -> EmrSizes:
    """The EMR worker sizes the compactor's peaks call for (``bench.sizing``), each an upper bound: the Python
    driver's peak includes this benchmark's own (its input files were made here), and Spark reuses the Python workers
    the baselines ran in before (a worker keeps the memory it once held)."""
    per_core = peaks["peak_workers_python_rss_mib"] / LOCAL_CORES
    return sizes_for(rows, peaks["peak_jvm_rss_mib"], peaks["peak_driver_python_rss_mib"], per_core)


def compact_pair(
    spark: SparkSession, endpoints: Endpoints, topic: Topic, rows: int
) -> tuple[dict[str, Any], float, PartitionResult, dict[str, float]]:
    """One pair on the topic's partition: the plain read + write, then the compactor right after it (so both see the
    same load of a shared machine); the baseline, the compactor's wall seconds, its result and the peak memory of
    this process tree (the Python driver's) while it ran. The same sampler runs while the baseline runs (its
    peaks are the baseline's, in ``plain_read_write``), so that both share a machine with the same sampling load."""
    with Peaks(os.getpid()) as baseline_peaks:
        plain = plain_copy(spark, endpoints, [f"{topic.prefix.data_prefix()}{PARTITION.path()}"], rows, topic.env)
    plain = {**plain, **baseline_peaks.mib()}
    compactor = Compactor(spark, endpoints, [topic], Knobs(), say=say)
    with Peaks(os.getpid()) as peaks:
        seconds, [result] = timed(compactor.run)
    say(f"compactor: {seconds:.1f}s, {result}")
    if result.rows != rows:
        raise RuntimeError(f"the compactor wrote {result.rows} rows of {rows}")
    return plain, seconds, result, peaks.mib()


def main() -> None:
    """B3: BENCH_PAIRS alternated pairs (plain read + write, then the compactor), each on a partition of its own."""
    with stack.running():
        endpoints = with_bucket(local_endpoints(), BUCKET)
        topics = [bench_topic("compact") for _ in range(PAIRS)]
        rows_each = rows_per_file(np.random.default_rng(7), TOTAL_MB * 1024 * 1024 / FILES)
        s3 = make_client(endpoints, "s3")
        for topic in topics:
            input_bytes = put_partition(s3, BUCKET, topic, PARTITION, files=FILES, rows=rows_each)
            register(endpoints, topic, [PARTITION])
        rows = rows_each * FILES
        say(f"wrote {PAIRS} partitions of {FILES} input files ({input_bytes / 2**20:.0f} MiB, {rows} rows) each")
        spark = local_session(endpoints, "kafkalake-bench-compactor")
        try:
            raw = glue_location(endpoints, topics[0])
            spark.read.parquet(raw).count()  # warm the JVM and the S3A connection pool before anything is timed
            before = scans(spark, raw)
            say(f"scans before: {before}")
            s3a = s3a_copy(spark, endpoints, [f"{topics[0].prefix.data_prefix()}{PARTITION.path()}"], topics[0].env)
            pairs = [compact_pair(spark, endpoints, topic, rows) for topic in topics]
            after = scans(spark, glue_location(endpoints, topics[0]))
            say(f"scans after: {after}")
        finally:
            spark.stop()
        if before["answers"] != after["answers"]:
            raise RuntimeError(f"compaction changed the answers: {before['answers']} → {after['answers']}")
        plain_seconds, compactor_seconds = [pair[0]["seconds"] for pair in pairs], [pair[1] for pair in pairs]
        peaks = {name: max(pair[3][name] for pair in pairs) for name in pairs[0][3]}
        median = sorted(range(PAIRS), key=lambda i: compactor_seconds[i])[PAIRS // 2]
        plain = {**pairs[median][0], "seconds": statistics.median(plain_seconds), "runs_seconds": plain_seconds}
        ratios = pair_ratios(compactor_seconds, plain_seconds)
        result = pairs[median][2]
        write_result(
            "compactor",
            {
                "input_files": FILES,
                "input_bytes": input_bytes,
                "rows": rows,
                "target_file_bytes": Knobs().target_file_bytes,
                "pairs": PAIRS,
                "compactor": {
                    "wall_seconds": compactor_seconds[median],
                    "runs_wall_seconds": compactor_seconds,
                    "partition": dataclasses.asdict(result),
                    "runs_partition_seconds": [pair[2].seconds for pair in pairs],
                    **peaks,
                },
                "emr_sizes": compactor_sizes(peaks, rows).to_dict(),
                "plain_read_write": plain,
                "plain_read_write_s3a": s3a,
                "ratio_compactor_to_plain_read_write": paired_ratio(compactor_seconds, plain_seconds),
                "ratio_compactor_to_plain_read_write_pairs": ratios,
                "ratio_compactor_to_plain_read_write_spread": spread(ratios),
                "ratio_compactor_to_plain_read_write_s3a": compactor_seconds[median] / s3a["seconds"],
                "scans_before": before,
                "scans_after": after,
                "speedup_count": before["count_seconds"] / after["count_seconds"],
                "speedup_filtered_count": before["filtered_count_seconds"] / after["filtered_count_seconds"],
            },
        )


def fleet() -> None:
    """B3-fleet: five tables of ten partitions of 40 small files, in one compactor run."""
    partitions = [Partition(1, date(2026, 11, 20), hour) for hour in range(FLEET_PARTITIONS)]
    files = FLEET_TABLES * FLEET_PARTITIONS * FLEET_FILES
    with stack.running():
        endpoints = with_bucket(local_endpoints(), BUCKET)
        s3 = make_client(endpoints, "s3")
        rows_each = rows_per_file(np.random.default_rng(7), FLEET_MB * 1024 * 1024 / files)
        topics = [bench_topic(f"fleet{i}") for i in range(FLEET_TABLES)]
        input_bytes = 0
        for topic in topics:
            for partition in partitions:
                input_bytes += put_partition(s3, BUCKET, topic, partition, files=FLEET_FILES, rows=rows_each)
            register(endpoints, topic, partitions)
            say(f"wrote {FLEET_PARTITIONS * FLEET_FILES} files for {topic.database} ({input_bytes / 2**20:.0f} MiB)")
        rows = rows_each * files
        spark = local_session(endpoints, "kafkalake-bench-compactor-fleet")
        try:
            sources = [f"{t.prefix.data_prefix()}{p.path()}" for t in topics for p in partitions]
            spark.read.parquet(f"s3a://{BUCKET}/{sources[0]}").count()  # warm the JVM and the S3A connection pool
            plain = baselines(spark, endpoints, sources, rows, f"fleet-{topics[0].env}")
            calls: Counter[str] = Counter()
            count_every_client(calls)  # the driver's calls from here on (the executors': inputs read, outputs put)
            compact_seconds, results = timed(Compactor(spark, endpoints, topics, Knobs(), say=say).run)
            say(f"compactor over {len(topics)} tables: {compact_seconds:.1f}s")
        finally:
            spark.stop()
        compacted = [r for r in results if r.action == "compacted"]
        if len(compacted) != len(sources) or sum(r.rows for r in compacted) != rows:
            raise RuntimeError(f"the run did not compact every partition exactly: {results}")
        write_result(
            "compactor-fleet",
            {
                "tables": FLEET_TABLES,
                "partitions": len(sources),
                "input_files": files,
                "input_bytes": input_bytes,
                "rows": rows,
                "files_after": sum(r.files_after for r in compacted),
                "bytes_after": sum(r.bytes_after for r in compacted),
                "compactor_seconds": compact_seconds,
                "compactor_driver_calls": dict(sorted(calls.items())),
                **plain,
                **ratios(compact_seconds, plain),
            },
        )
