"""The batch an erasure run carries out, stored in the erasure lease's work before any rewrite, so a run that dies
is carried forward by the next from where it got: per table, each partition's rows to leave out and its progress
(planned → swapped, with the run whose output replaced the inputs → purged), each quarantine object's rows."""

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


@dataclass
class TableBatch:
    partitions: dict[str, PartitionErasure] = field(default_factory=dict)
    """Partition path (``schema_version=…/dt=…/hour=…/``) → its erasure."""
    quarantine: dict[str, QuarantineErasure] = field(default_factory=dict)
    """Quarantine object key → its erasure."""

    @property
    def done(self) -> bool:
        return all(p.purged for p in self.partitions.values()) and all(q.done for q in self.quarantine.values())


@dataclass
class Batch:
    batch_id: str
    started_at: str
    requests: list[str]
    tables: dict[str, TableBatch] = field(default_factory=dict)
    """``database.table`` → its erasure; every table in some request's scope, also without matches."""

    def to_work(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_work(cls, work: dict[str, Any]) -> Batch:
        tables = {
            name: TableBatch(
                {k: PartitionErasure(**p) for k, p in t["partitions"].items()},
                {k: QuarantineErasure(**q) for k, q in t["quarantine"].items()},
            )
            for name, t in work["tables"].items()
        }
        return cls(work["batch_id"], work["started_at"], list(work["requests"]), tables)

    @property
    def done(self) -> bool:
        return all(t.done for t in self.tables.values())
