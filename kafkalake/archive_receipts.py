"""The archiver's receipts: one small durable record per carried-out plan, what the offset audit checks.

Written after the plan's objects and before its offsets are committed, under a key derived from the stored plan
(``TablePrefix.receipt_key``, beside the compaction manifests), so a plan redone after a crash writes the same
receipt again. Per Kafka partition: the offset range read, and
how its records were accounted for (rows stored in data objects, quarantined, tombstones dropped); and every
object written with its Kafka partition, offsets and rows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PartitionAccount:
    """One Kafka partition's part of a plan: offsets ``[start, end)``."""

    start: int
    end: int
    read: int
    stored: int
    """Rows in data objects (tombstone rows included when the topic keeps them)."""
    quarantined: int
    dropped_tombstones: int

    def balanced(self) -> bool:
        return self.read == self.stored + self.quarantined + self.dropped_tombstones


@dataclass(frozen=True)
class StoredObject:
    key: str
    kafka_partition: int
    first: int
    last: int
    rows: int


@dataclass
class ArchiveReceipt:
    kafka_topic: str
    plan_created_at: str
    partitions: dict[int, PartitionAccount]
    data: list[StoredObject] = field(default_factory=list)
    quarantine: list[StoredObject] = field(default_factory=list)

    def to_json(self) -> str:
        document = asdict(self)
        document["partitions"] = {str(p): asdict(a) for p, a in sorted(self.partitions.items())}
        return json.dumps(document, indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ArchiveReceipt:
        return cls(
            raw["kafka_topic"],
            raw["plan_created_at"],
            {int(p): PartitionAccount(**a) for p, a in raw["partitions"].items()},
            [StoredObject(**o) for o in raw["data"]],
            [StoredObject(**o) for o in raw["quarantine"]],
        )
