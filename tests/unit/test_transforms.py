"""The archiver's pure transforms on a bare local session (chispa-style: no stack, no connectors)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, date, datetime

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from kafkalake.topic_spec import TimeCandidate, TimeFormat, ValueFormat
from kafkalake.wire import encode
from spark_jobs.archiver import transform, writer

SCHEMA = '{"type":"record","name":"R","fields":[{"name":"id","type":"string"}]}'
T0 = datetime(2026, 11, 20, 10, 30, tzinfo=UTC)
NOW = datetime(2026, 11, 21, tzinfo=UTC)
RAW = "key binary, value binary, partition int, offset long, timestamp timestamp"


def raw(spark: SparkSession, values: list[bytes | None]) -> DataFrame:
    rows = [(b"k", v, 0, offset, T0) for offset, v in enumerate(values)]
    return transform.with_metadata(spark.createDataFrame(rows, RAW))


def avro(*versions: transform.VersionSchema) -> transform.Decoding:
    """An Avro member's decoding, each version into its own column."""
    return transform.Decoding(ValueFormat.AVRO, tuple((v, transform.value_column(v.version)) for v in versions))


def json_member(version: int, schema: StructType | None = None) -> transform.Decoding:
    found = transform.VersionSchema(version, None, "{}")
    return transform.Decoding(ValueFormat.JSON, ((found, transform.value_column(version)),), schema or StructType())


def timed_by(frame: DataFrame, candidates: tuple[TimeCandidate, ...], columns: list[str]) -> DataFrame:
    """``with_business_time`` for a pass of one member."""
    return transform.with_business_time(frame, [transform.Timing(candidates, NOW, tuple(columns))])


def errors(frame: DataFrame) -> list[str | None]:
    return [r["_error"] for r in frame.orderBy("_kafka_offset").collect()]


