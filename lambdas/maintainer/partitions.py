"""The partitions of one table whose schema versions Glue takes: add those Glue lacks, mark the hours that are
complete, and note objects that landed in partitions already compacted; an Iceberg table's complete hours and
freshness from its snapshots.

Rules only: Glue and S3 through ``lambdas.maintainer.dal``, what happened into the ``Report``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from kafkalake.glue import COMPLETE_PARAMETER, partition_input
from kafkalake.iceberg import CommittedData
from kafkalake.layout import PARTITION_KEYS, DataKey, Partition, is_compaction_output
from kafkalake.metrics import MaintainerCount
from kafkalake.s3_location import parse_s3_uri
from lambdas.maintainer.dal import CachedGlue, LakeObjects, State
from lambdas.maintainer.report import MAX_SAMPLES, Report
from lambdas.tables import LakeTable


def completion_candidates(partitions: Iterable[Partition], now: datetime, delay: timedelta) -> set[Partition]:
    """Hour H is complete once hour H+1 has data and the delay after H's end has passed: for each partition with
    data, the previous hour of every schema version up to its own."""
    candidates = set()
    for later in partitions:
        earlier = later.previous()
        if earlier.end + delay > now:
            continue
        for version in range(1, later.schema_version + 1):
            candidates.add(Partition(version, earlier.dt, earlier.hour))
    return candidates


@dataclass(frozen=True)
class PartitionSync:
    """One drain's partition work, table by table."""

    glue: CachedGlue
    lake: LakeObjects
    state: State
    report: Report
    completeness_delay: timedelta
    now: datetime

    def sync(self, table: LakeTable, keys: set[DataKey]) -> set[DataKey]:
        """The keys whose partition Glue now holds; the hours before them marked complete, late objects noted."""
        partitions = {k.partition for k in keys}
        confirmed = self.add(table, partitions)
        self.mark_complete(table, partitions)
        done = {k for k in keys if k.partition in confirmed}
        self.note_late(table, done)
        self.note_freshness(table, done)
        return done

    def note_freshness(self, table: LakeTable, done: set[DataKey]) -> None:
        """How old the newest Kafka record is that Glue now holds for the table: from the footer of the newest
        object (by offset: Kafka times grow with offsets) of each Kafka partition made queryable in this drain."""
        newest: dict[int, DataKey] = {}
        for key in done:
            if key.kafka_partition not in newest or key.last_offset > newest[key.kafka_partition].last_offset:
                newest[key.kafka_partition] = key
        times = [t for key in newest.values() if (t := self.lake.newest_kafka_time(key.key())) is not None]
        if times:
            self.report.data_age_seconds[table.name] = (self.now - max(times)).total_seconds()

    def add(self, table: LakeTable, partitions: set[Partition]) -> set[Partition]:
        """The partitions Glue holds now, each confirmed by Glue in this drain: one ``BatchCreatePartition`` per 100
        of them creates those missing and answers ``AlreadyExists`` for the others (the acknowledgement rule in
        ``logic``). Locations are cached for the late-data check: a created partition's is the one given here,
        an existing one's is asked for (``BatchGetPartition``) only when the cache lacks it."""
        db, name = table.database, table.table
        described = self.glue.table(db, name)
        if described is None:
            return set()
        location = table.location(self.lake.bucket)
        by_values = {tuple(p.values()): p for p in partitions}
        inputs = [partition_input(described, f"{location}{p.path()}", p) for p in sorted(partitions)]
        outcome = self.glue.create_partitions(db, name, inputs)
        for values, code in sorted(outcome.failed.items()):
            self.report.counts[MaintainerCount.PARTITION_ERRORS] += 1
            self.report.errors.append(f"{table.name} {list(values)}: {code}")
        cache = self.state.partitions
        for values in outcome.done - outcome.existing:
            cache.put((db, name, values), f"{location}{by_values[values].path()}")
        uncached = [values for values in outcome.existing if cache.get((db, name, values)) is None]
        for values, found in self.glue.partitions(db, name, uncached).items():
            cache.put((db, name, values), found.get("StorageDescriptor", {}).get("Location", ""))
        return {by_values[values] for values in outcome.done}

    def note_late(self, table: LakeTable, keys: set[DataKey]) -> None:
        """Objects in closed hours (ended more than the completeness delay ago) whose partition's location is a
        compaction run directory get a marker for the compactor and a ``LateData`` event. The location comes from
        the partition cache, like every lookup: a compaction that swapped the partition after it was cached is
        seen once the entry expires (the compactor takes the late file at its next run either way)."""
        late: dict[tuple[str, ...], list[DataKey]] = defaultdict(list)
        for key in keys:
            values = tuple(key.partition.values())
            location = self.state.partitions.get((table.database, table.table, values)) or ""
            closed = key.partition.end + self.completeness_delay <= self.now
            if closed and location and is_compaction_output(parse_s3_uri(location).key):
                late[values].append(key)
        for values, found in sorted(late.items()):
            objects = sorted(k.key() for k in found)
            self.lake.put_late_data_marker(found[0].table, found[0].partition, objects, self.now)
            self.report.counts[MaintainerCount.LATE_OBJECTS] += len(objects)
            partition = dict(zip(PARTITION_KEYS, values, strict=True))
            self.report.event("LateData", table, partition=partition, objects=objects[:MAX_SAMPLES])

    def mark_complete(self, table: LakeTable, partitions: Iterable[Partition]) -> None:
        """Mark the hours before those with new data complete (see ``completion_candidates``)."""
        db, name = table.database, table.table
        candidates = {tuple(p.values()) for p in completion_candidates(partitions, self.now, self.completeness_delay)}
        candidates = {c for c in candidates if not self.state.completed.get((db, name, c))}
        if not candidates:
            return
        found = self.glue.partitions(db, name, candidates)
        for values in candidates:  # checked: not again within the TTL (quiet hours fall to the compactor's delay)
            self.state.completed.put((db, name, values), True)
        updates = [
            {
                "Values": list(values),
                "StorageDescriptor": partition["StorageDescriptor"],
                "Parameters": {**partition.get("Parameters", {}), COMPLETE_PARAMETER: "true"},
            }
            for values, partition in sorted(found.items())
            if partition.get("Parameters", {}).get(COMPLETE_PARAMETER) != "true"
        ]
        outcome = self.glue.update_partitions(db, name, updates)
        self.report.counts[MaintainerCount.PARTITIONS_COMPLETED] += len(outcome.done)
        for values, code in sorted(outcome.failed.items()):
            self.report.errors.append(f"{table.name} {list(values)}: marking complete failed: {code}")
        self.announce_complete(table, sorted(outcome.done))

    def note_committed(self, table: LakeTable, committed: CommittedData) -> None:
        """An Iceberg table's freshness and complete hours, from what its current snapshots hold. Hour H is
        complete by the same rule as a Hive partition (``completion_candidates``), among the hours with rows; it
        has no partition to mark, so its event is the record. An hour whose snapshots expired
        (``kafkalake.iceberg.SNAPSHOT_RETENTION``) before any drain saw the next hour's rows gets no event."""
        db, name = table.database, table.table
        candidates = completion_candidates(committed.partitions, self.now, self.completeness_delay)
        complete = {tuple(p.values()) for p in candidates & committed.partitions}
        complete = {c for c in complete if not self.state.completed.get((db, name, c))}
        for values in complete:
            self.state.completed.put((db, name, values), True)
        self.report.counts[MaintainerCount.PARTITIONS_COMPLETED] += len(complete)
        self.announce_complete(table, sorted(complete))
        if committed.newest_kafka_time is not None:
            self.report.data_age_seconds[table.name] = (self.now - committed.newest_kafka_time).total_seconds()

    def announce_complete(self, table: LakeTable, complete: Iterable[tuple[str, ...]]) -> None:
        """``PartitionComplete`` for each hour, by the one drain whose claim creates it (overlapping drains may
        both have found it complete)."""
        for values in complete:
            if not self.lake.claim_completeness_event(table.prefix, Partition.from_values(list(values)), self.now):
                self.report.counts[MaintainerCount.COMPLETENESS_CLAIMED_ELSEWHERE] += 1
                continue
            self.report.event("PartitionComplete", table, partition=dict(zip(PARTITION_KEYS, values, strict=True)))
