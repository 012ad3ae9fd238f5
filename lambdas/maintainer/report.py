"""What one drain did: its counts (``MaintainerCount``), the events it publishes, and what failed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kafkalake.metrics import MaintainerCount
from lambdas.tables import LakeTable

MAX_REASON = 300
"""Characters of a failure's message a report repeats."""
MAX_SAMPLES = 20
"""Keys that are not ours logged with their reason per drain, and late objects named per ``LateData`` event (the
rest are only counted)."""


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    """``MaintainerCount`` → how many."""
    events: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    foreign_keys: list[str] = field(default_factory=list)
    """A sample of the keys that are not this maintainer's and why: outside the data layout, or of another
    environment."""
    failed_tables: dict[str, str] = field(default_factory=dict)
    """``database.table`` (or the data prefix) → what failed; its messages stay for the next run."""
    data_age_seconds: dict[str, float] = field(default_factory=dict)
    """``database.table`` → the age, at this drain, of the newest Kafka record it made queryable in the table."""

    def event(self, kind: str, table: LakeTable, **detail: Any) -> None:
        """An event about ``table`` for the bus (``TableCreated``, ``SchemaVersionAdded``, ``PartitionComplete``,
        ``LateData``)."""
        self.events.append({"type": kind, "database": table.database, "table": table.table, **detail})

    def table_failed(self, name: str, exc: Exception, objects: int) -> None:
        reason = f"{type(exc).__name__}: {str(exc)[:MAX_REASON]}"
        self.counts[MaintainerCount.TABLES_FAILED] += 1
        self.failed_tables[name] = reason
        self.errors.append(f"{name}: {reason}; its {objects} objects stay queued for the next run")

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": dict(sorted(self.counts.items())),
            "events": self.events,
            "errors": self.errors,
            "foreign_keys": self.foreign_keys,
            "failed_tables": self.failed_tables,
            "data_age_seconds": self.data_age_seconds,
        }
