"""Child process of bench/archiver.py: the fairest Spark-alone pipeline for the archiver's job, read → decode → write
and nothing else, in plans as the archiver takes them. What it shares with the archiver, so that the difference is
the archiver's own work (classification, business time, routing, quarantine, layout, receipts, leases, commits):

- the read: ``spark_jobs.archiver.records.read_kafka`` itself, so the same fetch settings (``fetch.max.wait.ms``),
  the same consumer group (the executors' consumers reused from plan to plan) and one Spark partition per Kafka
  partition;
- the JVM: started with the archiver job's options (``kafkalake.jobspec.JVM_OPTIONS``), which any Spark job could
  set;
- the committer: each task writes its rows with pyarrow and puts one object under a key that depends only on its
  offsets, through the workers' S3 client (``spark_jobs.common.worker_s3_client``), as the archiver's writer does:
  no S3A, no rename.

The decode is ``from_avro`` past the Confluent header (of the topic's schema: ``bench.hashing.topic_schema``; for the
Protobuf topic of ``bench.protobuf``, the archiver's Protobuf decoder past the message index); no
field is hashed (``bench.hashing`` says why). Reports the Spark start, the run's time, the records written
and the CPU seconds the process tree used after the Spark start (``bench.proc``)."""

from __future__ import annotations

import io
import json
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from bench.archiver import PARTITIONS
from bench.common import started_session
from bench.hashing import topic_schema
from bench.proc import cpu_since, tree_cpu
from bench.protobuf import payment, protobuf_child
from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import Job
from kafkalake.kafka import watermarks
from kafkalake.kafka_access import kafka_access
from kafkalake.wire import HEADER_SIZE
from kafkalake_dev.local.endpoints import local_credentials
from spark_jobs.archiver.plan import Plan
from spark_jobs.archiver.records import read_kafka, spark_schema
from spark_jobs.common import worker_s3_client
from spark_jobs.protobuf_decoder import protobuf_value

WRITTEN_SCHEMA = "key string, rows long"
WRITTEN = pa.schema([("key", pa.string()), ("rows", pa.int64())])


def plans(ends: list[int], per_plan: int) -> list[tuple[list[int], list[int]]]:
    """(starts, ends) per plan: each partition advances by its share of ``per_plan`` until it reaches its end."""
    step, ranges, starts = per_plan // len(ends), [], [0] * len(ends)
    while starts != ends:
        stops = [min(start + step, end) for start, end in zip(starts, ends, strict=True)]
        ranges.append((starts, stops))
        starts = stops
    return ranges


def decoded(records: DataFrame) -> DataFrame:
    """The records decoded past their Confluent header, with the Kafka partition and offset: ``from_avro``, or for the
    Protobuf topic (``bench.protobuf``) the archiver's Protobuf decoder past the message index too."""
    if protobuf_child():
        columns, decoding = payment()
        start = HEADER_SIZE + len(decoding.index)
        payload = F.expr(f"substring(value, {start + 1}, length(value) - {start})")
        struct = spark_schema(records.sparkSession, columns)
        value = protobuf_value(payload, decoding.descriptor_set, decoding.message, struct).alias("value")
    else:
        value = from_avro(F.expr("substring(value, 6, length(value) - 5)"), topic_schema()).alias("value")
    return records.select(value, "partition", "offset", "timestamp").select(
        "value.*", F.col("partition").alias("_kafka_partition"), F.col("offset").alias("_kafka_offset"), "timestamp"
    )


@dataclass(frozen=True)
class DirectWriter:
    """A task's rows → one Parquet object named by its Kafka partition and offsets (the archiver's committer)."""

    endpoints: Endpoints
    prefix: str

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = list(batches)  # none when the plan's range of this task's Kafka partition is empty
        table = pa.Table.from_batches(received) if received else None
        if table is not None and table.num_rows:
            offsets = table.column("_kafka_offset")
            partition = table.column("_kafka_partition")[0].as_py()
            first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
            key = f"{self.prefix}/partition={partition}/{first:020d}-{last:020d}.parquet"
            body = io.BytesIO()
            pq.write_table(table, body, compression="snappy")
            worker_s3_client(self.endpoints).put_object(Bucket=self.endpoints.bucket, Key=key, Body=body.getvalue())
            yield pa.RecordBatch.from_pylist([{"key": key, "rows": table.num_rows}], schema=WRITTEN)


def main() -> None:
    """``python -m bench.spark_alone RESULT_FILE PER_PLAN KAFKA_TOPIC``"""
    result_file, per_plan, topic = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    spark, endpoints, session_seconds = started_session("kafkalake-bench-spark-alone", Job.ARCHIVE)
    cpu_before, started = tree_cpu(), time.monotonic()
    consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
    ends = [watermarks(consumer, TopicPartition(topic, p))[1] for p in range(PARTITIONS)]
    consumer.close()
    access, prefix = kafka_access(endpoints), f"spark-alone/{uuid.uuid4().hex}"
    written = 0
    for starts, stops in plans(ends, per_plan):
        plan = Plan(topic, "", {p: (start, stop) for p, (start, stop) in enumerate(zip(starts, stops, strict=True))})
        records = decoded(read_kafka(spark, access, plan, include_headers=False))
        rows = records.mapInArrow(DirectWriter(endpoints, prefix), WRITTEN_SCHEMA).collect()
        written += sum(int(row["rows"]) for row in rows)
    run_seconds, run_cpu = time.monotonic() - started, cpu_since(cpu_before, tree_cpu())
    if written != sum(ends):
        raise SystemExit(f"Spark alone wrote {written} of {sum(ends)} records")
    outcome = {
        "records": written,
        "session_seconds": session_seconds,
        "run_seconds": run_seconds,
        "run_cpu_seconds": run_cpu,
    }
    result_file.write_text(json.dumps(outcome))


if __name__ == "__main__":
    with local_credentials():  # the workers' S3 client writes to moto
        main()
