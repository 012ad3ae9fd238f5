"""Read tables the way a query engine does: through the partition locations the Glue catalog holds, or an Iceberg
table's current snapshot through the Iceberg catalog; ``query_table`` counts what a reader finds (the demo's check)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from kafkalake.glue import table_partitions
from kafkalake.jobspec import ICEBERG_CATALOG
from kafkalake.personal import UPSERT_KEY_COLUMN
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TableFormat

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def partition_locations(glue: Any, database: str, table: str) -> dict[tuple[str, ...], str]:
    """Partition values → location; empty while the table does not exist."""
    partitions = table_partitions(glue, database, table) or []
    return {tuple(p["Values"]): p["StorageDescriptor"]["Location"] for p in partitions}


def read_locations(spark: SparkSession, locations: dict[tuple[str, ...], str]) -> DataFrame | None:
    """Every partition's files, as the catalog points at them (``s3://`` read through S3A locally)."""
    if not locations:
        return None
    paths = [location for location in locations.values()]
    return spark.read.option("mergeSchema", "true").parquet(*paths)


@dataclass
class Queried:
    rows: dict[tuple[str, ...], int] = field(default_factory=dict)
    """Data rows per partition (kept tombstones not counted)."""
    duplicates: int = 0
    """Rows beyond the first for any (Kafka partition, offset)."""
    tombstones: int = 0
    """Tombstones kept as rows (topics with ``tombstones: keep``)."""
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    """An upsert table's rows: each key (``_upsert_key``) → the columns asked for (None where the table has none)."""


def query_iceberg_table(spark: SparkSession, topic: Topic, state_columns: Sequence[str] = ()) -> Queried:
    """Read an Iceberg table's current snapshot through the Iceberg catalog, as a query engine would, its rows
    counted by the (schema version, day, hour) of their business time, as a Hive table's partitions are; with
    ``state_columns``, an upsert table's rows too (``Queried.state``)."""
    from pyspark.sql import functions as F

    name = f"{ICEBERG_CATALOG}.{topic.database}.{topic.table}"
    if not spark.catalog.tableExists(name):
        return Queried()
    spark.sql(f"REFRESH TABLE {name}")
    frame = spark.table(name)
    kept = F.coalesce(F.col("_tombstone"), F.lit(False)) if "_tombstone" in frame.columns else F.lit(False)
    hours = [
        F.col("schema_version").cast("string").alias("v"),
        F.date_format("_business_time", "yyyy-MM-dd").alias("dt"),
        F.date_format("_business_time", "HH").alias("hour"),
    ]
    counted = frame.groupBy(*hours).agg(
        F.sum((~kept).cast("int")).alias("rows"), F.sum(kept.cast("int")).alias("tombstones")
    )
    result = Queried()
    for row in counted.collect():
        if row["rows"]:
            result.rows[(row["v"], row["dt"], row["hour"])] = row["rows"]
        result.tombstones += row["tombstones"]
    result.duplicates = frame.count() - frame.select("_kafka_partition", "_kafka_offset").distinct().count()
    if state_columns:
        values = [F.col(c) if c in frame.columns else F.lit(None).alias(c) for c in state_columns]
        for row in frame.select(UPSERT_KEY_COLUMN, *values).collect():
            result.state[row[UPSERT_KEY_COLUMN]] = {c: row[c] for c in state_columns}
    return result


def query_table(spark: SparkSession, glue: Any, topic: Topic, state_columns: Sequence[str] = ()) -> Queried:
    """Read every partition at the location Glue holds, as a query engine would (an Iceberg table's snapshot, and
    an upsert table's ``state_columns``)."""
    from pyspark.sql import functions as F

    if topic.spec.table_format == TableFormat.ICEBERG:
        return query_iceberg_table(spark, topic, state_columns)

    locations = partition_locations(glue, topic.database, topic.table)
    frame = read_locations(spark, locations)
    if frame is None:
        return Queried()
    kept = F.coalesce(F.col("_tombstone"), F.lit(False)) if "_tombstone" in frame.columns else F.lit(False)
    per_file = (
        frame.groupBy(F.input_file_name().alias("file"))
        .agg(F.sum((~kept).cast("int")).alias("rows"), F.sum(kept.cast("int")).alias("tombstones"))
        .collect()
    )
    by_prefix = {parse_s3_uri(location).as_prefix(): values for values, location in locations.items()}
    result = Queried()
    rows: Counter[tuple[str, ...]] = Counter()
    for row in per_file:
        path = parse_s3_uri(unquote(row["file"])).key
        [values] = [v for prefix, v in by_prefix.items() if path.startswith(prefix)]
        rows[values] += row["rows"]
        result.tombstones += row["tombstones"]
    result.rows = {values: n for values, n in rows.items() if n}
    extra = (
        frame.groupBy("_kafka_partition", "_kafka_offset")
        .count()
        .agg(F.coalesce(F.sum(F.col("count") - 1), F.lit(0)).alias("extra"))
        .first()
    )
    result.duplicates = int(extra["extra"]) if extra else 0
    return result
