"""The archiver: one topic, a durable plan of bounded offset ranges, deterministic Parquet objects, then the
offset commit. ``main()`` = plan, read, transform, write, commit.

Exactly once: the plan (per partition ``[start, end)``) is stored in S3 *before* anything is written, with a
conditional put so concurrent runs share one plan. A run that finds a plan redoes it: object keys and bytes
depend only on the plan and Kafka's immutable records, so rewriting them is harmless. Offsets are committed
to the topic's consumer group only after every object is in S3; then the plan is deleted.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kafkalake.access import KafkaAccess, kafka_access
from kafkalake.aws import make_client
from kafkalake.catalog import Topic, ValueFormat, load_catalog
from kafkalake.config import Endpoints, repo_root
from kafkalake.kafka import watermarks
from kafkalake.layout import DataKey, Partition, TablePrefix, parse_data_key
from kafkalake.registry import RegistryClient, value_subject
from spark_jobs import transform
from spark_jobs.writer import InjectedCrash, WriteSpec, total, write_groups


class RetentionLoss(RuntimeError):
    """Committed offsets fell out of Kafka's retention: records were lost before they were archived."""


@dataclass(frozen=True)
class Plan:
    kafka_topic: str
    created_at: str
    """ISO time fixed with the plan: the 'now' of the time bounds, so a redo decides exactly the same."""
    ranges: dict[int, tuple[int, int]]
    """Kafka partition → [start, end) offsets."""

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ranges": {str(p): list(r) for p, r in self.ranges.items()}})

    @classmethod
    def from_json(cls, text: str) -> Plan:
        raw = json.loads(text)
        return cls(raw["kafka_topic"], raw["created_at"], {int(p): (r[0], r[1]) for p, r in raw["ranges"].items()})

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


