"""The archiver's transformations: DataFrame in, DataFrame out, no I/O.

Raw Kafka rows (``key, value, partition, offset, timestamp``) are classified, decoded per schema version,
given a business time and split into data rows and quarantine rows. A pass reads many plans at once
(``spark_jobs.archiver.records``): each row carries its plan's place in the pass (``MEMBER_COLUMN``), and what differs
between plans (their schema ids, time fields, bounds) is chosen per row by it (``by_member``).

Past 400 lines on purpose: the steps share the pass's per-member choice and its build-once rule for expressions
(measured: a Py4J call per ``pyspark.sql.functions`` call on the driver), which split modules would each repeat.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import BooleanType, DataType, StructType

from kafkalake.iceberg import TIME_COLUMN
from kafkalake.personal import HEADERS_COLUMN, KAFKA_KEY_COLUMN, KEY_ID_COLUMN, PiiAction
from kafkalake.registered_formats import JsonSchemaDecoding, ProtobufDecoding
from kafkalake.topic_spec import TimeCandidate, TimeFormat, ValueFormat
from kafkalake.undeclared import UNDECLARED_VERSION
from kafkalake.wire import HEADER, HEADER_SIZE, MAGIC_BYTE, SCHEMA_ID_BYTES
from spark_jobs.archiver.json_schema_check import violations as json_violations
from spark_jobs.protobuf_decoder import nullable, protobuf_value

EPOCH_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
MAX_EPOCH_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z: beyond it the declared unit must be wrong
UNREPRESENTABLE = datetime(1, 1, 1, tzinfo=UTC)
"""Stands for a number no timestamp can hold under its declared unit: always out of bounds, so quarantined."""
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
_ISO_DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
_ISO_TIME = r"[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?"
_ISO_ZONE = r" ?(Z|[+-][0-9]{2}(:?[0-9]{2})?|(UTC|GMT|UT)([+-][0-9]{1,2}(:?[0-9]{2})?)?|[A-Za-z]+(/[A-Za-z0-9_+-]+)+)"
ISO_ZONED = f"^{_ISO_DATE}{_ISO_TIME}{_ISO_ZONE}$"
"""An ISO 8601 date and time with a zone Spark reads as written: ``Z``, an offset, UTC/GMT/UT or a tz database name."""
ISO_NAIVE = f"^{_ISO_DATE}({_ISO_TIME})?$"
"""An ISO 8601 date, with or without a time of day, that names no zone: a wall time in the default zone."""
ISO_WITHOUT_SECONDS = f"^({_ISO_DATE}[T ][0-9]{{2}}:[0-9]{{2}})([^:0-9].*)?$"
"""A time of day in minutes, which Spark parses only when no zone follows: given ``:00`` seconds."""
TOMBSTONE = "tombstone"
"""The ``_error`` of a record without a value: not an error, dropped or kept as a delete-log row."""
TOMBSTONE_KEY_COLUMN = "_tombstone_key"
"""A ``by_key`` topic's tombstone's Kafka key in clear (null on every other row), taken before ``_key`` is hashed:
the writer digests it under every pseudonym key for the plan's erasure request and writes it to no object."""
META_COLUMNS = ("_kafka_partition", "_kafka_offset", "_kafka_timestamp")
QUARANTINE_COLUMNS = (
    "_kafka_partition",
    "_kafka_offset",
    "_kafka_timestamp",
    KAFKA_KEY_COLUMN,
    "_raw_value",
    "_schema_id",
    "_error",
)
RAW_COLUMNS = (KAFKA_KEY_COLUMN, "_raw_value")
"""The quarantine's copies of the record itself; an offsets-only quarantine object has every column but these."""
PERMISSIVE = {"mode": "PERMISSIVE"}
TIME_SOURCE_COLUMN = "_time_source"
"""Where a row's business time (``kafkalake.iceberg.TIME_COLUMN``) came from: a candidate's path, or
``KAFKA_TIME_SOURCE``."""
TIME_COLUMNS = (TIME_COLUMN, TIME_SOURCE_COLUMN)
KAFKA_TIME_SOURCE = "kafka_timestamp"
"""The ``_time_source`` of a row whose business time is its Kafka time."""
DECODED_KEY_COLUMN = "_decoded_key"
"""A ``key_format`` topic's Kafka key decoded (``with_decoded_key``): what its data rows keep as ``_key``; its
quarantined rows keep ``_key``'s bytes."""
MEMBER_COLUMN = "_member"
"""The place, in its pass, of the plan a row belongs to (0 in a pass of one plan)."""