def test_metadata_columns_replace_kafkas(bare_spark: SparkSession) -> None:
    rows = raw(bare_spark, [b"v"])
    assert rows.columns == ["_member", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_key", "_raw_value"]


def test_avro_classification_by_frame(bare_spark: SparkSession) -> None:
    good, unknown = encode(7, SCHEMA, {"id": "a"}), encode(8, SCHEMA, {"id": "a"})
    classified = transform.classify(
        raw(bare_spark, [good, None, b"\x00\x01", b"\x42garbage", unknown]),
        [avro(transform.VersionSchema(1, 7, SCHEMA))],
    )
    assert errors(classified) == [None, "tombstone", "truncated", "bad_magic_byte", "unknown_schema_id"]
    assert [r["_schema_id"] for r in classified.orderBy("_kafka_offset").collect()] == [7, None, None, 1734439522, 8]


def test_json_decoding_keeps_good_rows_and_flags_bad_ones(bare_spark: SparkSession) -> None:
    schema = StructType([StructField("id", StringType()), StructField("n", LongType())])
    classified = transform.classify(raw(bare_spark, [b'{"id": "a", "n": 2}', None, b"{not json"]), [json_member(3)])
    assert errors(classified) == [None, "tombstone", None]
    decoded = transform.decode(classified, [json_member(3, schema)])
    assert errors(decoded) == [None, "tombstone", "bad_json"]
    rows = decoded.orderBy("_kafka_offset").collect()
    assert rows[0]["_value_v3"].asDict() == {"id": "a", "n": 2} and rows[0]["_schema_version"] == 3
    assert rows[1]["_value_v3"] is None and rows[2]["_value_v3"] is None


def test_avro_versions_decode_in_one_pass(bare_spark: SparkSession) -> None:
    other = '{"type":"record","name":"R","fields":[{"name":"id","type":"string"},{"name":"n","type":"long"}]}'
    values = [encode(7, SCHEMA, {"id": "a"}), encode(9, other, {"id": "b", "n": 5}), b"\x00\x00\x00\x00\x09\xff", None]
    versions = [transform.VersionSchema(1, 7, SCHEMA), transform.VersionSchema(2, 9, other)]
    decoded = transform.decode(transform.classify(raw(bare_spark, values), [avro(*versions)]), [avro(*versions)])
    rows = decoded.orderBy("_kafka_offset").collect()
    assert [r["_error"] for r in rows] == [None, None, "corrupt_avro", "tombstone"]
    assert [r["_schema_version"] for r in rows] == [1, 2, 2, None]
    assert rows[0]["_value_v1"].asDict() == {"id": "a"} and rows[0]["_value_v2"] is None
    assert rows[1]["_value_v2"].asDict() == {"id": "b", "n": 5} and rows[1]["_value_v1"] is None
    assert rows[2]["_value_v1"] is None  # a corrupt payload is decoded by its own version only


def timed(spark: SparkSession, values: list[tuple[str | None, int | None]]) -> DataFrame:
    frame = spark.createDataFrame(
        [(0, i, T0, None, {"meta": {"at": at}, "epoch": epoch}, None) for i, (at, epoch) in enumerate(values)],
        "_kafka_partition int, _kafka_offset long, _kafka_timestamp timestamp, _error string, "
        "_value struct<meta: struct<at: string>, epoch: long>, _other struct<epoch: long>",
    )
    candidates = (
        TimeCandidate(path="meta.at", format=TimeFormat.ISO8601, default_zone="Europe/Berlin"),
        TimeCandidate(path="epoch", format=TimeFormat.EPOCH, unit="ms"),
        TimeCandidate(path="absent.field", format=TimeFormat.EPOCH, unit="s"),
    )
    return timed_by(frame, candidates, ["_value", "_other"]).orderBy("_kafka_offset")


def test_business_time_takes_the_first_valid_candidate(bare_spark: SparkSession) -> None:
    rows = timed(
        bare_spark,
        [
            ("2026-11-20T08:15:00Z", None),  # ISO with zone
            ("2026-11-20 08:15:00", None),  # no zone: the candidate's default zone (UTC+1)
            (None, int(datetime(2026, 11, 20, 5, tzinfo=UTC).timestamp() * 1000)),  # epoch ms
            ("garbage", None),  # nothing valid: Kafka time
            ("1999-12-31T23:00:00Z", None),  # before 2000
            ("2026-11-23T00:00:00Z", None),  # more than a day after the plan's now
        ],
    ).collect()
    assert [(r["_business_time"].astimezone(UTC), r["_time_source"]) for r in rows] == [
        (datetime(2026, 11, 20, 8, 15, tzinfo=UTC), "meta.at"),
        (datetime(2026, 11, 20, 7, 15, tzinfo=UTC), "meta.at"),
        (datetime(2026, 11, 20, 5, tzinfo=UTC), "epoch"),
        (T0, "kafka_timestamp"),
        (datetime(1999, 12, 31, 23, tzinfo=UTC), "meta.at"),
        (datetime(2026, 11, 23, tzinfo=UTC), "meta.at"),
    ]
    assert [r["_error"] for r in rows] == [None, None, None, None, "time_out_of_bounds", "time_out_of_bounds"]


def test_business_time_is_found_in_the_rows_version(bare_spark: SparkSession) -> None:
    at = int(datetime(2026, 11, 20, 5, tzinfo=UTC).timestamp() * 1000)
    frame = bare_spark.createDataFrame(
        [(0, 0, T0, None, {"epoch": at}, None), (0, 1, T0, None, None, {"epoch": at + 3_600_000})],
        "_kafka_partition int, _kafka_offset long, _kafka_timestamp timestamp, _error string, "
        "_v1 struct<epoch: long>, _v2 struct<epoch: long>",
    )
    candidate = (TimeCandidate(path="epoch", format=TimeFormat.EPOCH, unit="ms"),)
    rows = timed_by(frame, candidate, ["_v1", "_v2"]).orderBy("_kafka_offset").collect()
    assert [(r["_business_time"].astimezone(UTC).hour, r["_time_source"]) for r in rows] == [(5, "epoch"), (6, "epoch")]


def test_plan_rows_carry_raw_bytes_only_for_quarantine(bare_spark: SparkSession) -> None:
    values = [encode(7, SCHEMA, {"id": "a"}), None, b"\x42garbage"]
    versions = [transform.VersionSchema(1, 7, SCHEMA)]
    decoded = transform.decode(transform.classify(raw(bare_spark, values), [avro(*versions)]), [avro(*versions)])
    rows = transform.plan_rows(timed_by(decoded, (), ["_value_v1"]), ["_value_v1"], kafka_time=True)
    assert rows.columns == [
        "_kafka_partition",
        "_kafka_offset",
        "_kafka_timestamp",
        "_key",
        "_raw_value",
        "_schema_id",
        "_error",
        "_schema_version",
        "_value_v1",
    ]
    assert [(r["_error"], r["_raw_value"]) for r in rows.collect()] == [
        (None, None),
        ("tombstone", None),
        ("bad_magic_byte", bytearray(b"\x42garbage")),
    ]


def test_plan_rows_carry_the_member_in_a_pass_of_many_and_business_times_found_in_fields(
    bare_spark: SparkSession,
) -> None:
    member = avro(transform.VersionSchema(1, 7, SCHEMA))
    decoded = transform.decode(transform.classify(raw(bare_spark, [None]), [member]), [member])
    rows = transform.plan_rows(timed_by(decoded, (), ["_value_v1"]), ["_value_v1"], members=2, kafka_time=False)
    assert rows.columns[0] == transform.MEMBER_COLUMN
    assert tuple(rows.columns[-2:]) == transform.TIME_COLUMNS


def test_kafka_time_only_when_no_member_has_a_candidate_field(bare_spark: SparkSession) -> None:
    frame = timed(bare_spark, [])
    at = TimeCandidate(path="meta.at", format=TimeFormat.ISO8601)
    absent = TimeCandidate(path="absent.field", format=TimeFormat.EPOCH, unit="s")
    assert transform.kafka_time_only(frame, [transform.Timing((absent,), NOW, ("_value",))])
    assert transform.kafka_time_only(frame, [transform.Timing((), NOW, ("_value",))])
    assert not transform.kafka_time_only(
        frame, [transform.Timing((), NOW, ("_value",)), transform.Timing((absent, at), NOW, ("_value",))]
    )


def writer_partitions(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each row's partition as the writer names it from Spark's Arrow batches: the UTC date and hour of its business
    time, and the UTC date of its Kafka time (its quarantine's)."""
    for batch in batches:
        table = pa.Table.from_batches([batch])
        times, kafka = table.column("_business_time"), table.column("_kafka_timestamp")
        found = [writer.utc_date(times), writer.utc_hour(times), writer.utc_date(kafka), table.column("_error")]
        yield from pa.Table.from_arrays(found, names=["dt", "hour", "kafka_dt", "_error"]).to_batches()


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
def test_partitions_do_not_depend_on_the_session_zone(bare_spark: SparkSession, zone: str) -> None:
    values: list[tuple[str | None, int | None]] = [
        ("2026-11-20T08:15:00Z", None),
        ("2026-11-20 08:15:00", None),
        ("2026-11-20T23:59:59", None),
        ("x", 1_763_614_800_000),
        ("2000-01-01T00:30:00Z", None),
    ]
    schema = "dt date, hour int, kafka_dt date, _error string"

    def partitions(frame: DataFrame) -> list[tuple[object, ...]]:
        ordered = frame.select("_kafka_timestamp", "_business_time", "_error").coalesce(1)
        return [tuple(r) for r in ordered.mapInArrow(writer_partitions, schema).collect()]

    in_utc = partitions(timed(bare_spark, values))
    bare_spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        elsewhere = partitions(timed(bare_spark, values))
        tombstone = partitions(timed_by(transform.classify(raw(bare_spark, [None]), [json_member(1)]), (), []))
    finally:
        bare_spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert in_utc == [
        (date(2026, 11, 20), 8, date(2026, 11, 20), None),
        (date(2026, 11, 20), 7, date(2026, 11, 20), None),
        (date(2026, 11, 20), 22, date(2026, 11, 20), None),
        (date(2025, 11, 20), 5, date(2026, 11, 20), None),
        (date(2000, 1, 1), 0, date(2026, 11, 20), None),
    ]
    assert elsewhere == in_utc
    assert tombstone == [(date(2026, 11, 20), 10, date(2026, 11, 20), "tombstone")]


EDGE = datetime(2026, 11, 20, 8, tzinfo=UTC)
EDGE_S = int(EDGE.timestamp())


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("text_s", f"{EDGE_S}", (EDGE, "text_s", None)),  # a JSON string holding a number
        ("text_s", f"{EDGE_S}.123456789", (EDGE.replace(microsecond=123456), "text_s", None)),  # 9-digit fraction
        ("double_s", EDGE_S + 0.5, (EDGE.replace(microsecond=500000), "double_s", None)),
        ("text_s", "0", (None, "text_s", "time_out_of_bounds")),  # epoch 0 is 1970, not "no time"
        ("text_s", "-5", (None, "text_s", "time_out_of_bounds")),  # negative: before 1970
        ("text_s", f"{EDGE_S * 1000}", (None, "text_s", "time_out_of_bounds")),  # milliseconds declared as seconds
        ("long_ms", EDGE_S * 1_000_000_000, (None, "long_ms", "time_out_of_bounds")),  # nanoseconds declared as ms
        ("long_ns", EDGE_S * 1_000_000_000 + 999, (EDGE, "long_ns", None)),  # nanoseconds, truncated to the us
        ("flag", True, (T0, "kafka_timestamp", None)),  # a boolean is not a time: the next candidate
        ("text_s", "soon", (T0, "kafka_timestamp", None)),  # text that is no number: the next candidate
    ],
)
def test_epoch_edge_cases_follow_one_rule_each(
    bare_spark: SparkSession, field: str, value: object, expected: tuple[datetime | None, str, str | None]
) -> None:
    fields = {"flag": None, "text_s": None, "double_s": None, "long_ms": None, "long_ns": None, field: value}
    frame = bare_spark.createDataFrame(
        [(0, 0, T0, None, fields)],
        "_kafka_partition int, _kafka_offset long, _kafka_timestamp timestamp, _error string, "
        "_value struct<flag: boolean, text_s: string, double_s: double, long_ms: long, long_ns: long>",
    )
    candidates = tuple(
        TimeCandidate(path=path, format=TimeFormat.EPOCH, unit=unit)
        for path, unit in (("flag", "s"), ("text_s", "s"), ("double_s", "s"), ("long_ms", "ms"), ("long_ns", "ns"))
    )
    row = timed_by(frame, candidates, ["_value"]).first()
    assert row is not None
    at, source, error = expected
    assert (row["_time_source"], row["_error"]) == (source, error)
    if at is not None:
        assert row["_business_time"].astimezone(UTC) == at


PARIS_CANDIDATE = (TimeCandidate(path="at", format=TimeFormat.ISO8601, default_zone="Europe/Paris"),)


def iso_times(spark: SparkSession, texts: list[str], session_zone: str = "UTC") -> list[datetime | None]:
    """The business time each text gives an ISO candidate whose default zone is Europe/Paris, in UTC; None where
    the text is no time (the Kafka time was taken)."""
    frame = spark.createDataFrame(
        [(0, i, T0, None, {"at": text}) for i, text in enumerate(texts)],
        "_kafka_partition int, _kafka_offset long, _kafka_timestamp timestamp, _error string, "
        "_value struct<at: string>",
    )
    spark.conf.set("spark.sql.session.timeZone", session_zone)
    try:
        rows = timed_by(frame, PARIS_CANDIDATE, ["_value"]).orderBy("_kafka_offset").collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert all(r["_error"] is None for r in rows)
    return [r["_business_time"].astimezone(UTC) if r["_time_source"] == "at" else None for r in rows]


def utc(hour: int, microsecond: int = 0, day: int = 21) -> datetime:
    return datetime(2026, 11, day, hour, 0, 0, microsecond, tzinfo=UTC)


def test_iso_with_an_offset_is_that_instant(bare_spark: SparkSession) -> None:
    texts = [
        "2026-11-21T13:00:00+01:00",
        "2026-11-21T13:00:00+0100",
        "2026-11-21T13:00:00+01",
        "2026-11-21T13:00-05:00",
    ]
    assert iso_times(bare_spark, [*texts, "2026-11-21 13:00:00.5 +01:00"]) == [
        utc(12),
        utc(12),
        utc(12),
        utc(18),
        utc(12, microsecond=500_000),
    ]


def test_iso_with_z_is_utc(bare_spark: SparkSession) -> None:
    texts = ["2026-11-21T13:00:00Z", "2026-11-21T13:00:00.123456Z", "2026-11-21T13:00Z", "2026-11-21 13:00:00 Z"]
    assert iso_times(bare_spark, texts) == [utc(13), utc(13, microsecond=123_456), utc(13), utc(13)]


@pytest.mark.parametrize("session_zone", ["UTC", "Asia/Kolkata"])
def test_iso_with_a_zone_name_is_read_in_that_zone_not_the_default(bare_spark: SparkSession, session_zone: str) -> None:
    texts = [
        "2026-11-21T13:00:00 UTC",  # the defect: was re-read as a Paris wall time (12:00Z)
        "2026-11-21T13:00:00UTC",
        "2026-11-21T13:00:00 GMT",
        "2026-11-21T13:00:00 UT",
        "2026-11-21T13:00:00 UTC+01:00",
        "2026-11-21T13:00:00 GMT-5",
        "2026-11-21T13:00:00 Europe/Paris",
        "2026-11-21T13:00:00 America/New_York",
        "2026-07-01T13:00:00 Europe/London",  # summer time
    ]
    assert iso_times(bare_spark, texts, session_zone) == [
        utc(13),
        utc(13),
        utc(13),
        utc(13),
        utc(12),
        utc(18),
        utc(12),
        utc(18),
        datetime(2026, 7, 1, 12, tzinfo=UTC),
    ]


def test_iso_with_an_abbreviated_or_unknown_zone_is_no_time(bare_spark: SparkSession) -> None:
    texts = [
        "2026-11-21T13:00:00 CET",
        "2026-11-21T13:00:00 BST",  # Java reads Asia/Dhaka, not British Summer Time
        "2026-11-21T13:00:00 PST",
        "2026-11-21T13:00:00 Mars/Olympus",
        "2026-11-21T13:00:00 utc",
        "2026-11-21T13:00:00z",
    ]
    assert iso_times(bare_spark, texts) == [None] * len(texts)


def test_iso_without_a_zone_is_a_wall_time_in_the_default_zone(bare_spark: SparkSession) -> None:
    texts = ["2026-11-21T13:00:00", "2026-11-21 13:00", "2026-11-21T13:00:00.250", "2026-11-21", "2026-07-01T13:00:00"]
    assert iso_times(bare_spark, texts, "America/New_York") == [
        utc(12),
        utc(12),
        utc(12, microsecond=250_000),
        utc(23, day=20),  # a date alone is its midnight
        datetime(2026, 7, 1, 11, tzinfo=UTC),  # summer time
    ]


def test_text_that_is_no_iso_date_time_is_no_time(bare_spark: SparkSession) -> None:
    texts = ["1763730000000", "1763730000", "2026", "2026-11", "13:00:00", "garbage", "", "2026-11-21 UTC"]
    assert iso_times(bare_spark, [*texts, "2026-02-30T10:00:00", "2026-11-21T13:00:00+01:00[Europe/Paris]"]) == [
        None
    ] * (len(texts) + 2)
