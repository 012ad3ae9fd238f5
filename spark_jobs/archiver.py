"""The archiver for one topic: a durable plan of bounded offset ranges, deterministic Parquet objects, then the
offset commit. ``archive_topic`` carries out one plan; ``catch_up`` carries out plans until the topic reaches the
high watermark seen when it started (``spark_jobs.fleet`` runs many topics at once).

Exactly once: the plan (``spark_jobs.plan``) is stored before anything is written; object keys and bytes depend
only on the plan and Kafka's immutable records, so a redo rewrites the same objects. Offsets (``spark_jobs.offsets``)
are committed only after every object is in S3; then the plan is deleted.

Each plan's records are read once and decoded once (both cached for the plan's duration): the counts, the data
objects and the quarantine objects all come from those caches.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import StructType

from kafkalake.access import KafkaAccess, kafka_access
from kafkalake.aws import make_client
from kafkalake.catalog import Topic, ValueFormat
from kafkalake.layout import DataKey, Partition, TablePrefix, parse_data_key
from kafkalake.receipts import PartitionAccount, Receipt, StoredObject
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.settings import Endpoints
from spark_jobs import transform
from spark_jobs.offsets import Offsets, consumer_group
from spark_jobs.plan import Plan, PlanStore, plan_ranges
from spark_jobs.writer import WriteSpec, write_groups

PHASES = ("read", "decode", "write", "commit")
FETCH_MAX_WAIT_MS = 20
"""How long a fetch waits for data the broker does not have yet. The plan's ranges end at or below the high
watermark, so only the consumer's read-ahead past a range's end waits: with Kafka's default (500 ms) every Kafka
partition of every plan paid half a second (measured locally: 1.28 s → 0.25 s to read 2,000 records in 3
partitions)."""


class SubjectMissing(RuntimeError):
    """An Avro topic has records but its value subject has no schema in the registry."""


@dataclass
class Summary:
    """One carried-out plan."""

    topic: str
    plan: dict[int, tuple[int, int]]
    read: int = 0
    written: int = 0
    objects: int = 0
    quarantined: int = 0
    tombstones: int = 0
    quarantine_by_reason: dict[str, int] = field(default_factory=dict)
    per_partition: dict[int, dict[str, int]] = field(default_factory=dict)
    latest_hour: dict[int, str] = field(default_factory=dict)
    """Kafka partition → the start (ISO, UTC) of the latest business hour it wrote data to."""
    stored: list[StoredObject] = field(default_factory=list)
    """Data objects written (rows include kept tombstones), for the plan's receipt."""
    quarantine_objects: list[StoredObject] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per phase: read (Kafka, classified and counted), decode, write (data and quarantine), commit."""
    redone_plan: bool = False

    def balanced(self) -> bool:
        return self.read == self.written + self.quarantined + self.tombstones

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.monotonic() - started


def read_kafka(spark: SparkSession, access: KafkaAccess, plan: Plan, include_headers: bool) -> DataFrame:
    """A bounded batch read of exactly the plan's ranges (one Spark partition per Kafka partition)."""
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
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
        .load()
    )


def version_schemas(topic: Topic, registry: RegistryClient) -> list[transform.VersionSchema]:
    """Avro: every registered version of the topic's value subject (the registry's version number is the
    layout's schema_version). JSON: the catalog's newest schema."""
    if topic.spec.value_format == ValueFormat.JSON:
        return [transform.VersionSchema(len(topic.schemas), None, topic.schemas[-1])]
    subject = value_subject(topic.kafka_topic)
    versions = [transform.VersionSchema(s.version, s.schema_id, s.schema) for s in registry.versions(subject)]
    if not versions:
        raise SubjectMissing(
            f"topic {topic.kafka_topic}: the registry at {registry.url} has no schema under subject {subject!r}, "
            "so no record can be decoded. Register the topic's value schema there (TopicNameStrategy), or set "
            f"value_format: json in {topic.source} if the topic carries JSON."
        )
    return versions


