"""A pass's records as Spark reads them: one bounded Kafka read of exactly its plans' ranges (one plan per topic: a
heavy topic's plan alone, by Spark's Kafka source, or many light topics' plans, ``spark_jobs.archiver.light``, with
one consumer per task, ``spark_jobs.archiver.task_reader``), classified (a value's header compared with each known
schema's header as bytes), decoded (every schema version of every plan at once, each distinct decoding into its own
column, ``pass_columns``), given their business time and their personal fields protected, ready for the writer. One
fused Spark stage; the pure column transforms are in ``spark_jobs.archiver.transform`` and
``spark_jobs.archiver.pseudonyms``."""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DataType, StructType, _parse_datatype_json_string

from kafkalake.json_schema import JsonSchemaError
from kafkalake.kafka_access import KafkaAccess
from kafkalake.naming import SHARED_READ_GROUP, consumer_group
from kafkalake.personal import HEADERS_COLUMN, KAFKA_KEY_COLUMN, PseudonymKey, kafka_hashed, schema_personal_fields
from kafkalake.protobuf_schema import ProtobufSchemaError
from kafkalake.registry import RegisteredSchema, RegistryClient, RegistryError, key_subject, value_subject
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import StoredAs, ValueFormat
from kafkalake.undeclared import protection
from spark_jobs.archiver import transform
from spark_jobs.archiver.plan import Plan
from spark_jobs.archiver.pseudonyms import pseudonymise
from spark_jobs.archiver.task_reader import read_ranges

FETCH_MAX_WAIT_MS = 20
"""How long a fetch waits for data the broker does not have yet. The plan's ranges end at or below the high
watermark, so only the consumer's read-ahead past a range's end waits: with Kafka's default (500 ms) every Kafka
partition of every plan paid half a second (measured locally: 1.28 s → 0.25 s to read 2,000 records in 3
partitions)."""


class SubjectMissing(RuntimeError):
    """A registry format's topic has records but its value subject has no schema in the registry."""


class FormatMismatch(RuntimeError):
    """The registry's schemas of a topic are of another format than its catalog file says."""


_FORMATS = {f.schema_type: f.value for f in ValueFormat if f.schema_type}


@dataclass(frozen=True)
class PassMember:
    """One plan of a pass: its topic, the plan, and the schema versions its records may hold."""

    topic: Topic
    plan: Plan
    versions: tuple[transform.VersionSchema, ...]
    key_versions: tuple[transform.VersionSchema, ...] = ()
    """A ``key_format`` topic's key versions (``key_versions``); its plan is then a pass of its own."""


def pass_records(
    spark: SparkSession,
    access: KafkaAccess,
    members: Sequence[PassMember],
    *,
    key: PseudonymKey | None = None,
    light: bool = False,
) -> DataFrame:
    """The pass's Kafka records as ``prepared`` makes them: read by Spark's Kafka source (a plan alone,
    ``read_kafka``), or with one consumer per task (a ``light`` pass, ``task_reader.read_ranges``)."""
    headers = any(HEADERS_COLUMN in m.topic.kafka_columns for m in members)
    plans = [m.plan for m in members]
    if light:
        raw = read_ranges(spark, light_read_config(access), plans, headers)
    else:
        (plan,) = plans
        raw = read_kafka(spark, access, plan, headers)
    return prepared(raw, members, key=key)


def light_read_config(access: KafkaAccess) -> dict[str, Any]:
    """librdkafka's settings for a light pass's reader (``task_reader``): the access's, with ``SHARED_READ_GROUP``
    and ``FETCH_MAX_WAIT_MS``, as ``read_kafka`` gives Spark's source its own."""
    return {**access.client_config(), "group.id": SHARED_READ_GROUP, "fetch.wait.max.ms": FETCH_MAX_WAIT_MS}


