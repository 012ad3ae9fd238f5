"""The archiver: one topic, a durable plan of bounded offset ranges, deterministic Parquet objects, then the
offset commit. ``archive_topic`` = plan, read, transform, write, commit.

Exactly once: the plan (``spark_jobs.plan``) is stored before anything is written; object keys and bytes depend
only on the plan and Kafka's immutable records, so a redo rewrites the same objects. Offsets (``spark_jobs.offsets``)
are committed only after every object is in S3; then the plan is deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kafkalake.access import KafkaAccess, kafka_access
from kafkalake.aws import make_client
from kafkalake.catalog import Topic, ValueFormat, load_catalog
from kafkalake.layout import DataKey, Partition, TablePrefix, parse_data_key
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.settings import Endpoints
from spark_jobs import transform
from spark_jobs.offsets import Offsets, consumer_group
from spark_jobs.plan import Plan, PlanStore, plan_ranges
from spark_jobs.session import job_session
from spark_jobs.writer import WriteSpec, total, write_groups


@dataclass
class Summary:
    topic: str
    plan: dict[int, tuple[int, int]]
    read: int = 0
    written: int = 0
    objects: int = 0
    quarantined: int = 0
    tombstones: int = 0
    quarantine_by_reason: dict[str, int] = field(default_factory=dict)
    per_partition: dict[int, dict[str, int]] = field(default_factory=dict)
    redone_plan: bool = False

    def balanced(self) -> bool:
        return self.read == self.written + self.quarantined + self.tombstones


def read_kafka(spark: SparkSession, access: KafkaAccess, plan: Plan, include_headers: bool) -> DataFrame:
    """A bounded batch read of exactly the plan's ranges."""
    topic = plan.kafka_topic
    starting = {topic: {str(p): start for p, (start, _) in plan.ranges.items()}}
    ending = {topic: {str(p): end for p, (_, end) in plan.ranges.items()}}
    return (
        spark.read.format("kafka")
        .options(**access.spark_options())
        .option("assign", json.dumps({topic: sorted(plan.ranges)}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", str(include_headers).lower())
        .option("failOnDataLoss", "true")
        .load()
    )


def version_schemas(topic: Topic, registry: RegistryClient) -> list[transform.VersionSchema]:
    """Avro: every registered version of the topic's value subject (the registry's version number is the
    layout's schema_version). JSON: the catalog's newest schema."""
    if topic.spec.value_format == ValueFormat.JSON:
        return [transform.VersionSchema(len(topic.schemas), None, topic.schemas[-1])]
    return [
        transform.VersionSchema(s.version, s.schema_id, s.schema)
        for s in registry.versions(value_subject(topic.kafka_topic))
    ]


def spark_schema(spark: SparkSession, avro_schema: str) -> StructType:
    """The Spark struct spark-avro maps an Avro schema to (the same mapping ``from_avro`` uses)."""
    jvm: Any = spark.sparkContext._jvm
    parsed = jvm.org.apache.avro.Schema.Parser().parse(avro_schema)
    converted = jvm.org.apache.spark.sql.avro.SchemaConverters.toSqlType(parsed).dataType().json()
    return StructType.fromJson(json.loads(converted))


def transform_topic(
    raw: DataFrame, topic: Topic, versions: list[transform.VersionSchema], now: datetime, spark: SparkSession
) -> tuple[dict[int, DataFrame], DataFrame, DataFrame]:
    """Raw Kafka rows → (data rows per schema version, quarantine rows, classified rows for counting)."""
    rows = transform.with_metadata(raw)
    archive = topic.spec.archive
    if topic.spec.value_format == ValueFormat.AVRO:
        classified = transform.classify_avro(rows, [v.schema_id for v in versions if v.schema_id is not None])
        decoded = {v.version: transform.decode_avro(classified, v) for v in versions}
    else:
        classified = transform.classify_json(rows)
        decoded = {v.version: transform.decode_json(classified, spark_schema(spark, v.avro_schema)) for v in versions}
    timed = {v: transform.with_business_time(d, topic.spec.time_fields, now) for v, d in decoded.items()}
    data = {v: transform.data_rows(t, archive.include_key, archive.include_headers) for v, t in timed.items()}
    if topic.spec.tombstones == "keep" and versions:
        newest = max(data)
        data[newest] = transform.with_tombstones(data[newest], classified)
    quarantine = transform.quarantine_rows(classified)
    for t in timed.values():
        quarantine = quarantine.unionByName(transform.quarantine_rows(t))
    return data, quarantine, classified


def archive_topic(
    spark: SparkSession,
    endpoints: Endpoints,
    topic: Topic,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    say: Callable[[str], None] = print,
) -> Summary:
    """Carry out the topic's stored plan, or a new one; then commit its offsets and delete the plan."""
    s3 = make_client(endpoints, "s3")
    secrets = make_client(endpoints, "secretsmanager") if endpoints.kafka_secret_arn else None
    access = kafka_access(endpoints, secrets)
    offsets = Offsets(access, topic.kafka_topic)
    store = PlanStore(s3, endpoints.bucket, topic.prefix.plan_key())
    try:
        plan, redone = store.load_or_create(lambda: new_plan(offsets, topic, now()))
        say(
            f"{topic.kafka_topic}: {'redoing stored' if redone else 'new'} plan of {plan.records} records "
            f"{ {p: list(r) for p, r in plan.ranges.items()} } (s3://{store.bucket}/{store.key})"
        )
        summary = Summary(topic.kafka_topic, plan.ranges, redone_plan=redone)
        if plan.ranges:
            carry_out(spark, endpoints, topic, plan, summary, access=access, say=say)
        offsets.commit(plan.ranges)
        ends = ", ".join(f"{p}: {e}" for p, (_, e) in plan.ranges.items())
        say(f"{topic.kafka_topic}: committed offsets {{{ends}}} for group {consumer_group(topic.kafka_topic)}")
        store.delete()
        return summary
    finally:
        offsets.close()


def new_plan(offsets: Offsets, topic: Topic, now: datetime) -> Plan:
    committed, low, high = offsets.state()
    archive = topic.spec.archive
    ranges = plan_ranges(
        committed,
        low,
        high,
        max_records=archive.max_records_per_run,
        accept_data_loss=archive.accept_data_loss,
        topic=topic.kafka_topic,
    )
    return Plan(topic.kafka_topic, now.isoformat(), ranges)


def carry_out(
    spark: SparkSession,
    endpoints: Endpoints,
    topic: Topic,
    plan: Plan,
    summary: Summary,
    *,
    access: KafkaAccess,
    say: Callable[[str], None],
) -> None:
    """Read the plan's records, write data and quarantine objects, and check every record is accounted for."""
    versions = version_schemas(topic, access.registry())
    raw = read_kafka(spark, access, plan, topic.spec.archive.include_headers).persist()
    try:
        now = datetime.fromisoformat(plan.created_at)
        data, quarantine, classified = transform_topic(raw, topic, versions, now, spark)
        files = write_data(endpoints, topic, data, summary, say)
        summary.quarantined = total(write_groups(quarantine, quarantine_spec(endpoints, topic)))["rows"]
        count_records(classified, quarantine, topic, summary, files)
    finally:
        raw.unpersist()
    if not summary.balanced():
        raise RuntimeError(
            f"{topic.kafka_topic}: read {summary.read} != written {summary.written} + quarantined "
            f"{summary.quarantined} + tombstones {summary.tombstones}; nothing committed, the plan stays for a redo"
        )


def write_data(
    endpoints: Endpoints, topic: Topic, data: dict[int, DataFrame], summary: Summary, say: Callable[[str], None]
) -> dict[int, Counter[str]]:
    """One object per (Kafka partition, hour) and schema version; returns files and rows per Kafka partition."""
    archive, prefix = topic.spec.archive, topic.prefix
    files_by_partition: dict[int, Counter[str]] = {}
    for version, frame in sorted(data.items()):
        spec = WriteSpec(
            endpoints,
            endpoints.bucket,
            ("_kafka_partition", "dt", "hour"),
            ("dt", "hour"),
            data_key(prefix, version),
            archive.max_records_per_file,
            archive.compression,
        )
        written = write_groups(frame, spec).collect()
        rows = sum(r["rows"] for r in written)
        summary.objects += len(written)
        summary.written += rows
        for row in written:
            per = files_by_partition.setdefault(parse_data_key(row["key"]).kafka_partition, Counter())
            per.update({"files": 1, "written": row["rows"]})
        say(
            f"{topic.kafka_topic}: schema_version={version}: {rows} rows in {len(written)} objects under "
            f"s3://{endpoints.bucket}/{prefix.data_prefix()}schema_version={version}/"
        )
    return files_by_partition


def quarantine_spec(endpoints: Endpoints, topic: Topic) -> WriteSpec:
    archive = topic.spec.archive
    return WriteSpec(
        endpoints,
        endpoints.bucket,
        ("_kafka_partition", "dt"),
        ("dt",),
        quarantine_key(topic.prefix),
        archive.max_records_per_file,
        archive.compression,
    )


def count_records(
    classified: DataFrame,
    quarantine: DataFrame,
    topic: Topic,
    summary: Summary,
    files_by_partition: dict[int, Counter[str]],
) -> None:
    """Records read and tombstones per Kafka partition, quarantined records per reason."""
    counts = (
        classified.groupBy("_kafka_partition")
        .agg(F.count("*").alias("read"), F.sum((F.col("_error") == "tombstone").cast("int")).alias("tombstones"))
        .collect()
    )
    summary.read = sum(int(r["read"]) for r in counts)
    summary.tombstones = sum(int(r["tombstones"] or 0) for r in counts)
    if topic.spec.tombstones == "keep":
        summary.written -= summary.tombstones
    reasons: Counter[str] = Counter()
    for row in quarantine.groupBy("_kafka_partition", "_error").count().collect():
        reasons[row["_error"]] += int(row["count"])
        files_by_partition.setdefault(int(row["_kafka_partition"]), Counter())["quarantined"] += int(row["count"])
    summary.quarantine_by_reason = dict(reasons)
    summary.per_partition = {
        int(r["_kafka_partition"]): {
            "read": int(r["read"]),
            "tombstones": int(r["tombstones"] or 0),
            **files_by_partition.get(int(r["_kafka_partition"]), {}),
        }
        for r in counts
    }


def data_key(prefix: TablePrefix, version: int) -> Callable[[dict[str, Any], int, int], str]:
    def key(group: dict[str, Any], first: int, last: int) -> str:
        partition = Partition(version, date.fromisoformat(group["dt"]), int(group["hour"]))
        return DataKey(prefix, partition, int(group["_kafka_partition"]), first, last).key()

    return key


def quarantine_key(prefix: TablePrefix) -> Callable[[dict[str, Any], int, int], str]:
    def key(group: dict[str, Any], first: int, last: int) -> str:
        return prefix.quarantine_key(date.fromisoformat(group["dt"]), int(group["_kafka_partition"]), first, last)

    return key


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="archiver", description="Archive Kafka topics to S3 Parquet, exactly once.")
    parser.add_argument("--topic", action="append", required=True, help="topic name or Kafka topic; repeatable")
    parser.add_argument("--env", required=True)
    parser.add_argument("--catalog", type=Path, required=True, help="topic catalog folder")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """``entrypoint.py archive --env staging --catalog catalog --topic card-authorized`` (EMR Serverless)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    endpoints = Endpoints.from_env(os.environ)
    catalog = load_catalog(args.catalog)
    spark = job_session("kafkalake-archiver")
    for name in args.topic:
        summary = archive_topic(spark, endpoints, catalog.get(name, args.env))
        print(json.dumps(asdict(summary), default=str))