Choice = tuple[Column, Sequence[int]]
"""An expression and the members of the pass whose rows it applies to."""


def grouped(members: Mapping[int, tuple[Hashable, Column]]) -> list[Choice]:
    """Members whose expressions have the same key (what the expression was built from) share one choice."""
    found: dict[Hashable, tuple[Column, list[int]]] = {}
    for member, (key, expression) in members.items():
        found.setdefault(key, (expression, []))[1].append(member)
    return list(found.values())


def by_member(choices: Sequence[Choice], members: int) -> Column:
    """Each row's own choice (by ``MEMBER_COLUMN``), null on rows of members none names; one choice naming every one
    of the pass's ``members`` needs no test."""
    chosen: Column | None = None
    member = F.col(MEMBER_COLUMN)
    for expression, which in choices:
        if len(set(which)) == members:
            return expression
        test = member == F.lit(which[0]) if len(which) == 1 else member.isin(*which)
        chosen = F.when(test, expression) if chosen is None else chosen.when(test, expression)
    return chosen if chosen is not None else F.lit(None)


@dataclass(frozen=True)
class VersionSchema:
    version: int
    schema_id: int | None
    """The registry id (Avro, Protobuf, JSON Schema); None for JSON topics."""
    avro_schema: str
    """The version's columns as an Avro schema (``kafkalake.registry.RegisteredSchema.schema``)."""
    personal: Mapping[str, PiiAction] = field(default_factory=dict)
    """The personal fields protected in the version's records (``kafkalake.undeclared.protection``)."""
    held: str | None = None
    """Why the version's records are held in the restricted quarantine (``UNDECLARED_VERSION``), or None."""
    decoding: ProtobufDecoding | JsonSchemaDecoding | None = None
    """Protobuf and JSON Schema: what decodes the version's records (``kafkalake.registered_formats``)."""

    @property
    def index(self) -> bytes:
        """What follows the schema id in the version's frame before the payload: a Protobuf message's index."""
        return self.decoding.index if isinstance(self.decoding, ProtobufDecoding) else b""


def with_metadata(raw: DataFrame, kafka_topics: Sequence[str] = ()) -> DataFrame:
    """Kafka columns renamed to the metadata columns every output row carries, and ``MEMBER_COLUMN``: the place of
    the row's Kafka topic in ``kafka_topics`` (a pass's members, one plan per topic; 0 for a pass of one)."""
    member = (
        F.element_at(F.create_map(*[F.lit(x) for i, t in enumerate(kafka_topics) for x in (t, i)]), F.col("topic"))
        if len(kafka_topics) > 1
        else F.lit(0)
    )
    return raw.select(
        member.alias(MEMBER_COLUMN),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").alias(KAFKA_KEY_COLUMN),
        F.col("value").alias("_raw_value"),
        *([F.col("headers").alias(HEADERS_COLUMN)] if "headers" in raw.columns else []),
    )


@dataclass(frozen=True)
class Decoding:
    """How one member of a pass decodes its values: its format and, per schema version, the value column its values
    go to (``value_column``; members that decode a version alike share it)."""

    value_format: ValueFormat
    versions: tuple[tuple[VersionSchema, str], ...]
    json_schema: StructType | None = None
    """JSON: the Spark struct of the catalog's newest schema (``records.spark_schema``)."""
    structs: Mapping[int, StructType] = field(default_factory=dict)
    """Protobuf and JSON Schema: each version's Spark struct (its rendering's, ``records.spark_schema``)."""

    @property
    def value_columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(column for _, column in self.versions))


