"""The archiver's transformations: DataFrame in, DataFrame out, no I/O.

Raw Kafka rows (``key, value, partition, offset, timestamp``) are classified, decoded per schema version,
given a business time and split into data rows and quarantine rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import DataType, StructType

from kafkalake.catalog import TimeCandidate, TimeFormat
from kafkalake.wire import HEADER_SIZE, MAGIC_BYTE, SCHEMA_ID_BYTES

EPOCH_TO_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}
MAX_EPOCH_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z: beyond it the declared unit must be wrong
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
SECONDS_PER_DAY = 86_400
META_COLUMNS = ("_kafka_partition", "_kafka_offset", "_kafka_timestamp")
QUARANTINE_COLUMNS = (
    "_kafka_partition",
    "_kafka_offset",
    "_kafka_timestamp",
    "_key",
    "_raw_value",
    "_schema_id",
    "_error",
)


@dataclass(frozen=True)
class VersionSchema:
    version: int
    schema_id: int | None
    """The registry id for Avro topics; None for JSON topics."""
    avro_schema: str


def with_metadata(raw: DataFrame) -> DataFrame:
    """Kafka columns renamed to the metadata columns every output row carries."""
    return raw.select(
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("key").alias("_key"),
        F.col("value").alias("_raw_value"),
        *([F.col("headers").alias("_headers")] if "headers" in raw.columns else []),
    )


def classify_avro(rows: DataFrame, known_ids: list[int]) -> DataFrame:
    """Add ``_schema_id`` and ``_error`` (null, tombstone, truncated, bad_magic_byte, unknown_schema_id)."""
    value = F.col("_raw_value")
    schema_id = F.conv(F.hex(F.substring(value, 2, SCHEMA_ID_BYTES)), 16, 10).cast("long")
    error = (
        F.when(value.isNull(), F.lit("tombstone"))
        .when(F.length(value) < HEADER_SIZE, F.lit("truncated"))
        .when(F.substring(value, 1, 1) != F.unhex(F.lit(f"{MAGIC_BYTE:02x}")), F.lit("bad_magic_byte"))
        .when(~schema_id.isin(known_ids) if known_ids else F.lit(True), F.lit("unknown_schema_id"))
    )
    return rows.withColumn("_schema_id", F.when(F.length(value) >= HEADER_SIZE, schema_id)).withColumn("_error", error)


def classify_json(rows: DataFrame) -> DataFrame:
    return rows.withColumn("_schema_id", F.lit(None).cast("long")).withColumn(
        "_error", F.when(F.col("_raw_value").isNull(), F.lit("tombstone"))
    )


def decode_avro(rows: DataFrame, schema: VersionSchema) -> DataFrame:
    """Rows of one schema id, with ``_value`` decoded (PERMISSIVE: corrupt payloads become ``corrupt_avro``)."""
    payload = F.expr(f"substring(_raw_value, {HEADER_SIZE + 1}, length(_raw_value) - {HEADER_SIZE})")
    decoded = rows.filter(F.col("_error").isNull() & (F.col("_schema_id") == schema.schema_id)).withColumn(
        "_value", from_avro(payload, schema.avro_schema, {"mode": "PERMISSIVE"})
    )
    return decoded.withColumn("_error", F.when(F.col("_value").isNull(), F.lit("corrupt_avro")))


def decode_json(rows: DataFrame, spark_schema: StructType) -> DataFrame:
    """JSON values parsed with the catalog's schema; unparseable ones become ``bad_json``."""
    with_corrupt = StructType([*spark_schema.fields]).add("_corrupt_record", "string")
    parsed = rows.filter(F.col("_error").isNull()).withColumn(
        "_value",
        F.from_json(
            F.col("_raw_value").cast("string"),
            with_corrupt,
            {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record"},
        ),
    )
    bad = F.col("_value").isNull() | F.col("_value._corrupt_record").isNotNull()
    return parsed.withColumn("_error", F.when(bad, F.lit("bad_json"))).withColumn(
        "_value", F.col("_value").dropFields("_corrupt_record")
    )


def _field_type(schema: StructType, path: str) -> DataType | None:
    current: DataType = schema
    for part in path.split("."):
        if not isinstance(current, StructType) or part not in current.fieldNames():
            return None
        current = current[part].dataType
    return current


def candidate_time(candidate: TimeCandidate, column: Column) -> Column:
    """The candidate as a UTC timestamp, or null when it is missing or invalid."""
    if candidate.format == TimeFormat.EPOCH:
        number = column.cast("long")
        micros = EPOCH_TO_MICROS[candidate.unit or "ms"]
        plausible = (number >= 0) & (number <= F.lit(MAX_EPOCH_SECONDS * 1_000_000 // micros))
        return F.when(plausible, F.timestamp_micros(number * micros))
    if candidate.format == TimeFormat.ISO8601:
        text = F.trim(column.cast("string"))
        with_offset = text.rlike(r"(Z|z|[+-][0-9]{2}:?[0-9]{2})$")
        # Parsed in the session zone, then read back as the wall time it was, whatever the session zone.
        wall_time = F.from_utc_timestamp(F.to_timestamp(text), F.current_timezone())
        local = F.to_utc_timestamp(wall_time, candidate.default_zone)
        return F.when(with_offset, F.to_timestamp(text)).otherwise(local)
    return column.cast("timestamp")


def utc_date(timestamp: Column) -> Column:
    """``yyyy-MM-dd`` of the instant in UTC, whatever the session's time zone."""
    return F.date_from_unix_date(F.floor(F.unix_seconds(timestamp) / SECONDS_PER_DAY).cast("int")).cast("string")


def utc_hour(timestamp: Column) -> Column:
    """The hour (0-23) of the instant in UTC, whatever the session's time zone."""
    return F.floor(F.pmod(F.unix_seconds(timestamp), F.lit(SECONDS_PER_DAY)) / 3600).cast("int")


def with_business_time(decoded: DataFrame, candidates: tuple[TimeCandidate, ...], now: datetime) -> DataFrame:
    """Add ``_business_time`` (first valid candidate, else Kafka time), ``_time_source``, ``dt`` and ``hour``;
    times before 2000 or more than a day after ``now`` become ``time_out_of_bounds`` errors."""
    value_schema = decoded.schema["_value"].dataType
    assert isinstance(value_schema, StructType)
    present = [
        (c, candidate_time(c, F.col(f"_value.{c.path}"))) for c in candidates if _field_type(value_schema, c.path)
    ]
    business = F.coalesce(*[t for _, t in present], F.col("_kafka_timestamp"))
    source: Column = F.lit("kafka_timestamp")
    for candidate, parsed in reversed(present):
        source = F.when(parsed.isNotNull(), F.lit(candidate.path)).otherwise(source)
    latest = F.lit(now).cast("timestamp") + F.expr("INTERVAL 1 DAY")
    out_of_bounds = (F.col("_business_time") < F.lit(EARLIEST)) | (F.col("_business_time") > latest)
    return (
        decoded.withColumn("_business_time", business)
        .withColumn("_time_source", source)
        .withColumn("_error", F.coalesce(F.col("_error"), F.when(out_of_bounds, F.lit("time_out_of_bounds"))))
        .withColumn("dt", utc_date(F.col("_business_time")))
        .withColumn("hour", utc_hour(F.col("_business_time")))
    )


def data_rows(timed: DataFrame, include_key: bool, include_headers: bool) -> DataFrame:
    """Good rows: the decoded fields, then the metadata columns, then dt/hour for the layout."""
    extra = [c for c, wanted in (("_key", include_key), ("_headers", include_headers)) if wanted and c in timed.columns]
    return timed.filter(F.col("_error").isNull()).select(
        "_value.*", *META_COLUMNS, "_business_time", "_time_source", *extra, "dt", "hour"
    )


def quarantine_rows(rows: DataFrame) -> DataFrame:
    """Rows with an error other than a dropped tombstone, with their raw bytes, offsets and Kafka time."""
    return rows.filter(F.col("_error").isNotNull() & (F.col("_error") != "tombstone")).select(
        *QUARANTINE_COLUMNS, utc_date(F.col("_kafka_timestamp")).alias("dt")
    )


def tombstone_rows(rows: DataFrame) -> DataFrame:
    """Tombstones as a delete log: key, metadata, Kafka time as business time."""
    return rows.filter(F.col("_error") == "tombstone").select(
        *META_COLUMNS,
        F.col("_key"),
        F.col("_kafka_timestamp").alias("_business_time"),
        F.lit("kafka_timestamp").alias("_time_source"),
        utc_date(F.col("_kafka_timestamp")).alias("dt"),
        utc_hour(F.col("_kafka_timestamp")).alias("hour"),
    )


def with_tombstones(data: DataFrame, classified: DataFrame) -> DataFrame:
    """Data rows plus the tombstones as delete-log rows, told apart by ``_tombstone``."""
    tombstones = tombstone_rows(classified).withColumn("_tombstone", F.lit(True))
    return data.withColumn("_tombstone", F.lit(False)).unionByName(tombstones, allowMissingColumns=True)