def pass_columns(members: Sequence[PassMember]) -> list[dict[int, str]]:
    """Per member, its versions' value columns (version → column): one column per distinct decoding in the pass (the
    value format, the schema, its personal fields, whether it is held), so light topics of one schema share one."""
    columns: dict[Hashable, str] = {}
    found = []
    for member in members:
        fmt = member.topic.spec.value_format
        found.append(
            {
                v.version: columns.setdefault(
                    (fmt, v.avro_schema, v.decoding, tuple(sorted(v.personal.items())), v.held is not None),
                    transform.value_column(len(columns) + 1),
                )
                for v in member.versions
            }
        )
    return found


def prepared(raw: DataFrame, members: Sequence[PassMember], *, key: PseudonymKey | None) -> DataFrame:
    """Kafka's rows (as the Kafka source gives them) classified, decoded, given their business time (each plan's
    creation is the 'now' of its time bounds, so a redo decides the same) and their personal fields protected with
    ``key``, each version's own (``VersionSchema.personal``); a held version's records quarantined
    (``VersionSchema.held``). The Kafka key and headers a topic's archive hashes (``archive.key``,
    ``archive.headers``: hmac; the same for every plan of a pass) are hashed in every row, so the quarantine holds no
    clear key either; a ``by_key`` topic's tombstones keep theirs in ``TOMBSTONE_KEY_COLUMN`` for the writer to
    digest under every key."""
    columns, count, spark = pass_columns(members), len(members), raw.sparkSession
    decodings = [_decoding(m, mine, spark) for m, mine in zip(members, columns, strict=True)]
    rows = transform.with_metadata(raw, [m.plan.kafka_topic for m in members])
    decoded = transform.decode(transform.classify(rows, decodings), decodings)
    keyed = [m for m in members if m.key_versions]
    if keyed and count > 1:
        raise ValueError(f"a key_format topic's plan is a pass of its own: {[m.topic.kafka_topic for m in keyed]}")
    if keyed:
        decoded = transform.with_decoded_key(decoded, *_key_decoding(keyed[0], spark))
    timings = [
        transform.Timing(m.topic.spec.time_fields, datetime.fromisoformat(m.plan.created_at), d.value_columns)
        for m, d in zip(members, decodings, strict=True)
    ]
    timed = transform.with_business_time(decoded, timings)
    by_key = [i for i, m in enumerate(members) if m.topic.spec.erasure == "by_key"]
    if by_key:
        timed = transform.with_tombstone_key(timed, by_key, count)
    personal = {mine[v.version]: v.personal for m, mine in zip(members, columns, strict=True) for v in m.versions}
    if keyed:
        personal[transform.DECODED_KEY_COLUMN] = {p: a for v in keyed[0].key_versions for p, a in v.personal.items()}
    hashed = {hashed_kafka_columns(m.topic) for m in members}
    if len(hashed) > 1:
        raise ValueError(f"the plans of one pass must hash the same Kafka columns (a hashed one is text): {hashed}")
    kafka = {column: kafka_hashed(column) for column in next(iter(hashed), ())}
    held = {mine[v.version] for m, mine in zip(members, columns, strict=True) for v in m.versions if v.held}
    protected = {c: p for c, p in personal.items() if c not in held}
    value_columns = list(dict.fromkeys(c for mine in columns for c in mine.values()))
    keyless = [i for i, m in enumerate(members) if not keeps_key(m.topic)]
    return transform.plan_rows(
        pseudonymise(timed, {**protected, **kafka}, key),
        value_columns,
        keyless,
        members=count,
        kafka_time=transform.kafka_time_only(decoded, timings),
    )


def keeps_key(topic: Topic) -> bool:
    """Whether the topic's data objects hold its records' Kafka keys: it archives them (``archive.key``), or keeps
    its tombstones, whose delete-log rows carry the key beside the data rows (``writer.data_rows``)."""
    return KAFKA_KEY_COLUMN in topic.kafka_columns or topic.keeps_tombstones


