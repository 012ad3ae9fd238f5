"""Glue Data Catalog requests: pure builders, plus one thin batch caller per batch API.

Builders take plain values and return request dictionaries; the callers chunk (100 partitions per
``BatchCreatePartition``, 1000 per ``BatchGetPartition``) and treat ``AlreadyExistsException`` as success.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
from botocore.exceptions import ClientError

from kafkalake.layout import COMPACTED_DIR, PARTITION_KEYS, Partition

T = TypeVar("T")
CREATE_CHUNK = 100
GET_CHUNK = 1000
_PARTITION_TYPES = {"schema_version": "int", "dt": "string", "hour": "string"}
PARTITION_COLUMNS = tuple({"Name": key, "Type": _PARTITION_TYPES[key]} for key in PARTITION_KEYS)
PARQUET_SERDE = {
    "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
    "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
    "SerdeInfo": {"SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"},
}
COMPLETE_PARAMETER = "kafkalake.complete"
NULLABLE_PARAMETER = "kafkalake.nullable"
SCHEMA_VERSIONS_PARAMETER = "kafkalake.schema_versions"


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def table_partitions(glue: Any, database: str, table: str) -> list[dict[str, Any]] | None:
    """Every partition of a table (all pages); None when the table does not exist (yet)."""
    pages = glue.get_paginator("get_partitions").paginate(DatabaseName=database, TableName=table)
    try:
        return [p for page in pages for p in page["Partitions"]]
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "EntityNotFoundException":
            return None
        raise


def glue_type(arrow_type: pa.DataType) -> str:  # noqa: PLR0911 - one return per type family
    """The Hive/Glue type for an Arrow type (nested types included)."""
    simple = {
        pa.int8(): "tinyint",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.uint8(): "smallint",
        pa.uint16(): "int",
        pa.uint32(): "bigint",
        pa.uint64(): "bigint",
        pa.float16(): "float",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.bool_(): "boolean",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.binary(): "binary",
        pa.large_binary(): "binary",
        pa.date32(): "date",
        pa.date64(): "date",
    }
    if arrow_type in simple:
        return simple[arrow_type]
    if pa.types.is_timestamp(arrow_type):
        return "timestamp"
    if pa.types.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    if pa.types.is_struct(arrow_type):
        inner = ",".join(f"{f.name}:{glue_type(f.type)}" for f in arrow_type)
        return f"struct<{inner}>"
    if pa.types.is_map(arrow_type):
        return f"map<{glue_type(arrow_type.key_type)},{glue_type(arrow_type.item_type)}>"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return f"array<{glue_type(arrow_type.value_type)}>"
    if pa.types.is_dictionary(arrow_type):
        return glue_type(arrow_type.value_type)
    raise ValueError(f"Arrow type {arrow_type} has no Glue equivalent; cast it in the archiver")


def glue_columns(schema: pa.Schema) -> list[dict[str, Any]]:
    """Glue columns for a Parquet file's schema, minus the partition keys; non-nullable ones are marked."""
    return [
        {"Name": f.name, "Type": glue_type(f.type), "Parameters": {NULLABLE_PARAMETER: str(f.nullable).lower()}}
        for f in schema
        if f.name not in PARTITION_KEYS
    ]


def table_input(name: str, location: str, columns: list[dict[str, Any]], parameters: dict[str, str]) -> dict[str, Any]:
    return {
        "Name": name,
        "TableType": "EXTERNAL_TABLE",
        "Parameters": {"classification": "parquet", "EXTERNAL": "TRUE", **parameters},
        "PartitionKeys": [dict(c) for c in PARTITION_COLUMNS],
        "StorageDescriptor": {"Columns": columns, "Location": location, **copy.deepcopy(PARQUET_SERDE)},
    }


def table_input_from(table: dict[str, Any]) -> dict[str, Any]:
    """An ``UpdateTable`` input from a ``GetTable`` answer (drops the read-only fields)."""
    allowed = (
        "Name",
        "Description",
        "Owner",
        "Retention",
        "StorageDescriptor",
        "PartitionKeys",
        "TableType",
        "Parameters",
        "ViewOriginalText",
        "ViewExpandedText",
    )
    return {k: copy.deepcopy(table[k]) for k in allowed if k in table}


def partition_input(
    table: dict[str, Any], location: str, partition: Partition, parameters: dict[str, str] | None = None
) -> dict[str, Any]:
    """A partition whose storage descriptor is derived from the table's, pointing at ``location``."""
    descriptor = copy.deepcopy(table.get("StorageDescriptor", {}))
    descriptor["Location"] = location
    return {"Values": partition.values(), "StorageDescriptor": descriptor, "Parameters": dict(parameters or {})}