def framed_classification(
    known: Sequence[tuple[int, bytes]], held_ids: Sequence[int] = (), others: Sequence[tuple[int, bytes]] = ()
) -> dict[str, Column]:
    """``_schema_id`` and ``_error`` of Confluent-framed values (Avro, Protobuf, JSON Schema): null, tombstone,
    truncated, bad_magic_byte, unknown_schema_id, ``UNDECLARED_VERSION`` for a value of a schema in ``held_ids`` (a
    version the catalog lacks whose records are held, ``kafkalake.undeclared``), and for Protobuf
    ``other_message_type`` (the index names another message of the file than the table's: ``others``) or
    ``unknown_message_index`` (it names none).

    ``known``: each version's schema id and what follows it before the payload (a Protobuf message's index; nothing
    for the others). A value's start is compared with each known frame as bytes, in place (``startswith``: a copy of
    each value's header cost ~4% of the Spark side's CPU, measured); only a header that matches none is parsed into
    its schema id (for the quarantine)."""
    value = F.col("_raw_value")
    frame = [F.when(F.startswith(value, F.lit(bytearray(HEADER.pack(MAGIC_BYTE, i) + x))), F.lit(i)) for i, x in known]
    matched = F.coalesce(*frame) if frame else F.lit(None).cast("long")
    parsed = F.conv(F.hex(F.substring(value, 2, SCHEMA_ID_BYTES)), 16, 10).cast("long")
    error = (
        F.when(value.isNull(), F.lit(TOMBSTONE))
        .when(F.length(value) < HEADER_SIZE, F.lit("truncated"))
        .when(~F.startswith(value, F.lit(bytearray([MAGIC_BYTE]))), F.lit("bad_magic_byte"))
        .when(matched.isNull() & ~parsed.isin(*[i for i, _ in known]), F.lit("unknown_schema_id"))
    )
    if others:
        other = [F.startswith(value, F.lit(bytearray(HEADER.pack(MAGIC_BYTE, i) + x))) for i, x in others]
        error = error.when(matched.isNull() & functools.reduce(operator.or_, other), F.lit("other_message_type"))
    if any(x for _, x in known):
        error = error.when(matched.isNull(), F.lit("unknown_message_index"))
    error = error.when(matched.isin(*held_ids), F.lit(UNDECLARED_VERSION))
    schema_id = F.when(F.length(value) >= HEADER_SIZE, F.coalesce(matched.cast("long"), parsed))
    return {"_schema_id": schema_id, "_error": error}


def classify(rows: DataFrame, members: Sequence[Decoding]) -> DataFrame:
    """Add ``_schema_id`` and ``_error`` to each row as its member's format says: a registry format's by its frame
    against the member's versions (``framed_classification``), JSON only tombstones (its schema id null). Each
    distinct classification is built once, not once per member: every ``pyspark.sql.functions`` call is a few Py4J
    round trips, and on the JVM a class lookup through every jar that fails before the one that finds it."""
    found: dict[int, tuple[Hashable, dict[str, Column]]] = {}
    made: dict[Hashable, dict[str, Column]] = {}
    for index, member in enumerate(members):
        if member.value_format in REGISTRY_FORMATS:
            versions = [v for v, _ in member.versions if v.schema_id is not None]
            known = tuple((v.schema_id, v.index) for v in versions if v.schema_id is not None)
            held = tuple(v.schema_id for v in versions if v.held is not None and v.schema_id is not None)
            others = tuple(
                (v.schema_id, x)
                for v in versions
                if isinstance(v.decoding, ProtobufDecoding) and v.schema_id is not None
                for x in v.decoding.others
            )
            key: Hashable = (known, held, others)
            if key not in made:
                made[key] = framed_classification(known, held, others)
        else:
            key = "json"
            if key not in made:
                made[key] = {
                    "_schema_id": F.lit(None).cast("long"),
                    "_error": F.when(F.col("_raw_value").isNull(), F.lit(TOMBSTONE)),
                }
        found[index] = (key, made[key])
    return rows.withColumns(
        {
            name: by_member(grouped({m: (key, columns[name]) for m, (key, columns) in found.items()}), len(members))
            for name in ("_schema_id", "_error")
        }
    )


def value_column(number: int) -> str:
    """The column holding one decoding's values in a pass (null on every other row): one per distinct schema, its
    personal fields and whether it is held (``records.pass_decodings``)."""
    return f"_value_v{number}"