def hashed_kafka_columns(topic: Topic) -> tuple[str, ...]:
    """The Kafka columns (key, headers) the topic's archive hashes: a hashed column holds text, a clear one bytes, so
    only plans that hash the same ones share a pass."""
    return tuple(sorted(column for column, how in topic.kafka_columns.items() if how == StoredAs.HMAC))


def _decoding(member: PassMember, columns: dict[int, str], spark: SparkSession) -> transform.Decoding:
    versions = tuple((v, columns[v.version]) for v in member.versions)
    fmt = member.topic.spec.value_format
    if fmt == ValueFormat.AVRO:
        return transform.Decoding(fmt, versions)
    if fmt in transform.REGISTRY_FORMATS:
        structs = {v.version: spark_schema(spark, v.avro_schema) for v in member.versions if v.held is None}
        return transform.Decoding(fmt, versions, structs=structs)
    return transform.Decoding(fmt, versions[-1:], spark_schema(spark, member.versions[-1].avro_schema))


def _key_decoding(member: PassMember, spark: SparkSession) -> tuple[transform.Decoding, DataType]:
    """How a ``key_format`` topic's keys are decoded, each version into its ``transform.key_column``, and the type
    of the table's ``_key`` (the newest version's)."""
    fmt = member.topic.spec.key_format
    assert fmt is not None
    versions = tuple((v, transform.key_column(v.version)) for v in member.key_versions)
    structs = {v.version: spark_schema(spark, v.avro_schema) for v in member.key_versions if fmt != ValueFormat.AVRO}
    return transform.Decoding(fmt, versions, structs=structs), spark_type(spark, member.key_versions[-1].avro_schema)


