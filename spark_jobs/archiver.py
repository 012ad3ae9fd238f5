"""The archiver for one topic: a durable plan of bounded offset ranges, deterministic Parquet objects, then the
offset commit. ``archive_topic`` carries out one plan; ``catch_up`` carries out plans until the topic reaches the
high watermark seen when it started (``spark_jobs.fleet`` runs many topics at once).

Exactly once: the plan (``spark_jobs.plan``) is stored before anything is written; object keys and bytes depend
only on the plan and Kafka's immutable records, so a redo rewrites the same objects. Offsets (``spark_jobs.offsets``)
are committed only after every object is in S3; then the plan is deleted.

Each plan is one Spark job and one pass over its records: read, classified, decoded (every schema version at
once) and routed by the writer (``spark_jobs.writer``) to data, delete-log and quarantine objects, with the counts
taken on the way. Nothing is cached, sorted or shuffled in Spark.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import StructType

from kafkalake.access import KafkaAccess, kafka_access
from kafkalake.aws import make_client
from kafkalake.catalog import Topic, ValueFormat
from kafkalake.layout import parse_data_key
from kafkalake.receipts import PartitionAccount, Receipt, StoredObject
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.settings import Endpoints
from spark_jobs import transform
from spark_jobs.offsets import Offsets, consumer_group
from spark_jobs.plan import Plan, PlanStore, plan_ranges
from spark_jobs.writer import COUNT, OUTCOME_SCHEMA, QUARANTINE, WAITED, WROTE, PlanLayout, PlanWriter

PHASES = ("plan", "read_decode", "write", "commit")
"""Seconds per phase of a plan: plan (offsets and the stored plan) and commit (receipt, offsets, plan deleted) are
wall time; read_decode (waiting for Spark's Kafka read and decode) and write (splitting, Parquet, uploads) are
summed over the plan's tasks, which run at once: read and decode are one fused Spark stage, so they cannot be
timed apart without a second pass."""
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
    """Seconds per phase (``PHASES``)."""
    redone_plan: bool = False
    seconds: float = 0.0
    """Wall time of the plan, from loading or making it to deleting it."""

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
    """A bounded batch read of exactly the plan's ranges (one Spark partition per Kafka partition).

    The topic's own consumer group, rather than Spark's unique one per query, lets the executors' consumer pool
    (keyed by group and partition) reuse a topic's consumers plan after plan instead of keeping three more idle
    consumers and their fetch buffers per plan (measured: peak memory at a 10x backlog 1,104 → 1,015 MiB). The
    consumers are assigned, never subscribed, and commit nothing: the group sees no members and its committed
    offsets stay ours (``spark_jobs.offsets``)."""
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
        .option("kafka.group.id", consumer_group(topic))
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


def decode(
    classified: DataFrame, topic: Topic, versions: list[transform.VersionSchema], spark: SparkSession
) -> DataFrame:
    """Every version's records decoded in one pass, each into its version's column."""
    if topic.spec.value_format == ValueFormat.AVRO:
        return transform.decode_avro(classified, versions)
    newest = versions[-1]
    return transform.decode_json(classified, newest.version, spark_schema(spark, newest.avro_schema))


def classify(raw: DataFrame, topic: Topic, versions: list[transform.VersionSchema]) -> DataFrame:
    rows = transform.with_metadata(raw)
    if topic.spec.value_format == ValueFormat.AVRO:
        return transform.classify_avro(rows, [v.schema_id for v in versions if v.schema_id is not None])
    return transform.classify_json(rows)


def plan_records(
    raw: DataFrame, topic: Topic, versions: list[transform.VersionSchema], now: datetime, spark: SparkSession
) -> DataFrame:
    """The plan's Kafka records classified, decoded and given their business time, ready for the writer."""
    columns = [transform.value_column(v.version) for v in versions]
    decoded = decode(classify(raw, topic, versions), topic, versions, spark)
    return transform.plan_rows(transform.with_business_time(decoded, topic.spec.time_fields, now, columns), columns)


def plan_layout(endpoints: Endpoints, topic: Topic, versions: list[transform.VersionSchema]) -> PlanLayout:
    archive = topic.spec.archive
    return PlanLayout(
        endpoints,
        topic.prefix,
        tuple((v.version, transform.value_column(v.version)) for v in versions),
        tuple(c for c, wanted in (("_key", archive.include_key), ("_headers", archive.include_headers)) if wanted),
        keep_tombstones=topic.spec.tombstones == "keep",
        max_records_per_file=archive.max_records_per_file,
        compression=archive.compression,
    )


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
        topic, started = self.topic, time.monotonic()
        plan, redone = self.store.load_or_create(lambda: self.new_plan(ceiling))
        summary = Summary(
            topic.kafka_topic, plan.ranges, redone_plan=redone, timings={"plan": time.monotonic() - started}
        )
        self.say(
            f"{topic.kafka_topic}: {'redoing stored' if redone else 'new'} plan of {plan.records} records "
            f"{ {p: list(r) for p, r in plan.ranges.items()} } (s3://{self.store.bucket}/{self.store.key})"
        )
        if plan.ranges:
            carry_out(self.spark, self.endpoints, topic, plan, summary, access=self.access, say=self.say)
        with summary.phase("commit"):
            if plan.ranges:
                done = receipt(topic, plan, summary)
                key, body = done.key(topic.prefix), done.to_json().encode()
                self.s3.put_object(Bucket=self.endpoints.bucket, Key=key, Body=body)
            self.offsets.commit(plan.ranges)
            self.store.delete()
        ends = ", ".join(f"{p}: {e}" for p, (_, e) in plan.ranges.items())
        self.say(f"{topic.kafka_topic}: committed offsets {{{ends}}} for group {consumer_group(topic.kafka_topic)}")
        summary.seconds = time.monotonic() - started
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
    """One Spark job: read the plan's records, decode them, write data and quarantine objects; then check every
    record is accounted for."""
    versions = version_schemas(topic, access.registry())
    raw = read_kafka(spark, access, plan, topic.spec.archive.include_headers)
    records = plan_records(raw, topic, versions, datetime.fromisoformat(plan.created_at), spark)
    outcome = records.mapInArrow(PlanWriter(plan_layout(endpoints, topic, versions)), OUTCOME_SCHEMA).collect()
    per_version = account(outcome, topic, summary)
    for version, (rows, objects) in sorted(per_version.items()):
        say(
            f"{topic.kafka_topic}: schema_version={version}: {rows} rows in {objects} objects under "
            f"s3://{endpoints.bucket}/{topic.prefix.data_prefix()}schema_version={version}/"
        )
    if not summary.balanced():
        raise RuntimeError(
            f"{topic.kafka_topic}: read {summary.read} != written {summary.written} + quarantined "
            f"{summary.quarantined} + tombstones {summary.tombstones}; nothing committed, the plan stays for a redo"
        )


def account(outcome: list[Row], topic: Topic, summary: Summary) -> dict[int, tuple[int, int]]:
    """The writer's outcome rows → the summary: objects, counts per Kafka partition and reason, task timings.
    Returns schema version → (rows, objects) written."""
    reasons: Counter[str] = Counter()
    per_version: dict[int, tuple[int, int]] = {}
    for row in outcome:
        kind, partition, rows = row["kind"], row["kafka_partition"], row["rows"]
        if kind in (WAITED, WROTE):
            phase = "read_decode" if kind == WAITED else "write"
            summary.timings[phase] = summary.timings.get(phase, 0.0) + row["seconds"]
            continue
        per = summary.per_partition.setdefault(partition, {})
        if kind == COUNT:
            add(per, "read", rows)
            summary.read += rows
            if row["error"] == transform.TOMBSTONE:
                add(per, "tombstones", rows)
                summary.tombstones += rows
            elif row["error"] is not None:
                add(per, "quarantined", rows)
                reasons[row["error"]] += rows
        elif kind == QUARANTINE:
            summary.quarantine_objects.append(stored_object(row))
        else:
            stored = stored_object(row)
            summary.stored.append(stored)
            add(per, "files", 1)
            add(per, "written", rows)
            written = parse_data_key(stored.key).partition
            hour = written.start.isoformat()
            summary.latest_hour[partition] = max(hour, summary.latest_hour.get(partition, hour))
            version_rows, version_objects = per_version.get(written.schema_version, (0, 0))
            per_version[written.schema_version] = (version_rows + rows, version_objects + 1)
    summary.objects = len(summary.stored)
    summary.quarantine_by_reason = dict(reasons)
    summary.quarantined = sum(o.rows for o in summary.quarantine_objects)
    kept = summary.tombstones if topic.spec.tombstones == "keep" else 0  # delete-log rows are not data rows
    summary.written = sum(o.rows for o in summary.stored) - kept
    return per_version


def add(counts: dict[str, int], name: str, n: int) -> None:
    counts[name] = counts.get(name, 0) + n


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