def decode(rows: DataFrame, members: Sequence[Decoding]) -> DataFrame:
    """Every member's records decoded in one pass, each version's into its value column, with
    ``_schema_version``; a payload its version cannot decode becomes ``corrupt_avro``, ``corrupt_protobuf``,
    ``bad_json`` or (refused by its JSON Schema) ``json_schema_invalid: <where>: <rule>``.

    spark-avro's PERMISSIVE mode gives a corrupt payload a struct of nulls, not a null: a decode failed when a
    field the schema requires (not a union with null) is null. A schema without required fields cannot tell a
    corrupt payload from a record whose fields are all null. The Protobuf decoder gives a payload that does not parse
    a null."""
    good, schema_id = F.col("_error").isNull(), F.col("_schema_id")
    users: dict[str, tuple[Column, list[int]]] = {}
    versions: dict[int, tuple[Hashable, Column]] = {}
    failed: dict[int, tuple[Hashable, Column]] = {}
    built: dict[Hashable, Column] = {}

    def once(key: Hashable, build: Callable[[], Column]) -> Column:
        """Members whose expressions have the same key share one, built once (``classify``)."""
        if key not in built:
            built[key] = build()
        return built[key]

    for index, member in enumerate(members):
        if member.value_format in REGISTRY_FORMATS:
            _framed_columns(member, index, users)
            pairs = tuple((v.schema_id, v.version) for v, _ in member.versions)
            versions[index] = (pairs, once(pairs, functools.partial(_version_of, schema_id, pairs)))
            key: Hashable = (member.value_format, tuple((v.schema_id, column) for v, column in member.versions))
            failed[index] = (key, once(key, functools.partial(_undecodable, member, good)))
        else:
            v, column = member.versions[-1]
            parsed = f"_parsed{column}"
            if parsed not in users:
                with_corrupt = StructType([*(member.json_schema or StructType()).fields])
                with_corrupt = with_corrupt.add("_corrupt_record", "string")
                options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
                as_json = F.when(good, F.from_json(F.col("_raw_value").cast("string"), with_corrupt, options))
                users[parsed] = (as_json, [])
            users[parsed][1].append(index)
            versions[index] = (("json", v.version), once(("json", v.version), functools.partial(F.lit, v.version)))
            key = ("json", parsed)
            failed[index] = (key, once(key, functools.partial(_bad_json, parsed, good)))
    count = len(members)
    decoded = rows.withColumns({column: by_member([choice], count) for column, choice in users.items()})
    parsed_columns = [c for c in users if c.startswith("_parsed")]
    error = F.coalesce(by_member(grouped(failed), count), F.col("_error"))
    return decoded.withColumns(
        {
            "_schema_version": by_member(grouped(versions), count).cast("int"),
            "_error": error,
            **{
                c.removeprefix("_parsed"): F.when(error.isNull(), F.col(c).dropFields("_corrupt_record"))
                for c in parsed_columns
            },
        }
    ).drop(*parsed_columns, *[c for c in users if c.startswith("_refused")])


def _framed_columns(member: Decoding, index: int, users: dict[str, tuple[Column, list[int]]]) -> None:
    """The value column of each version of a registry format's ``member`` (the pass's ``index``-th) in ``users``;
    JSON Schema's parsed (``_parsed``: with ``_corrupt_record``) and its schema's verdict (``_refused``). The first
    member's decoding of a column serves every member's."""
    good, schema_id = F.col("_error").isNull(), F.col("_schema_id")
    for v, column in member.versions:
        name = column if member.value_format != ValueFormat.JSON_SCHEMA else f"_parsed{column}"
        if name not in users:
            mine = good & (schema_id == F.lit(v.schema_id))
            users[name] = (F.when(mine, _framed_value(member, v)), [])
            if isinstance(v.decoding, JsonSchemaDecoding):
                users[f"_refused{column}"] = (json_violations(F.when(mine, _payload(v)), v.decoding), [])
        users[name][1].append(index)
        if member.value_format == ValueFormat.JSON_SCHEMA:
            users[f"_refused{column}"][1].append(index)


REGISTRY_FORMATS = frozenset({ValueFormat.AVRO, ValueFormat.PROTOBUF, ValueFormat.JSON_SCHEMA})
"""The formats whose values are Confluent-framed, their schemas in the registry."""


