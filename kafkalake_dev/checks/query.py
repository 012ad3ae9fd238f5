"""Read tables the way a query engine does: through the partition locations the Glue catalog holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalake.glue import table_partitions

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
