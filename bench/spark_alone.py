"""Child process of bench/archiver.py: a topic through Spark alone, in plans as the archiver takes them, for the floor
Spark sets on this machine: its Kafka source, ``from_avro`` and its own Parquet writer to S3A, with no Python
worker, no routing, no quarantine and no layout. Reports the Spark start, the run's time and the records written."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

from bench.archiver import PARTITIONS, SCHEMA
from bench.common import started_session
from kafkalake.kafka import watermarks


def plans(ends: list[int], per_plan: int) -> list[tuple[list[int], list[int]]]:
    """(starts, ends) per plan: each partition advances by its share of ``per_plan`` until it reaches its end."""
    step, ranges, starts = per_plan // len(ends), [], [0] * len(ends)
    while starts != ends:
        stops = [min(start + step, end) for start, end in zip(starts, ends, strict=True)]
        ranges.append((starts, stops))
        starts = stops
    return ranges


def decoded(spark: SparkSession, bootstrap: str, topic: str, starts: list[int], stops: list[int]) -> DataFrame:
    """The plan's records, decoded past their Confluent header, with the Kafka columns and the hour."""
    offsets = [{topic: {str(p): offset for p, offset in enumerate(edge)}} for edge in (starts, stops)]
    records = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: list(range(len(starts)))}))
        .option("startingOffsets", json.dumps(offsets[0]))
        .option("endingOffsets", json.dumps(offsets[1]))
        .load()
    )
    value = from_avro(F.expr("substring(value, 6, length(value) - 5)"), SCHEMA).alias("value")
    return records.select(value, "partition", "offset", "timestamp").select(
        "value.*", "partition", "offset", "timestamp", F.date_format("timestamp", "yyyy-MM-dd-HH").alias("hour")
    )


def main() -> None:
    """``python -m bench.spark_alone RESULT_FILE PER_PLAN KAFKA_TOPIC``"""
    result_file, per_plan, topic = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    spark, endpoints, session_seconds = started_session("kafkalake-bench-spark-alone")
    started = time.monotonic()
    consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
    ends = [watermarks(consumer, TopicPartition(topic, p))[1] for p in range(PARTITIONS)]
    consumer.close()
    folder = f"s3a://{endpoints.bucket}/spark-alone/{uuid.uuid4().hex}"
    for index, (starts, stops) in enumerate(plans(ends, per_plan)):
        decoded(spark, endpoints.kafka_bootstrap, topic, starts, stops).write.parquet(f"{folder}/plan-{index}")
    run_seconds = time.monotonic() - started
    outcome = {"records": sum(ends), "session_seconds": session_seconds, "run_seconds": run_seconds}
    result_file.write_text(json.dumps(outcome))


if __name__ == "__main__":
    main()