def _payload(v: VersionSchema) -> Column:
    """The bytes of a value of version ``v`` after its frame (the header and, for Protobuf, the message index)."""
    start = HEADER_SIZE + len(v.index)
    return F.expr(f"substring(_raw_value, {start + 1}, length(_raw_value) - {start})")


def _framed_value(member: Decoding, v: VersionSchema) -> Column:
    """A value of version ``v`` decoded into its struct (JSON Schema: with ``_corrupt_record``)."""
    if isinstance(v.decoding, ProtobufDecoding):
        return protobuf_value(_payload(v), v.decoding.descriptor_set, v.decoding.message, member.structs[v.version])
    if isinstance(v.decoding, JsonSchemaDecoding):
        with_corrupt = StructType([*member.structs[v.version].fields]).add("_corrupt_record", "string")
        options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"}
        return F.from_json(_payload(v).cast("string"), with_corrupt, options)
    return from_avro(_payload(v), v.avro_schema, PERMISSIVE)


def _version_of(schema_id: Column, pairs: Sequence[tuple[int | None, int]]) -> Column:
    """The schema version of a row's schema id, of a member's (schema id, version) ``pairs``."""
    return F.coalesce(*[F.when(schema_id == F.lit(i), F.lit(n)) for i, n in pairs])


def _undecodable(member: Decoding, good: Column) -> Column:
    """Why a good row of ``member`` its version could not decode (null when it could)."""
    if member.value_format == ValueFormat.PROTOBUF:
        corrupt = [F.col(column).isNull() for _, column in member.versions]
        return F.when(functools.reduce(operator.and_, corrupt, good), F.lit("corrupt_protobuf"))
    if member.value_format == ValueFormat.JSON_SCHEMA:
        mine = F.col("_schema_id")
        reasons = [
            F.when(mine == F.lit(v.schema_id), F.coalesce(F.col(f"_refused{c}"), _bad_json(f"_parsed{c}", F.lit(True))))
            for v, c in member.versions
        ]
        return F.when(good, F.coalesce(*reasons))
    corrupt = [_decode_failed(column, v.avro_schema) for v, column in member.versions]
    return F.when(functools.reduce(operator.and_, corrupt, good), F.lit("corrupt_avro"))


def _bad_json(parsed: str, good: Column) -> Column:
    bad = good & (F.col(parsed).isNull() | F.col(parsed)["_corrupt_record"].isNotNull())
    return F.when(bad, F.lit("bad_json"))


def _decode_failed(column: str, avro_schema: str) -> Column:
    """The column is null (another version's row) or a field its schema requires is null (a corrupt payload)."""
    schema = json.loads(avro_schema)
    fields = schema.get("fields", []) if isinstance(schema, dict) else []
    required = [f["name"] for f in fields if not (isinstance(f["type"], list) and "null" in f["type"])]
    return functools.reduce(operator.or_, [F.col(column)[name].isNull() for name in required], F.col(column).isNull())


def field_type(schema: StructType, path: str) -> DataType | None:
    """The type of the field at dotted ``path`` in ``schema``; None when the schema has no such field."""
    current: DataType = schema
    for part in path.split("."):
        if not isinstance(current, StructType) or part not in current.fieldNames():
            return None
        current = current[part].dataType
    return current