def read_kafka(spark: SparkSession, access: KafkaAccess, plan: Plan, include_headers: bool) -> DataFrame:
    """A bounded batch read of exactly the plan's ranges by Spark's Kafka source (one Spark partition per Kafka
    partition).

    It reads with the topic's own consumer group, rather than Spark's unique one per query, so the executors'
    consumer pool (keyed by group and partition) reuses a topic's consumers plan after plan instead of keeping three
    more idle consumers and their fetch buffers per plan (measured: peak memory at a 10x backlog 1,104 → 1,015 MiB).
    The consumers are assigned, never subscribed, and commit nothing: the group sees no members and its committed
    offsets stay ours (``spark_jobs.archiver.offsets``). Their metrics stay off JMX (nothing reads them there):
    registering each one's MBeans cost the JVM about 1-3 ms of CPU a consumer (measured, 180 consumers created,
    assigned and polled: 1.56-2.57 CPU-s with the reporter, 1.15-1.92 s without)."""
    starting = {plan.kafka_topic: {str(x): start for x, (start, _) in plan.ranges.items()}}
    ending = {plan.kafka_topic: {str(x): end for x, (_, end) in plan.ranges.items()}}
    return (
        spark.read.format("kafka")
        .options(**access.spark_options())
        .option("assign", json.dumps({plan.kafka_topic: sorted(plan.ranges)}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", str(include_headers).lower())
        .option("failOnDataLoss", "true")
        .option("kafka.fetch.max.wait.ms", str(FETCH_MAX_WAIT_MS))
        .option("kafka.group.id", consumer_group(plan.kafka_topic))
        .option("kafka.auto.include.jmx.reporter", "false")
        .load()
    )


def version_schemas(topic: Topic, registry: RegistryClient, key_at_hand: bool) -> list[transform.VersionSchema]:
    """Avro, Protobuf, JSON Schema: every registered version of the topic's value subject (the registry's version
    number is the layout's schema_version), its columns rendered (``kafkalake.registered_formats``), with its personal
    fields, and held when the catalog lacks it and it is not vetted (``kafkalake.undeclared``; ``key_at_hand``: the
    run has the pseudonym key). JSON: the catalog's newest schema."""
    if topic.spec.value_format == ValueFormat.JSON:
        return [transform.VersionSchema(len(topic.schemas), None, topic.schemas[-1], topic.personal_fields)]
    versions = []
    for found in _registered(topic, registry, value_subject(topic.kafka_topic), topic.spec.value_format, "value"):
        rule = protection(topic, found.schema)
        held = rule.held(key_at_hand)
        versions.append(
            transform.VersionSchema(found.version, found.schema_id, found.schema, rule.personal, held, found.decoding)
        )
    return versions


def key_versions(topic: Topic, registry: RegistryClient) -> list[transform.VersionSchema]:
    """A ``key_format`` topic's key versions: every registered version of its key subject, its columns rendered,
    with the personal fields the registry tags in it (hashed or masked in ``_key`` as in a value); none without
    ``key_format``."""
    if topic.spec.key_format is None:
        return []
    return [
        transform.VersionSchema(
            found.version,
            found.schema_id,
            found.schema,
            schema_personal_fields(json.loads(found.schema)),
            decoding=found.decoding,
        )
        for found in _registered(topic, registry, key_subject(topic.kafka_topic), topic.spec.key_format, "key")
    ]


def _registered(
    topic: Topic, registry: RegistryClient, subject: str, fmt: ValueFormat, part: str
) -> list[RegisteredSchema]:
    """Every version of ``subject`` (the topic's ``part``: value or key, written as ``fmt``), checked to be of that
    format; ``SubjectMissing`` when there is none, ``RegistryError`` when the registry cannot say or a schema cannot
    be a table's columns, ``FormatMismatch`` for another format's."""
    setting = f"{part}_format"
    try:
        registered = registry.versions(subject, topic.spec.message if part == "value" else None)
    except (ProtobufSchemaError, JsonSchemaError) as exc:
        raise RegistryError(
            f"topic {topic.kafka_topic}: a schema of subject {subject!r} at {registry.url} cannot be the table's "
            f"columns, so the plan's records cannot be decoded; the plan stays stored for the next run. {exc}"
        ) from exc
    except RegistryError as exc:
        raise RegistryError(
            f"topic {topic.kafka_topic}: cannot read the schema versions of subject {subject!r} from the registry "
            f"at {registry.url}, so the plan's records cannot be decoded; the plan stays stored for the next run. "
            f"{exc}"
        ) from exc
    for found in registered:
        if found.schema_type != fmt.schema_type:
            raise FormatMismatch(
                f"topic {topic.kafka_topic}: subject {subject!r} holds {found.schema_type} schemas (version "
                f"{found.version}), and {topic.source} says {setting}: {fmt}; set "
                f"{setting}: {_FORMATS.get(found.schema_type, 'avro')} there"
            )
    if not registered:
        fix = (
            f"or set value_format: json in {topic.source} if the topic carries JSON"
            if part == "value"
            else f"or remove key_format from {topic.source} to keep the keys as bytes"
        )
        raise SubjectMissing(
            f"topic {topic.kafka_topic}: the registry at {registry.url} has no schema under subject {subject!r}, "
            f"so no record can be decoded. Register the topic's {part} schema there (TopicNameStrategy), {fix}."
        )
    return registered


def spark_schema(spark: SparkSession, avro_schema: str) -> StructType:
    """The Spark struct spark-avro maps an Avro record schema to (the same mapping ``from_avro`` uses)."""
    found = spark_type(spark, avro_schema)
    if not isinstance(found, StructType):
        raise ValueError(f"not an Avro record schema: {avro_schema[:80]}")
    return found


def spark_type(spark: SparkSession, avro_schema: str) -> DataType:
    """The Spark type spark-avro maps an Avro schema to: a struct for a record, a string for ``"string"``..."""
    jvm: Any = spark.sparkContext._jvm
    parsed = jvm.org.apache.avro.Schema.Parser().parse(avro_schema)
    converted = jvm.org.apache.spark.sql.avro.SchemaConverters.toSqlType(parsed).dataType().json()
    return _parse_datatype_json_string(converted)