def spark_schema(spark: SparkSession, avro_schema: str) -> StructType:
    """The Spark struct spark-avro maps an Avro schema to (the same mapping ``from_avro`` uses)."""
    jvm: Any = spark.sparkContext._jvm
    parsed = jvm.org.apache.avro.Schema.Parser().parse(avro_schema)
    converted = jvm.org.apache.spark.sql.avro.SchemaConverters.toSqlType(parsed).dataType().json()
    return StructType.fromJson(json.loads(converted))


def decode_versions(
    classified: DataFrame, topic: Topic, versions: list[transform.VersionSchema], now: datetime, spark: SparkSession
) -> dict[int, DataFrame]:
    """Per schema version: its rows decoded, with their business time (and the errors decoding found)."""
    if topic.spec.value_format == ValueFormat.AVRO:
        decoded = {v.version: transform.decode_avro(classified, v) for v in versions}
    else:
        decoded = {v.version: transform.decode_json(classified, spark_schema(spark, v.avro_schema)) for v in versions}
    return {v: transform.with_business_time(d, topic.spec.time_fields, now) for v, d in decoded.items()}


def classify(raw: DataFrame, topic: Topic, versions: list[transform.VersionSchema]) -> DataFrame:
    rows = transform.with_metadata(raw)
    if topic.spec.value_format == ValueFormat.AVRO:
        return transform.classify_avro(rows, [v.schema_id for v in versions if v.schema_id is not None])
    return transform.classify_json(rows)


def data_frames(timed: dict[int, DataFrame], classified: DataFrame, topic: Topic) -> dict[int, DataFrame]:
    """Rows to write per schema version (kept tombstones join the newest version as delete-log rows)."""
    archive = topic.spec.archive
    data = {v: transform.data_rows(t, archive.include_key, archive.include_headers) for v, t in timed.items()}
    if topic.spec.tombstones == "keep" and data:
        newest = max(data)
        data[newest] = transform.with_tombstones(data[newest], classified)
    return data


def quarantine_frame(classified: DataFrame, timed: dict[int, DataFrame]) -> DataFrame:
    quarantine = transform.quarantine_rows(classified)
    for frame in timed.values():
        quarantine = quarantine.unionByName(transform.quarantine_rows(frame))
    return quarantine


ErrorCounts = Counter[tuple[int, str | None]]
"""Rows per (Kafka partition, error or None)."""


def error_counts(frame: DataFrame) -> ErrorCounts:
    """Rows per (Kafka partition, error); also what materializes the frame's cache."""
    rows = frame.groupBy("_kafka_partition", "_error").count().collect()
    return Counter({(int(r["_kafka_partition"]), r["_error"]): int(r["count"]) for r in rows})


def classification_counts(classified: DataFrame) -> tuple[ErrorCounts, set[int | None]]:
    """Rows per (Kafka partition, error), and the schema ids of the rows to decode; materializes the cache."""
    rows = classified.groupBy("_kafka_partition", "_error", "_schema_id").count().collect()
    counts: ErrorCounts = Counter()
    for row in rows:
        counts[(int(row["_kafka_partition"]), row["_error"])] += int(row["count"])
    return counts, {row["_schema_id"] for row in rows if row["_error"] is None}


def versions_to_decode(
    topic: Topic, versions: list[transform.VersionSchema], schema_ids: set[int | None]
) -> list[transform.VersionSchema]:
    """The versions whose records the plan holds (kept tombstones also need the newest version's table)."""
    newest = max(versions, key=lambda v: v.version)
    keep_newest = topic.spec.tombstones == "keep"
    return [v for v in versions if v.schema_id in schema_ids or (keep_newest and v is newest)]