def candidate_time(candidate: TimeCandidate, column: Column, data_type: DataType | None = None) -> Column:
    """The candidate as a UTC timestamp, or null when the field holds no time at all (missing, text that is neither
    a number nor an ISO time, a boolean), so the next candidate is tried.

    One rule per kind of ISO 8601 text (``ISO_ZONED``, ``ISO_NAIVE``):
    - a date and time with ``Z``, a numeric offset (``+01:00``, ``+0100``, ``+01``) or a zone name (``UTC``,
      ``GMT``, ``UT``, optionally with an offset, or a tz database name such as ``Europe/Paris``) is that instant;
      the candidate's ``default_zone`` plays no part;
    - a date and time without a zone, or a date alone (midnight), is a wall time in ``default_zone``;
    - any other zone (an abbreviation such as ``CET``, ``EST``, ``BST``, which is ambiguous or means another zone
      to Java, or a name no tz database knows) and any other text (a bare number, a year, a time without a date)
      is no time.

    One rule per kind of epoch value (``with_business_time`` then quarantines every implausible instant as
    ``time_out_of_bounds``; it never silently falls back to Kafka time for a number it was given):
    - a number, or a JSON string holding one, is taken in the declared unit (``s``, ``ms``, ``us``, ``ns``);
    - fractions are kept to the microsecond (a 9-digit fraction of a second is truncated, never rounded up);
    - 0 and negative numbers are instants too (1970 and before): out of bounds;
    - a number too large for any timestamp in its unit (milliseconds declared as seconds, nanoseconds declared as
      milliseconds) is out of bounds, not a missing time;
    - a boolean is not a time: the next candidate.
    """
    if candidate.format == TimeFormat.EPOCH:
        if isinstance(data_type, BooleanType):
            return F.lit(None).cast("timestamp")
        per_second = EPOCH_PER_SECOND[candidate.unit or "ms"]
        number = F.trim(column.cast("string")).cast("decimal(38,9)")
        limit = F.lit(Decimal(MAX_EPOCH_SECONDS * per_second))
        micros = F.floor(number * F.lit(Decimal(1_000_000) / Decimal(per_second))).cast("long")
        return (
            F.when(number.isNull(), F.lit(None).cast("timestamp"))
            .when(F.abs(number) <= limit, F.timestamp_micros(micros))
            .otherwise(F.lit(UNREPRESENTABLE).cast("timestamp"))
        )
    if candidate.format == TimeFormat.ISO8601:
        text = F.trim(column.cast("string"))
        # Spark reads the zone a zoned text names (a naive one in the session zone), but only after seconds.
        instant = F.to_timestamp(F.regexp_replace(text, ISO_WITHOUT_SECONDS, "$1:00$2"))
        # A naive text read back as the wall time it was, whatever the session zone, then placed in the default zone.
        local = F.to_utc_timestamp(F.from_utc_timestamp(instant, F.current_timezone()), candidate.default_zone)
        return F.when(text.rlike(ISO_ZONED), instant).when(text.rlike(ISO_NAIVE), local)
    return column.cast("timestamp")


@dataclass(frozen=True)
class Timing:
    """How one member of a pass finds its rows' business time: its candidates in order, its plan's 'now' (the upper
    bound is a day after it) and its value columns."""

    candidates: tuple[TimeCandidate, ...]
    now: datetime
    value_columns: tuple[str, ...]


def with_business_time(decoded: DataFrame, members: Sequence[Timing]) -> DataFrame:
    """Add ``_business_time`` (the member's first valid candidate, else Kafka time) and ``_time_source``; times
    before 2000 or more than a day after the member's ``now`` become ``time_out_of_bounds`` errors. The writer names
    each row's partition (UTC date and hour) from its business time (``writer.utc_date``, ``writer.utc_hour``).

    A row holds at most one version's values (the others are null), so a candidate is looked up in every version
    that has its field, in the candidates' order."""
    business: dict[int, tuple[Hashable, Column]] = {}
    sources: dict[int, tuple[Hashable, Column]] = {}
    made: dict[Hashable, tuple[Column, Column]] = {}
    for index, member in enumerate(members):
        key = (member.candidates, member.value_columns)
        if key not in made:  # built once per distinct key, not per member (``classify``)
            made[key] = _business_time(decoded, member.candidates, member.value_columns)
        found, source = made[key]
        business[index], sources[index] = (key, found), (key, source)
    count = len(members)
    time = by_member(grouped(business), count) if members else F.col("_kafka_timestamp")
    out_of_bounds = (time < F.lit(EARLIEST)) | (time > latest_time(members))
    return decoded.withColumns(
        {
            TIME_COLUMN: time,
            TIME_SOURCE_COLUMN: by_member(grouped(sources), count) if members else F.lit(KAFKA_TIME_SOURCE),
            "_error": F.coalesce(F.col("_error"), F.when(out_of_bounds, F.lit("time_out_of_bounds"))),
        }
    )


def kafka_time_only(decoded: DataFrame, members: Sequence[Timing]) -> bool:
    """Whether every member's business time is its Kafka time: none of its candidates is a field of its versions."""
    return not any(_present(decoded, m.candidates, m.value_columns) for m in members)


