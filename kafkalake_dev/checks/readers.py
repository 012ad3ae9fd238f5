"""Read the tables as their users do: AWS SDK for pandas (``awswrangler.s3.read_parquet_table``) and Spark SQL over
tables defined from their Glue definitions, each counting the interop check's ``Check``s (whole table, the busiest
hour, the newest schema version) against what the workload planned. Trino counts them in the interop check
(``kafkalake_dev.checks.interop``).

Spark on EMR or Glue reads the Glue Data Catalog through its own client; locally, ``define_spark_table`` gives a
Spark SQL table the Glue table's columns, partition keys and location, and every partition at the location Glue
holds, the same definition, read by the same file index (each partition's location listed on its own).

An Iceberg table is read through the Iceberg catalogs instead: Spark SQL through ``glue_catalog``
(``iceberg_spark_read``) and pyiceberg's scan (``pyiceberg_read``), each reading the table's current snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from kafkalake.glue import table_partitions
from kafkalake.iceberg import SCHEMA_VERSION_COLUMN, TIME_COLUMN
from kafkalake.jobspec import ICEBERG_CATALOG
from kafkalake_dev.checks.interop import TOMBSTONE_COLUMN, Check, Read

if TYPE_CHECKING:
    import boto3
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

    from kafkalake.endpoints import Endpoints

KEY_COLUMNS = ("_kafka_partition", "_kafka_offset")
WRANGLER_OPTIONS: dict[str, Any] = {"validate_schema": False}
"""The one option SDK for pandas needs, for tables with several schema versions: its default compares the schemas
of every file read and raises ``InvalidSchemaConvergence`` when they differ (a version that added a column); it
takes the schema from the files, not from the Glue table's columns, so no Glue definition avoids it. With
``validate_schema=False`` it unifies the files' schemas (missing columns read as nulls)."""


@contextmanager
def wrangler_session(endpoints: Endpoints) -> Iterator[boto3.Session]:
    """A boto3 session for SDK for pandas, with its S3 and Glue endpoints pointed at ``endpoints`` (its global
    configuration, restored on exit; in AWS there is nothing to point)."""
    import awswrangler as wr
    import boto3

    saved = (wr.config.s3_endpoint_url, wr.config.glue_endpoint_url)
    wr.config.s3_endpoint_url = wr.config.glue_endpoint_url = endpoints.aws_endpoint_url
    try:
        yield boto3.Session(region_name=endpoints.region)
    finally:
        wr.config.s3_endpoint_url, wr.config.glue_endpoint_url = saved


def partition_filter(check: Check) -> Callable[[dict[str, str]], bool]:
    """SDK for pandas' filter on the Glue partitions' values (strings, as in the partition paths)."""
    wanted = dict(check.partition)
    return lambda values: all(values.get(name) == value for name, value in wanted.items())


def wrangler_read(session: boto3.Session, check: Check, *, through_partitions: bool = True) -> Read:
    """The check through SDK for pandas. A check with partition values always filters on them; the whole table is
    read through Glue's partitions (``partition_filter`` admitting all) unless ``through_partitions`` is off: then
    the SDK lists the table's location itself, its default for a whole-table read."""
    import awswrangler as wr

    database, table = check.table.split(".")
    wanted = partition_filter(check) if check.partition or through_partitions else None
    columns = [*KEY_COLUMNS, TOMBSTONE_COLUMN] if check.data_rows else list(KEY_COLUMNS)
    frame = wr.s3.read_parquet_table(
        table=table,
        database=database,
        partition_filter=wanted,
        columns=columns,
        boto3_session=session,
        **WRANGLER_OPTIONS,
    )
    if check.data_rows:
        frame = frame[~frame[TOMBSTONE_COLUMN].fillna(False).astype(bool)]
    return Read(len(frame), len(frame) - len(frame.drop_duplicates(list(KEY_COLUMNS))))