class TopicArchiver:
    """One topic's offsets, plan store and Kafka/registry access, for one or more plans in a row."""

    def __init__(
        self,
        spark: SparkSession,
        endpoints: Endpoints,
        topic: Topic,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        say: Callable[[str], None] = print,
    ) -> None:
        self.spark, self.endpoints, self.topic, self.now, self.say = spark, endpoints, topic, now, say
        self.s3 = s3 = make_client(endpoints, "s3")
        secrets = make_client(endpoints, "secretsmanager") if endpoints.kafka_secret_arn else None
        self.access = kafka_access(endpoints, secrets)
        self.offsets = Offsets(self.access, topic.kafka_topic)
        self.store = PlanStore(s3, endpoints.bucket, topic.prefix.plan_key())

    def close(self) -> None:
        self.offsets.close()

    def new_plan(self, ceiling: dict[int, int] | None) -> Plan:
        committed, low, high = self.offsets.state()
        if ceiling is not None:
            high = {p: min(h, ceiling.get(p, h)) for p, h in high.items()}
        archive = self.topic.spec.archive
        ranges = plan_ranges(
            committed,
            low,
            high,
            max_records=archive.max_records_per_run,
            accept_data_loss=archive.accept_data_loss,
            topic=self.topic.kafka_topic,
        )
        return Plan(self.topic.kafka_topic, self.now().isoformat(), ranges)

    def run_plan(self, ceiling: dict[int, int] | None = None) -> Summary:
        """Carry out the topic's stored plan, or a new one up to ``ceiling``; then commit and delete the plan."""
        topic = self.topic
        plan, redone = self.store.load_or_create(lambda: self.new_plan(ceiling))
        self.say(
            f"{topic.kafka_topic}: {'redoing stored' if redone else 'new'} plan of {plan.records} records "
            f"{ {p: list(r) for p, r in plan.ranges.items()} } (s3://{self.store.bucket}/{self.store.key})"
        )
        summary = Summary(topic.kafka_topic, plan.ranges, redone_plan=redone)
        if plan.ranges:
            carry_out(self.spark, self.endpoints, topic, plan, summary, access=self.access, say=self.say)
            done = receipt(topic, plan, summary)
            self.s3.put_object(Bucket=self.endpoints.bucket, Key=done.key(topic.prefix), Body=done.to_json().encode())
        with summary.phase("commit"):
            self.offsets.commit(plan.ranges)
            self.store.delete()
        ends = ", ".join(f"{p}: {e}" for p, (_, e) in plan.ranges.items())
        self.say(f"{topic.kafka_topic}: committed offsets {{{ends}}} for group {consumer_group(topic.kafka_topic)}")
        return summary

    def lag(self) -> dict[int, int]:
        """High watermark - committed offset (from the earliest retained offset when none is committed)."""
        committed, low, high = self.offsets.state()
        return {p: max(0, high[p] - (committed.get(p) or low[p])) for p in high}


def archive_topic(
    spark: SparkSession,
    endpoints: Endpoints,
    topic: Topic,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    say: Callable[[str], None] = print,
) -> Summary:
    """Carry out one plan of ``topic``."""
    archiver = TopicArchiver(spark, endpoints, topic, now=now, say=say)
    try:
        return archiver.run_plan()
    finally:
        archiver.close()


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
    """Read the plan's records once, decode them once, write data and quarantine objects, and check every record
    is accounted for."""
    versions = version_schemas(topic, access.registry())
    cached: list[DataFrame] = []
    try:
        with summary.phase("read"):
            raw = read_kafka(spark, access, plan, topic.spec.archive.include_headers)
            classified = classify(raw, topic, versions).persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(classified)
            counts, schema_ids = classification_counts(classified)
        with summary.phase("decode"):
            present = versions_to_decode(topic, versions, schema_ids)
            timed = decode_versions(classified, topic, present, datetime.fromisoformat(plan.created_at), spark)
            timed = {v: frame.persist(StorageLevel.MEMORY_AND_DISK) for v, frame in timed.items()}
            cached += timed.values()
            decode_errors = sum((error_counts(frame) for frame in timed.values()), Counter())
        count_records(counts, decode_errors, topic, summary)
        with summary.phase("write"):
            write_data(endpoints, topic, data_frames(timed, classified, topic), summary, say)
            if summary.quarantine_by_reason:  # nothing to quarantine: no job
                quarantine = write_groups(quarantine_frame(classified, timed), quarantine_spec(endpoints, topic))
                summary.quarantine_objects = [stored_object(r) for r in quarantine.collect()]
                summary.quarantined = sum(o.rows for o in summary.quarantine_objects)
    finally:
        for frame in cached:
            frame.unpersist()
    if not summary.balanced():
        raise RuntimeError(
            f"{topic.kafka_topic}: read {summary.read} != written {summary.written} + quarantined "
            f"{summary.quarantined} + tombstones {summary.tombstones}; nothing committed, the plan stays for a redo"
        )