def latest_time(members: Sequence[Timing]) -> Column:
    """Each row's latest plausible business time: a day after its member's ``now``. One value for all, or looked up
    by ``MEMBER_COLUMN`` in an array of every member's (a literal Spark folds once): plans' ``now`` all differ, and
    a test per member (``by_member``) made every row of a pass of 156 light topics run a 156-branch CASE WHEN
    (profiled: most of the Spark side's CPU in the pass's generated code) and cost the driver six Py4J calls per
    member."""
    bounds = [m.now + timedelta(days=1) for m in members]
    if not bounds:
        return F.lit(None).cast("timestamp")
    if len(set(bounds)) == 1:
        return F.lit(bounds[0])
    return F.element_at(F.array(*[F.lit(b) for b in bounds]), F.col(MEMBER_COLUMN) + 1)


def _business_time(
    decoded: DataFrame, candidates: tuple[TimeCandidate, ...], value_columns: Sequence[str]
) -> tuple[Column, Column]:
    """A member's business time (its first valid candidate, else Kafka time) and where it came from."""
    present = [
        (candidate, candidate_time(candidate, F.col(f"{column}.{candidate.path}"), found))
        for candidate, column, found in _present(decoded, candidates, value_columns)
    ]
    business = F.coalesce(*[t for _, t in present], F.col("_kafka_timestamp"))
    source: Column = F.lit(KAFKA_TIME_SOURCE)
    for candidate, parsed in reversed(present):
        source = F.when(parsed.isNotNull(), F.lit(candidate.path)).otherwise(source)
    return business, source


def _present(
    decoded: DataFrame, candidates: Sequence[TimeCandidate], value_columns: Sequence[str]
) -> list[tuple[TimeCandidate, str, DataType]]:
    """(candidate, value column, the field's type) for each candidate field a value column has, in the candidates'
    order."""
    present = []
    for candidate in candidates:
        for column in value_columns:
            schema = decoded.schema[column].dataType
            found = field_type(schema, candidate.path) if isinstance(schema, StructType) else None
            if found is not None:
                present.append((candidate, column, found))
    return present


class KeyVersionsDiffer(ValueError):
    """A field of an older key version has another type than the newest version's."""


def key_column(number: int) -> str:
    """The column holding the keys of one key version while they are decoded (``with_decoded_key``)."""
    return f"_key_v{number}"


_STASHED = {n: f"_value{n}" for n in ("_raw_value", "_schema_id", "_error", "_schema_version")}
"""The value's columns a key's decoding puts aside while it uses their names (``with_decoded_key``)."""


def with_decoded_key(rows: DataFrame, key: Decoding, table_type: DataType) -> DataFrame:
    """``DECODED_KEY_COLUMN`` of a pass of one plan: each row's Kafka key decoded by its key version (``key``: the key
    subject's versions, each into its ``key_column``) as the value's are (``classify``, ``decode``), then made
    ``table_type`` (the newest version's): a field an older version lacks is null (``KeyVersionsDiffer`` when one has
    another type). A record without a key has none. A key that cannot be decoded gives the row its reason with
    ``key_`` before it (``key_bad_magic_byte``, ``key_unknown_schema_id``, ``key_corrupt_avro``...) unless its value
    has one of its own: the record, a tombstone too, goes to quarantine with its raw key and value."""
    swapped = rows.withColumnsRenamed(_STASHED).withColumn("_raw_value", F.col(KAFKA_KEY_COLUMN))
    decoded = decode(classify(swapped, [key]), [key])
    key_error, value_error = F.col("_error"), F.col(_STASHED["_error"])
    made = [_made(F.col(c), decoded.schema[c].dataType, table_type, v.version) for v, c in key.versions]
    own = (key_error != F.lit(TOMBSTONE)) & (value_error.isNull() | (value_error == F.lit(TOMBSTONE)))
    return (
        decoded.withColumns(
            {
                DECODED_KEY_COLUMN: F.when(key_error.isNull(), F.coalesce(*made)),
                _STASHED["_error"]: F.when(own, F.concat(F.lit("key_"), key_error)).otherwise(value_error),
            }
        )
        .drop(*_STASHED, *[c for _, c in key.versions])
        .withColumnsRenamed({stashed: name for name, stashed in _STASHED.items()})
    )