def define_spark_table(spark: SparkSession, glue: Any, database: str, table: str) -> str:
    """A Spark SQL table (re)defined from the Glue table: columns, partition keys, location, and each partition at
    the location Glue holds now, as Spark with the Glue Data Catalog sees it at the start of a query."""
    described = glue.get_table(DatabaseName=database, Name=table)["Table"]
    descriptor, keys = described["StorageDescriptor"], described["PartitionKeys"]
    name = f"`{database}__{table}`"
    columns = ", ".join(f"`{c['Name']}` {c['Type']}" for c in [*descriptor["Columns"], *keys])
    partitioned_by = ", ".join(f"`{k['Name']}`" for k in keys)
    spark.sql(f"DROP TABLE IF EXISTS {name}")  # external: the files stay
    spark.sql(
        f"CREATE TABLE {name} ({columns}) USING parquet "
        f"PARTITIONED BY ({partitioned_by}) LOCATION '{descriptor['Location']}'"
    )
    partitions = [
        "PARTITION ("
        + ", ".join(f"`{k['Name']}` = '{v}'" for k, v in zip(keys, p["Values"], strict=True))
        + f") LOCATION '{p['StorageDescriptor']['Location']}'"
        for p in table_partitions(glue, database, table) or []
    ]
    if partitions:
        spark.sql(f"ALTER TABLE {name} ADD {' '.join(partitions)}")
    return name


def spark_read(spark: SparkSession, glue: Any, check: Check) -> Read:
    """The check through Spark SQL over the table's Glue definition, read afresh."""
    name = define_spark_table(spark, glue, *check.table.split("."))
    return counted(spark, name, check, [f"`{column}` = '{value}'" for column, value in check.partition])


def counted(spark: SparkSession, name: str, check: Check, where: list[str]) -> Read:
    """``count(*)`` and distinct offsets of the Spark SQL table ``name``, filtered by ``where`` (and without kept
    tombstones when the check counts data rows)."""
    if check.data_rows:
        where = [*where, f"NOT coalesce(`{TOMBSTONE_COLUMN}`, false)"]
    keys = ", ".join(f"`{k}`" for k in KEY_COLUMNS)
    query = f"SELECT count(*) AS n, count(DISTINCT {keys}) AS distinct_keys FROM {name}"  # noqa: S608 - see above
    row = spark.sql(f"{query} WHERE {' AND '.join(where)}" if where else query).first()
    rows = int(row["n"]) if row else 0
    return Read(rows, rows - (int(row["distinct_keys"]) if row else 0))


def iceberg_spark_read(spark: SparkSession, check: Check) -> Read:
    """The check through Spark SQL on the Iceberg table's current snapshot (``glue_catalog``)."""
    name = f"{ICEBERG_CATALOG}.{check.table}"
    spark.sql(f"REFRESH TABLE {name}")
    return counted(spark, name, check, [check.where] if check.where else [])


def iceberg_row_filter(check: Check) -> str:
    """The check's partition values as pyiceberg's filter: the schema version, or the business hour's range."""
    values = dict(check.partition)
    if SCHEMA_VERSION_COLUMN in values:
        return f"{SCHEMA_VERSION_COLUMN} = {int(values[SCHEMA_VERSION_COLUMN])}"
    if "dt" in values:
        start = datetime.fromisoformat(f"{values['dt']}T{values['hour']}:00:00+00:00")
        end = start + timedelta(hours=1)
        return f"{TIME_COLUMN} >= '{start.isoformat()}' and {TIME_COLUMN} < '{end.isoformat()}'"
    return "true"


def pyiceberg_read(tables: Catalog, check: Check) -> Read:
    """The check through pyiceberg's scan of the Iceberg table's current snapshot."""
    table = tables.load_table(tuple(check.table.split(".")))
    columns = (*KEY_COLUMNS, TOMBSTONE_COLUMN) if check.data_rows else KEY_COLUMNS
    rows = table.scan(row_filter=iceberg_row_filter(check), selected_fields=columns).to_arrow()
    if check.data_rows:
        rows = rows.filter(pc.invert(pc.fill_null(rows.column(TOMBSTONE_COLUMN), False)))
    keys = set(zip(*(rows.column(c).to_pylist() for c in KEY_COLUMNS), strict=True))
    return Read(rows.num_rows, rows.num_rows - len(keys))
