"""The batch an erasure run carries out, stored in the erasure lease's work before any rewrite, so a run that dies
is carried forward by the next from where it got: per table, each partition's rows to leave out and its progress
(planned → swapped, with the run whose output replaced the inputs → purged), each quarantine object's rows; an
Iceberg table's rows and its delete's progress."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class PartitionErasure:
    values: list[str]
    keys: list[list[int]]
    """[Kafka partition, offset] of every row to leave out."""
    rows_by_request: dict[str, int]
    run_id: str = ""
    """The rewrite whose output replaced the inputs (set once swapped)."""
    inputs: list[str] = field(default_factory=list)
    swapped_at: str | None = None
    purged: bool = False
    objects_deleted: list[str] = field(default_factory=list)
    versions_deleted: int = 0


@dataclass
class QuarantineErasure:
    keys: list[list[int]]
    rows_by_request: dict[str, int]
    done: bool = False
    versions_deleted: int = 0
    drop_raw: bool = False
    """Keep only the object's offsets and errors: its raw bytes may hold a subject field, which no scan can find in
    records that failed to decode (``spark_jobs.erasure.matching.table_rows``)."""


@dataclass
class TableDelete:
    """An Iceberg table's rows to delete in one commit, and how far it got: deleted (``deleted_at``, the data files
    it removed) → cleaned (snapshots expired, orphans removed, versions deleted: ``purged``)."""

    keys: list[list[int]]
    """[Kafka partition, offset] of every row to delete."""
    rows_by_request: dict[str, int]
    base_snapshot: int | None = None
    """The table's current snapshot just before the delete: the delete's commits are the ones after it."""
    deleted_at: str | None = None
    removed: list[str] = field(default_factory=list)
    """The data files (URIs) the delete removed from the table."""
    purged: bool = False
    versions_deleted: int = 0


@dataclass
class TableBatch:
    partitions: dict[str, PartitionErasure] = field(default_factory=dict)
    """Partition path (``schema_version=…/dt=…/hour=…/``) → its erasure."""
    quarantine: dict[str, QuarantineErasure] = field(default_factory=dict)
    """Quarantine object key → its erasure."""
    iceberg: TableDelete | None = None
    """An Iceberg table's rows (its partitions are the table's own business)."""

    @property
    def done(self) -> bool:
        partitions = all(p.purged for p in self.partitions.values()) and all(q.done for q in self.quarantine.values())
        return partitions and (self.iceberg is None or self.iceberg.purged)

    def requests(self) -> set[str]:
        """The requests some row of this table answers."""
        counts = [p.rows_by_request for p in self.partitions.values()]
        counts += [q.rows_by_request for q in self.quarantine.values()]
        counts += [self.iceberg.rows_by_request] if self.iceberg else []
        return {request_id for count in counts for request_id in count}

    def add(self, other: TableBatch) -> None:
        """Take ``other``'s rows too (another scan of the same table, for other requests)."""
        for path, entry in other.partitions.items():
            mine = self.partitions.setdefault(path, PartitionErasure(entry.values, [], {}))
            _add_rows(mine.keys, mine.rows_by_request, entry.keys, entry.rows_by_request)
        for key, quarantined in other.quarantine.items():
            held = self.quarantine.setdefault(key, QuarantineErasure([], {}))
            _add_rows(held.keys, held.rows_by_request, quarantined.keys, quarantined.rows_by_request)
            held.drop_raw = held.drop_raw or quarantined.drop_raw
        if other.iceberg is not None:
            deleting = self.iceberg = self.iceberg or TableDelete([], {})
            _add_rows(deleting.keys, deleting.rows_by_request, other.iceberg.keys, other.iceberg.rows_by_request)


def _add_rows(
    keys: list[list[int]], counts: dict[str, int], more: list[list[int]], more_counts: dict[str, int]
) -> None:
    keys += [k for k in more if k not in keys]
    for request_id, rows in more_counts.items():
        counts[request_id] = counts.get(request_id, 0) + rows


@dataclass
class Batch:
    batch_id: str
    started_at: str
    requests: list[str]
    tables: dict[str, TableBatch] = field(default_factory=dict)
    """``database.table`` → its erasure; every table in some request's scope, also without matches."""
    earlier: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Request id → the receipt it had when the batch reopened it for late rows (amended when the batch is done)."""

    def to_work(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_work(cls, work: dict[str, Any]) -> Batch:
        tables = {
            name: TableBatch(
                {k: PartitionErasure(**p) for k, p in t["partitions"].items()},
                {k: QuarantineErasure(**q) for k, q in t["quarantine"].items()},
                TableDelete(**t["iceberg"]) if t.get("iceberg") else None,
            )
            for name, t in work["tables"].items()
        }
        return cls(work["batch_id"], work["started_at"], list(work["requests"]), tables, work.get("earlier", {}))

    @property
    def done(self) -> bool:
        return all(t.done for t in self.tables.values())