def _made(value: Column, found: DataType, wanted: DataType, version: int) -> Column:
    """A key of version ``version`` (decoded as ``found``) as ``wanted``: a struct's fields by name, null for those
    it lacks; anything else as it is."""
    if not isinstance(wanted, StructType) or not isinstance(found, StructType):
        if nullable(found) != nullable(wanted):
            raise KeyVersionsDiffer(
                f"key version {version} is {found.simpleString()}, the newest version {wanted.simpleString()}: a key "
                "keeps its type from version to version"
            )
        return value
    have = {f.name: f.dataType for f in found.fields}
    members = []
    for wanted_field in wanted.fields:
        name, data_type = wanted_field.name, wanted_field.dataType
        if name not in have:
            members.append(F.lit(None).cast(data_type).alias(name))
        elif nullable(have[name]) != nullable(data_type):
            raise KeyVersionsDiffer(
                f"field {name} of key version {version} is {have[name].simpleString()}, the newest version's "
                f"{data_type.simpleString()}: a key field keeps its type from version to version (register the change "
                "under a new field name)"
            )
        else:
            members.append(value[name].alias(name))
    return F.when(value.isNotNull(), F.struct(*members))


def with_tombstone_key(rows: DataFrame, members: Sequence[int], count: int) -> DataFrame:
    """``TOMBSTONE_KEY_COLUMN``: each tombstone's Kafka key as Kafka holds it (before ``_key`` is hashed), on the
    rows of ``members`` (the ``by_key`` topics among the pass's ``count``)."""
    key = F.when(F.col("_error") == F.lit(TOMBSTONE), F.col(KAFKA_KEY_COLUMN))
    return rows.withColumn(TOMBSTONE_KEY_COLUMN, by_member([(key, members)], count))


def plan_rows(
    timed: DataFrame, value_columns: Sequence[str], keyless: Sequence[int] = (), *, members: int = 1, kafka_time: bool
) -> DataFrame:
    """Every record of the plan, in Kafka order, with what the writer needs to route it: data rows (``_error``
    null) to their version's object, tombstones to the delete log or nowhere, the rest to quarantine with their
    raw bytes. Raw bytes travel only with quarantined rows; the Kafka key travels with every tombstone and
    quarantined row, but not with the data rows of the ``keyless`` members (their objects keep no key:
    ``records.keeps_key``), since copying every row's key into the writer's Arrow batches for nothing cost ~10% of a
    plan's Spark-side CPU (measured: 5.1 → 4.3 CPU-seconds for 1M records read, decoded and handed to Python).
    ``_headers``, ``_pseudonym_key_id``, ``TOMBSTONE_KEY_COLUMN`` and ``DECODED_KEY_COLUMN`` pass through when the rows
    have them.

    What the writer can tell without Spark stays out of its batches, since each column costs the Arrow hand-over
    per row whatever it holds (measured: 2.30 → 2.12 CPU-seconds to read, decode and hand over 1M records without
    the partition, the quarantine's date and the two time columns): the partition (UTC date and hour) of each row,
    the quarantine's date (of its Kafka time), ``MEMBER_COLUMN`` in a pass of one plan (``members``), and with
    ``kafka_time`` (no member has a time field: ``kafka_time_only``) ``_business_time`` and ``_time_source``, which
    would only repeat the Kafka time (``writer.business_time``)."""
    quarantined = F.col("_error").isNotNull() & (F.col("_error") != F.lit(TOMBSTONE))
    extras = [
        c for c in (HEADERS_COLUMN, KEY_ID_COLUMN, TOMBSTONE_KEY_COLUMN, DECODED_KEY_COLUMN) if c in timed.columns
    ]
    key = F.col(KAFKA_KEY_COLUMN)
    if keyless:
        key = F.when(F.col("_error").isNotNull() | ~F.col(MEMBER_COLUMN).isin(*keyless), key)
    return timed.select(
        *([MEMBER_COLUMN] if members > 1 else []),
        *META_COLUMNS,
        key.alias(KAFKA_KEY_COLUMN),
        *extras,
        F.when(quarantined, F.col("_raw_value")).alias("_raw_value"),
        "_schema_id",
        "_error",
        "_schema_version",
        *value_columns,
        *([] if kafka_time else TIME_COLUMNS),
    )