@dataclass
class BatchOutcome:
    """Per-partition outcome of a batch: values tuple → error code for the failures."""

    done: set[tuple[str, ...]] = field(default_factory=set)
    existing: set[tuple[str, ...]] = field(default_factory=set)
    """Of ``done``, the partitions a create found already there (``AlreadyExistsException``)."""
    failed: dict[tuple[str, ...], str] = field(default_factory=dict)
    calls: int = 0


def batch_create_partitions(glue: Any, database: str, table: str, inputs: Iterable[dict[str, Any]]) -> BatchOutcome:
    """``BatchCreatePartition`` in chunks of 100; ``AlreadyExistsException`` counts as done."""
    outcome = BatchOutcome()
    for chunk in chunks(list(inputs), CREATE_CHUNK):
        answer = glue.batch_create_partition(DatabaseName=database, TableName=table, PartitionInputList=list(chunk))
        outcome.calls += 1
        errors = {tuple(e["PartitionValues"]): e["ErrorDetail"]["ErrorCode"] for e in answer.get("Errors", [])}
        for item in chunk:
            values = tuple(item["Values"])
            code = errors.get(values)
            if code == "AlreadyExistsException":
                outcome.existing.add(values)
            if code is None or code == "AlreadyExistsException":
                outcome.done.add(values)
            else:
                outcome.failed[values] = code
    return outcome


def batch_get_partitions(
    glue: Any, database: str, table: str, values: Iterable[tuple[str, ...]]
) -> tuple[dict[tuple[str, ...], dict[str, Any]], int]:
    """Existing partitions among ``values`` (``BatchGetPartition`` in chunks of 1000), and the calls made."""
    found: dict[tuple[str, ...], dict[str, Any]] = {}
    calls = 0
    for chunk in chunks(sorted(set(values)), GET_CHUNK):
        pending = [{"Values": list(v)} for v in chunk]
        while pending:
            answer = glue.batch_get_partition(DatabaseName=database, TableName=table, PartitionsToGet=pending)
            calls += 1
            for item in answer.get("Partitions", []):
                found[tuple(item["Values"])] = item
            pending = answer.get("UnprocessedKeys", [])
    return found, calls


def batch_update_partitions(glue: Any, database: str, table: str, inputs: Iterable[dict[str, Any]]) -> BatchOutcome:
    """``BatchUpdatePartition`` in chunks of 100; each input is a complete ``PartitionInput``."""
    outcome = BatchOutcome()
    for chunk in chunks(list(inputs), CREATE_CHUNK):
        entries = [{"PartitionValueList": item["Values"], "PartitionInput": item} for item in chunk]
        answer = glue.batch_update_partition(DatabaseName=database, TableName=table, Entries=entries)
        outcome.calls += 1
        errors = {tuple(e["PartitionValueList"]): e["ErrorDetail"]["ErrorCode"] for e in answer.get("Errors", [])}
        for item in chunk:
            values = tuple(item["Values"])
            if values in errors:
                outcome.failed[values] = errors[values]
            else:
                outcome.done.add(values)
    return outcome


@dataclass(frozen=True)
class CrawlerSpec:
    """A topic's crawler, defined once: rendered for boto3 (``request``) and for CloudFormation (infra)."""

    name: str
    database: str
    location: str
    """``s3://bucket/data/<env>/<company>/<domain>/<topic>/``: the table's location."""
    exclusions: tuple[str, ...] = (f"{COMPACTED_DIR}/**",)
    """Glob patterns, relative to the location, the crawler skips: the compaction output under the table's location
    (``kafkalake.layout``) is never a table or a partition of its own."""
    recrawl_behavior: str = "CRAWL_EVERYTHING"
    """Triggered only for new tables and schema versions, so every run looks at everything."""
    update_behavior: str = "UPDATE_IN_DATABASE"
    delete_behavior: str = "LOG"
    configuration: str = json.dumps(
        {
            "Version": 1.0,
            "Grouping": {"TableGroupingPolicy": "CombineCompatibleSchemas", "TableLevelConfiguration": 5},
            "CrawlerOutput": {"Partitions": {"AddOrUpdateBehavior": "InheritFromTable"}},
        }
    )
    """Compatible schema versions combine into one table whose partitions inherit from it."""

    def request(self, role: str, security_configuration: str | None = None) -> dict[str, Any]:
        """The ``CreateCrawler`` request."""
        request = {
            "Name": self.name,
            "Role": role,
            "DatabaseName": self.database,
            "Targets": {"S3Targets": [{"Path": self.location, "Exclusions": list(self.exclusions)}]},
            "RecrawlPolicy": {"RecrawlBehavior": self.recrawl_behavior},
            "SchemaChangePolicy": {"UpdateBehavior": self.update_behavior, "DeleteBehavior": self.delete_behavior},
            "Configuration": self.configuration,
        }
        if security_configuration:
            request["CrawlerSecurityConfiguration"] = security_configuration
        return request