def write_data(
    endpoints: Endpoints, topic: Topic, data: dict[int, DataFrame], summary: Summary, say: Callable[[str], None]
) -> None:
    """One object per (Kafka partition, hour) and schema version, split by the record bound."""
    archive, prefix = topic.spec.archive, topic.prefix
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
        with_tombstones = topic.spec.tombstones == "keep" and version == max(data)
        written = write_groups(frame, spec, colocated=not with_tombstones).collect()  # a union: not colocated
        rows = sum(r["rows"] for r in written)
        if with_tombstones:  # the delete-log rows are not data rows
            rows -= summary.tombstones
        summary.objects += len(written)
        summary.written += rows
        summary.stored += [stored_object(r) for r in written]
        for row in written:
            key = parse_data_key(row["key"])
            per = summary.per_partition.setdefault(key.kafka_partition, {})
            per["files"] = per.get("files", 0) + 1
            per["written"] = per.get("written", 0) + row["rows"]
            hour = key.partition.start.isoformat()
            summary.latest_hour[key.kafka_partition] = max(hour, summary.latest_hour.get(key.kafka_partition, hour))
        say(
            f"{topic.kafka_topic}: schema_version={version}: {rows} rows in {len(written)} objects under "
            f"s3://{endpoints.bucket}/{prefix.data_prefix()}schema_version={version}/"
        )


def stored_object(row: Row) -> StoredObject:
    return StoredObject(row["key"], row["kafka_partition"], row["first_offset"], row["last_offset"], row["rows"])


def receipt(topic: Topic, plan: Plan, summary: Summary) -> Receipt:
    """How each Kafka partition's records of the plan were accounted for, and the objects written."""
    accounts = {}
    for partition, (start, end) in sorted(plan.ranges.items()):
        per = summary.per_partition.get(partition, {})
        dropped = 0 if topic.spec.tombstones == "keep" else per.get("tombstones", 0)
        stored = sum(o.rows for o in summary.stored if o.kafka_partition == partition)
        accounts[partition] = PartitionAccount(
            start, end, per.get("read", 0), stored, per.get("quarantined", 0), dropped
        )
    return Receipt(plan.kafka_topic, plan.created_at, accounts, summary.stored, summary.quarantine_objects)


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


def count_records(counts: ErrorCounts, decode_errors: ErrorCounts, topic: Topic, summary: Summary) -> None:
    """Records read and tombstones per Kafka partition (from the classification pass), quarantined records per
    reason (classification and decoding errors)."""
    errors = Counter({k: n for k, n in (counts + decode_errors).items() if k[1] not in (None, "tombstone")})
    for (partition, error), n in counts.items():
        per = summary.per_partition.setdefault(partition, {})
        per["read"] = per.get("read", 0) + n
        if error == "tombstone":
            per["tombstones"] = per.get("tombstones", 0) + n
    for (partition, _), n in errors.items():
        per = summary.per_partition[partition]
        per["quarantined"] = per.get("quarantined", 0) + n
    summary.read = sum(counts.values())
    summary.tombstones = sum(n for (_, error), n in counts.items() if error == "tombstone")
    reasons: Counter[str] = Counter()
    for (_, error), n in errors.items():
        reasons[str(error)] += n
    summary.quarantine_by_reason = dict(reasons)


def data_key(prefix: TablePrefix, version: int) -> Callable[[dict[str, Any], int, int], str]:
    def key(group: dict[str, Any], first: int, last: int) -> str:
        partition = Partition(version, date.fromisoformat(group["dt"]), int(group["hour"]))
        return DataKey(prefix, partition, int(group["_kafka_partition"]), first, last).key()

    return key


def quarantine_key(prefix: TablePrefix) -> Callable[[dict[str, Any], int, int], str]:
    def key(group: dict[str, Any], first: int, last: int) -> str:
        return prefix.quarantine_key(date.fromisoformat(group["dt"]), int(group["_kafka_partition"]), first, last)

    return key
