"""The reconciler's data access: the only code that calls S3 and Glue (``lambdas.reconciler.logic`` takes these)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kafkalake.glue import BatchOutcome, batch_create_partitions, table_partitions
from kafkalake.s3_location import S3Location


@dataclass(frozen=True)
class LakeFolders:
    """The lake bucket as folders: delimiter listings, never object by object."""

    s3: Any
    bucket: str

    def folders(self, prefix: str) -> Iterator[str]:
        """The sub-folder names directly under ``prefix`` (one delimiter listing, all pages)."""
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/")
        for page in pages:
            for common in page.get("CommonPrefixes", []):
                yield common["Prefix"][len(prefix) :]

    def holds_objects(self, where: S3Location) -> bool:
        """Whether anything lies under ``where`` (one listing call of one key)."""
        listed = self.s3.list_objects_v2(Bucket=where.bucket, Prefix=where.as_prefix(), MaxKeys=1)
        return bool(listed.get("KeyCount"))


@dataclass(frozen=True)
class GluePartitions:
    """A table's partitions in Glue."""

    glue: Any

    def partitions(self, database: str, table: str) -> list[dict[str, Any]] | None:
        """Every partition of the table; None when the table does not exist (yet)."""
        return table_partitions(self.glue, database, table)

    def table(self, database: str, table: str) -> dict[str, Any]:
        """The table's definition (what its new partitions' storage descriptors derive from)."""
        return dict(self.glue.get_table(DatabaseName=database, Name=table)["Table"])

    def create(self, database: str, table: str, inputs: Iterable[dict[str, Any]]) -> BatchOutcome:
        """``BatchCreatePartition`` in chunks; an existing partition counts as created."""
        return batch_create_partitions(self.glue, database, table, inputs)