def plan_ranges(
    committed: dict[int, int | None],
    low: dict[int, int],
    high: dict[int, int],
    *,
    max_records: int,
    accept_data_loss: bool,
    topic: str,
) -> dict[int, tuple[int, int]]:
    """Per partition: from the committed offset (earliest for new partitions) to the high watermark, the
    record budget shared fairly across partitions. Offsets out of retention fail unless loss is accepted."""
    starts = {}
    for partition, offset in committed.items():
        if offset is None:
            starts[partition] = low[partition]
        elif offset < low[partition]:
            if not accept_data_loss:
                raise RetentionLoss(
                    f"{topic}[{partition}]: committed offset {offset} is below the earliest retained offset "
                    f"{low[partition]}; {low[partition] - offset} records were lost before archiving. Raise the "
                    "topic's retention, or set archive.accept_data_loss: true in its catalog file to go on."
                )
            starts[partition] = low[partition]
        else:
            starts[partition] = offset
    backlog = {p: max(0, high[p] - s) for p, s in starts.items()}
    budget, grants = max_records, dict.fromkeys(starts, 0)
    pending = sorted(p for p, n in backlog.items() if n)
    while budget > 0 and pending:
        share = max(1, budget // len(pending))
        for p in list(pending):
            grant = min(share, backlog[p] - grants[p], budget)
            grants[p] += grant
            budget -= grant
            if grants[p] == backlog[p]:
                pending.remove(p)
            if budget == 0:
                break
    return {p: (starts[p], starts[p] + grants[p]) for p in sorted(starts) if grants[p]}


def consumer_group(kafka_topic: str) -> str:
    return f"kafkalake-archiver.{kafka_topic}"


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


class Offsets:
    """The topic's offsets in Kafka: watermarks, and the consumer group's committed positions."""

    def __init__(self, access: KafkaAccess, kafka_topic: str) -> None:
        self.topic, self.access = kafka_topic, access
        self.client_errors: list[str] = []
        self.consumer = Consumer(
            {
                **access.client_config(),
                "group.id": consumer_group(kafka_topic),
                "enable.auto.commit": False,
                "error_cb": lambda error: self.client_errors.append(error.str()),
            }
        )

    def partitions(self) -> list[int]:
        try:
            metadata = self.consumer.list_topics(self.topic, timeout=15).topics[self.topic]
        except KafkaException as exc:
            self.consumer.poll(0.5)  # serves the error callbacks that say why (authentication, DNS, ...)
            reported = "; ".join(dict.fromkeys(self.client_errors)) or "nothing more"
            how = (
                "with the credentials of the secret in kafka_secret_arn" if self.access.credentials else "without SASL"
            )
            raise RuntimeError(
                f"topic {self.topic}: cannot reach Kafka at {self.access.bootstrap} {how} ({exc}); the client "
                f"reported: {reported}. Check kafka_bootstrap in environments.yaml and the secret's username/password."
            ) from exc
        if metadata.error is not None:
            raise RuntimeError(f"topic {self.topic}: {metadata.error}")
        return sorted(metadata.partitions)

    def state(self) -> tuple[dict[int, int | None], dict[int, int], dict[int, int]]:
        partitions = self.partitions()
        committed = {
            tp.partition: (tp.offset if tp.offset >= 0 else None)
            for tp in self.consumer.committed([TopicPartition(self.topic, p) for p in partitions], timeout=15)
        }
        marks = {p: watermarks(self.consumer, TopicPartition(self.topic, p)) for p in partitions}
        return committed, {p: m[0] for p, m in marks.items()}, {p: m[1] for p, m in marks.items()}

    def commit(self, ranges: dict[int, tuple[int, int]]) -> None:
        """Commit the plan's ends, never moving a partition backwards."""
        committed, _, _ = self.state()
        forward = [
            TopicPartition(self.topic, p, end) for p, (_, end) in ranges.items() if (committed.get(p) or -1) < end
        ]
        if forward:
            self.consumer.commit(offsets=forward, asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


def load_or_create_plan(s3: Any, bucket: str, key: str, make: Callable[[], Plan]) -> tuple[Plan, bool]:
    """The stored plan (redone after a crash), or a new one stored with If-None-Match so that two runs
    started at once end up carrying out the same plan. Returns (plan, was it already stored)."""
    for _ in range(3):
        try:
            return Plan.from_json(s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()), True
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("NoSuchKey", "404"):
                raise
        plan = make()
        if not plan.ranges:  # nothing to do: nothing to store
            return plan, False
        try:
            s3.put_object(Bucket=bucket, Key=key, Body=plan.to_json().encode(), IfNoneMatch="*")
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise
            continue
        return plan, False
    raise RuntimeError(f"could not read or create the plan s3://{bucket}/{key}")


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
    result = StructType.fromJson(json.loads(converted))
    return result


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
        data[newest] = (
            data[newest]
            .withColumn("_tombstone", F.lit(False))
            .unionByName(
                transform.tombstone_rows(classified).withColumn("_tombstone", F.lit(True)), allowMissingColumns=True
            )
        )
    quarantine = transform.quarantine_rows(classified)
    for t in timed.values():
        quarantine = quarantine.unionByName(transform.quarantine_rows(t))
    return data, quarantine, classified


def archive_topic(
    spark: SparkSession,
    endpoints: Endpoints,
    topic: Topic,
    *,
    crash_at: str | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    say: Callable[[str], None] = print,
) -> Summary:
    s3 = make_client(endpoints, "s3")
    secrets = make_client(endpoints, "secretsmanager") if endpoints.kafka_secret_arn else None
    access = kafka_access(endpoints, secrets)
    offsets = Offsets(access, topic.kafka_topic)
    try:
        archive = topic.spec.archive

        def new_plan() -> Plan:
            committed, low, high = offsets.state()
            ranges = plan_ranges(
                committed,
                low,
                high,
                max_records=archive.max_records_per_run,
                accept_data_loss=archive.accept_data_loss,
                topic=topic.kafka_topic,
            )
            return Plan(topic.kafka_topic, now().isoformat(), ranges)

        plan_key = topic.prefix.plan_key()
        plan, redone = load_or_create_plan(s3, endpoints.bucket, plan_key, new_plan)
        say(
            f"{topic.kafka_topic}: {'redoing stored' if redone else 'new'} plan of {plan.records} records "
            f"{ {p: list(r) for p, r in plan.ranges.items()} } (s3://{endpoints.bucket}/{plan_key})"
        )
        summary = Summary(topic.kafka_topic, plan.ranges, redone_plan=redone)
        _crash(crash_at, "after_plan")
        if plan.ranges:
            _carry_out(spark, endpoints, topic, plan, summary, access=access, crash_at=crash_at, say=say)
        _crash(crash_at, "after_write")
        offsets.commit(plan.ranges)
        say(
            f"{topic.kafka_topic}: committed offsets {{{', '.join(f'{p}: {e}' for p, (_, e) in plan.ranges.items())}}} "
            f"for group {consumer_group(topic.kafka_topic)}"
        )
        _crash(crash_at, "after_commit")
        s3.delete_object(Bucket=endpoints.bucket, Key=plan_key)
        return summary
    finally:
        offsets.close()


def _crash(crash_at: str | None, point: str) -> None:
    if crash_at == point:
        raise InjectedCrash(f"injected crash at {point}")


def _carry_out(
    spark: SparkSession,
    endpoints: Endpoints,
    topic: Topic,
    plan: Plan,
    summary: Summary,
    *,
    access: KafkaAccess,
    crash_at: str | None,
    say: Callable[[str], None],
) -> None:
    registry = access.registry()
    versions = version_schemas(topic, registry)
    raw = read_kafka(spark, access, plan, topic.spec.archive.include_headers).persist()
    try:
        data, quarantine, classified = transform_topic(
            raw, topic, versions, datetime.fromisoformat(plan.created_at), spark
        )
        archive = topic.spec.archive
        prefix = topic.prefix
        crash_after = 1 if crash_at == "mid_write" else None
        files_by_partition: dict[int, Counter[str]] = {}
        for version, frame in sorted(data.items()):
            spec = WriteSpec(
                endpoints,
                endpoints.bucket,
                ("_kafka_partition", "dt", "hour"),
                ("dt", "hour"),
                _data_key(prefix, version),
                archive.max_records_per_file,
                archive.compression,
                crash_after,
            )
            written = write_groups(frame, spec).collect()
            summary.objects += len(written)
            summary.written += sum(r["rows"] for r in written)
            for row in written:
                per = files_by_partition.setdefault(parse_data_key(row["key"]).kafka_partition, Counter())
                per.update({"files": 1, "written": row["rows"]})
            say(
                f"{topic.kafka_topic}: schema_version={version}: {sum(r['rows'] for r in written)} rows in "
                f"{len(written)} objects under s3://{endpoints.bucket}/{prefix.data_prefix()}schema_version={version}/"
            )
        q_spec = WriteSpec(
            endpoints,
            endpoints.bucket,
            ("_kafka_partition", "dt"),
            ("dt",),
            _quarantine_key(prefix),
            archive.max_records_per_file,
            archive.compression,
        )
        q_written = total(write_groups(quarantine, q_spec))
        summary.quarantined = q_written["rows"]
        counts = (
            classified.groupBy("_kafka_partition")
            .agg(F.count("*").alias("read"), F.sum((F.col("_error") == "tombstone").cast("int")).alias("tombstones"))
            .collect()
        )
        summary.read = sum(int(r["read"]) for r in counts)
        summary.tombstones = sum(int(r["tombstones"] or 0) for r in counts)
        if topic.spec.tombstones == "keep":
            summary.written -= summary.tombstones
        quarantined = quarantine.groupBy("_kafka_partition", "_error").count().collect()
        reasons: Counter[str] = Counter()
        for row in quarantined:
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
    finally:
        raw.unpersist()
    if not summary.balanced():
        raise RuntimeError(
            f"{topic.kafka_topic}: read {summary.read} != written {summary.written} + quarantined "
            f"{summary.quarantined} + tombstones {summary.tombstones}; nothing committed, the plan stays for a redo"
        )


def _data_key(prefix: TablePrefix, version: int) -> Callable[[dict[str, Any], int, int], str]:
    def key(group: dict[str, Any], first: int, last: int) -> str:
        partition = Partition(version, date.fromisoformat(group["dt"]), int(group["hour"]))
        return DataKey(prefix, partition, int(group["_kafka_partition"]), first, last).key()

    return key


def _quarantine_key(prefix: TablePrefix) -> Callable[[dict[str, Any], int, int], str]:
    def key(group: dict[str, Any], first: int, last: int) -> str:
        return prefix.quarantine_key(date.fromisoformat(group["dt"]), int(group["_kafka_partition"]), first, last)

    return key


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="archiver", description="Archive Kafka topics to S3 Parquet, exactly once.")
    parser.add_argument("--topic", action="append", required=True, help="topic name or Kafka topic; repeatable")
    parser.add_argument("--env", required=True)
    parser.add_argument("--catalog", type=Path, default=repo_root() / "catalog", help="topic catalog folder")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """``spark-submit spark_jobs/archiver.py --env staging --topic card-authorized`` (and EMR Serverless)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    catalog = load_catalog(args.catalog)
    endpoints = Endpoints.from_env()
    spark = SparkSession.builder.appName("kafkalake-archiver").getOrCreate()
    for name in args.topic:
        summary = archive_topic(spark, endpoints, catalog.get(name, args.env))
        print(json.dumps(asdict(summary), default=str))


if __name__ == "__main__":
    main()
