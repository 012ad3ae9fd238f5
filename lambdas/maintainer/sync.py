"""One table at a time: find its settings, make sure Glue has the table and every schema version of the new keys
(a crawler, or native inference from Parquet footers), tag it in Lake Formation, then hand its partitions to
``PartitionSync``.

Rules only: Glue, S3 and Lake Formation through ``lambdas.maintainer.dal``, what happened into the ``Report``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from kafkalake.glue import SCHEMA_VERSIONS_PARAMETER, table_input, table_input_from
from kafkalake.iceberg import METADATA_LOCATION_PARAMETER, committed_data, current_summaries
from kafkalake.layout import DataKey, TablePrefix
from kafkalake.metrics import MaintainerCount
from kafkalake.naming import TableInference
from kafkalake.topic_spec import TableFormat
from lambdas.maintainer.dal import CachedGlue, LakeObjects, LakeTags, State, error_code
from lambdas.maintainer.inference import IncompatibleSchema, merge_columns
from lambdas.maintainer.partitions import PartitionSync
from lambdas.maintainer.report import Report
from lambdas.tables import LakeTable

MERGE_ATTEMPTS = 5
"""Reads and updates of a table a schema merge tries before it fails the table (``SchemaMergeConflict``)."""


class NotAnIcebergTable(RuntimeError):
    """A topic of ``table_format: iceberg`` whose Glue table is not an Iceberg table (no ``metadata_location``)."""


class SchemaMergeConflict(RuntimeError):
    """A schema merge that lost every optimistic-lock race it tried: the table fails for this drain (isolated)."""


@dataclass(frozen=True)
class TableSync:
    """Brings one table's Glue entries in line with a set of new data keys."""

    tables: Mapping[TablePrefix, LakeTable]
    """The catalog's tables; keys under other prefixes are ours only if their database is one of the catalog's and
    their crawler exists by convention."""
    glue: CachedGlue
    lake: LakeObjects
    state: State
    report: Report
    partitions: PartitionSync
    tags: LakeTags

    def sync_isolated(self, prefix: TablePrefix, keys: set[DataKey]) -> set[DataKey] | None:
        """``sync``, never letting one table stop the others: on EntityNotFoundException the table's cached
        entries are dropped and the sync is tried once more; any other failure (throttling that outlasted
        botocore's retries, access denied, ...) is reported, the table's messages stay for the next run, and the
        answer is None."""
        for attempt in (1, 2):
            try:
                return self.sync(prefix, keys)
            except ClientError as exc:
                if error_code(exc) == "EntityNotFoundException" and attempt == 1:
                    self._forget(prefix)
                    continue
                self._failed(prefix, keys, exc)
            except Exception as exc:  # noqa: BLE001 - reported below; the other tables go on
                self._failed(prefix, keys, exc)
            return None
        return None

    def _forget(self, prefix: TablePrefix) -> None:
        table = self._resolve(prefix)
        if table is not None:
            self.glue.forget_table(table.database, table.table)
        self.report.counts[MaintainerCount.TABLE_CACHE_DROPPED] += 1

    def _failed(self, prefix: TablePrefix, keys: set[DataKey], exc: Exception) -> None:
        table = self.tables.get(prefix)
        self.report.table_failed(table.name if table else prefix.data_prefix(), exc, len(keys))

    def sync(self, prefix: TablePrefix, keys: set[DataKey]) -> set[DataKey]:
        """The keys whose table, schema version and partition Glue now holds (their messages can go)."""
        table = self._resolve(prefix)
        if table is None:
            self.report.counts[MaintainerCount.IGNORED_UNKNOWN_TABLE] += len(keys)
            return set(keys)
        if table.table_format == TableFormat.ICEBERG:
            return self._iceberg(table, keys)
        described = self.glue.table(table.database, table.table)
        if described is None:
            described = self._create_table(table, keys)
            if described is None:
                return set()
        accepted = self._check_versions(table, described, keys)
        self._tag(table)
        return self.partitions.sync(table, accepted)

    def _iceberg(self, table: LakeTable, keys: set[DataKey]) -> set[DataKey]:
        """An Iceberg table's new objects or commits: no partition, no crawler (the archiver made the table and
        commits its files). Its LF-tags; its freshness and complete hours from its current snapshots' summaries
        (``kafkalake.iceberg.committed_data``), read from the metadata file Glue names now (each commit moves it,
        so never from the cache). Before the table's first commit the keys wait."""
        described = self.glue.table(table.database, table.table, fresh=True)
        if described is None:
            self.report.counts[MaintainerCount.DEFERRED_UNTIL_TABLE_EXISTS] += len(keys)
            return set()
        self._tag(table)
        location = described.get("Parameters", {}).get(METADATA_LOCATION_PARAMETER)
        if not location:
            raise NotAnIcebergTable(
                f"{table.database}.{table.table} has no {METADATA_LOCATION_PARAMETER!r} parameter, so it is not an "
                f"Iceberg table, but its topic's table_format is iceberg: drop the table (the archiver makes it at its "
                "next run) or set the topic's table_format to hive"
            )
        metadata = self.lake.table_metadata(location)
        self.partitions.note_committed(table, committed_data(current_summaries(metadata)))
        self.report.counts[MaintainerCount.ICEBERG_OBJECTS] += len(keys)
        return set(keys)

    def _tag(self, table: LakeTable) -> None:
        """The table's LF-tags, and its personal columns' once Glue has them (a column a crawler or a merge adds
        later is tagged by the sync that finds it). A table outside the catalog keeps its database's tags, the
        strictest."""
        if table.sensitivity is None:
            return
        described = self.glue.table(table.database, table.table) or {}
        columns = {c["Name"] for c in described.get("StorageDescriptor", {}).get("Columns", [])}
        present = [c for c in table.personal_columns if c in columns]
        self.tags.tag(table.database, table.table, table.sensitivity, present)

    def _resolve(self, prefix: TablePrefix) -> LakeTable | None:
        known = self.tables.get(prefix)
        if known is not None:
            return known
        by_convention = LakeTable.by_convention(prefix)
        if by_convention.database not in {t.database for t in self.tables.values()}:
            # Not one of the databases the stack deploys: no crawler of ours can be there, and the role may look up
            # only our databases' crawlers (AWS would answer AccessDenied, not EntityNotFound).
            return None
        return by_convention if self.glue.crawler_exists(by_convention.crawler_name) else None

    def _start_crawler(self, table: LakeTable, why: MaintainerCount) -> None:
        self.glue.start_crawler(table.crawler_name)
        self.report.counts[why] += 1

    def _create_table(self, table: LakeTable, keys: set[DataKey]) -> dict[str, Any] | None:
        if table.inference == TableInference.CRAWLER:
            self._start_crawler(table, MaintainerCount.CRAWLER_REASON_NEW_TABLE)
            self.report.counts[MaintainerCount.DEFERRED_UNTIL_TABLE_EXISTS] += len(keys)
            return None
        first = min(keys, key=lambda k: (k.partition.schema_version, k.key()))
        columns = self.lake.footer_columns(first.key())
        version = first.partition.schema_version
        location = table.location(self.lake.bucket)
        request = table_input(table.table, location, columns, {SCHEMA_VERSIONS_PARAMETER: str(version)})
        if self.glue.create_table(table.database, request):
            self.report.event("TableCreated", table, schema_version=version, columns=[c["Name"] for c in columns])
        return self.glue.table(table.database, table.table, fresh=True)

    def _version_known(self, table: LakeTable, described: dict[str, Any], version: int) -> bool:
        cache_key = (table.database, table.table, version)
        if self.state.versions.get(cache_key):
            return True
        listed = described.get("Parameters", {}).get(SCHEMA_VERSIONS_PARAMETER, "")
        known = str(version) in listed.split(",")
        if not known and table.inference == TableInference.CRAWLER:
            known = self.glue.has_version_partition(table.database, table.table, version)
        if known:
            self.state.versions.put(cache_key, True)
        return known

    def _check_versions(self, table: LakeTable, described: dict[str, Any], keys: set[DataKey]) -> set[DataKey]:
        """Keys whose schema version the table can take; a new version re-crawls or merges columns."""
        accepted: set[DataKey] = set()
        for version in sorted({k.partition.schema_version for k in keys}):
            of_version = {k for k in keys if k.partition.schema_version == version}
            if not self._version_known(table, described, version):
                if table.inference == TableInference.CRAWLER:
                    self._start_crawler(table, MaintainerCount.CRAWLER_REASON_NEW_SCHEMA_VERSION)
                    self.report.event("SchemaVersionAdded", table, schema_version=version, columns_added=[])
                else:
                    try:
                        described = self._merge_version(table, described, version, of_version)
                    except IncompatibleSchema as exc:
                        self.report.counts[MaintainerCount.SCHEMA_INCOMPATIBLE] += 1
                        self.report.errors.append(f"{table.name} schema_version={version}: {exc}")
                        continue
                self.state.versions.put((table.database, table.table, version), True)
            accepted |= of_version
        return accepted

    def _merge_version(
        self, table: LakeTable, described: dict[str, Any], version: int, keys: set[DataKey]
    ) -> dict[str, Any]:
        """Merge ``version``'s columns into the table under Glue's optimistic lock: an update refused because the
        table changed since it was read (another drain merged another version) re-reads the table and merges
        again, at most ``MERGE_ATTEMPTS`` times; a table that already lists the version is left as it is."""
        sample = min(keys, key=lambda k: k.key())
        incoming = self.lake.footer_columns(sample.key())
        for attempt in range(MERGE_ATTEMPTS):
            if attempt:  # the update was refused: the table changed since it was read
                described = self._reread(table)
            listed = described.get("Parameters", {}).get(SCHEMA_VERSIONS_PARAMETER, "")
            versions = {int(v) for v in listed.split(",") if v}
            if version in versions:
                return described
            merged, added = merge_columns(described["StorageDescriptor"]["Columns"], incoming)
            update = table_input_from(described)
            update["StorageDescriptor"]["Columns"] = merged
            listing = ",".join(str(v) for v in sorted({*versions, version}))
            update.setdefault("Parameters", {})[SCHEMA_VERSIONS_PARAMETER] = listing
            if self.glue.update_table(table.database, update, described["VersionId"]):
                columns_added = [c["Name"] for c in added]
                self.report.event("SchemaVersionAdded", table, schema_version=version, columns_added=columns_added)
                return self._reread(table)
        raise SchemaMergeConflict(
            f"schema_version={version} not merged: the table changed between reading and updating it "
            f"{MERGE_ATTEMPTS} times in a row (other drains or writers updating it at the same time)"
        )

    def _reread(self, table: LakeTable) -> dict[str, Any]:
        described = self.glue.table(table.database, table.table, fresh=True)
        if described is None:
            raise IncompatibleSchema(f"table {table.name} disappeared while it was being updated")
        return described
