"""What an archiver run reports: a ``Summary`` per carried-out plan, a ``TopicResult`` per topic (its plans, lag and
error), and how they are made: the writer's outcome rows are accounted into the plan's summary (``account``), and
the summary becomes the plan's receipt (``receipt``, ``kafkalake.archive_receipts``).

The fleet job (``spark_jobs.archiver.job``) logs the results and its metrics (``spark_jobs.archiver.metrics``)
publish them; both import them from here, so neither imports the other.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Row

from kafkalake.archive_receipts import ArchiveReceipt, PartitionAccount, StoredObject
from kafkalake.layout import parse_data_key
from kafkalake.topic_catalog import Topic
from kafkalake.undeclared import UNDECLARED_VERSION
from spark_jobs.archiver.plan import Plan
from spark_jobs.archiver.transform import TOMBSTONE
from spark_jobs.archiver.writer import COUNT, QUARANTINE, RETRIED, WAITED, WROTE

PHASES = ("plan", "read_decode", "write", "commit")
"""Seconds per phase of a plan: plan (offsets and the stored plan) and commit (receipt, offsets, plan deleted) are
wall time; read_decode (waiting for Spark's Kafka read and decode) and write (splitting, Parquet, uploads) are
summed over the plan's tasks, which run at once: read and decode are one fused Spark stage, so they cannot be
timed apart without a second pass."""


@dataclass
class Summary:
    """One carried-out plan."""

    topic: str
    plan: dict[int, tuple[int, int]]
    read: int = 0
    written: int = 0
    objects: int = 0
    quarantined: int = 0
    tombstones: int = 0
    quarantine_by_reason: dict[str, int] = field(default_factory=dict)
    per_partition: dict[int, dict[str, int]] = field(default_factory=dict)
    latest_hour: dict[int, str] = field(default_factory=dict)
    """Kafka partition → the start (ISO, UTC) of the latest business hour it wrote data to."""
    stored: list[StoredObject] = field(default_factory=list)
    """Data objects written (rows include kept tombstones), for the plan's receipt."""
    quarantine_objects: list[StoredObject] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds per phase (``PHASES``)."""
    s3_retries: int = 0
    """S3 calls the plan's executor tasks had botocore retry (throttling, 5xx)."""
    redone_plan: bool = False
    shared_job: int = 1
    """Plans carried out in the same Spark job as this one, itself included (light topics', one job for many:
    ``spark_jobs.archiver.light``); 1 for a plan carried out alone."""
    seconds: float = 0.0
    """Wall time of the plan, from loading or making it to deleting it."""
    started: float = field(default_factory=time.monotonic, repr=False)
    """``time.monotonic()`` when the plan began to be loaded or made (``seconds`` counts from it)."""

    def balanced(self) -> bool:
        return self.read == self.written + self.quarantined + self.tombstones

    @property
    def held(self) -> int:
        """Records of schema versions the catalog lacks, held in the restricted quarantine (``kafkalake.undeclared``):
        counted among ``quarantined`` too."""
        return self.quarantine_by_reason.get(UNDECLARED_VERSION, 0)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.monotonic() - started


@dataclass
class TopicResult:
    """One topic's part of a run: the plans it carried out, its lag afterwards, or what failed."""

    name: str
    kafka_topic: str
    plans: list[Summary] = field(default_factory=list)
    lag: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    skipped: str | None = None
    """Why the topic was left to another run (``held by run <id> since <time>``); not a failure."""
    lease_requests: int = 0
    """S3 requests the topic's lease cost this run: taking it, storing and clearing plans, renewals, release."""
    driver_s3_retries: int = 0
    """S3 calls of the driver for the topic (lease, receipts) botocore retried; the executors' are in ``plans``."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def status(self) -> str:
        return "failed" if self.error is not None else "skipped" if self.skipped else "ok"

    def totals(self) -> Counter[str]:
        keys = ("read", "written", "quarantined", "held", "tombstones", "objects")
        return Counter({k: sum(getattr(s, k) for s in self.plans) for k in keys})

    def timings(self) -> dict[str, float]:
        return {phase: round(sum(s.timings.get(phase, 0.0) for s in self.plans), 3) for phase in PHASES}

    @property
    def s3_retries(self) -> int:
        """Every S3 call botocore retried for the topic this run (503 SlowDown, 500 InternalError, timeouts...)."""
        return self.driver_s3_retries + sum(s.s3_retries for s in self.plans)

    def latest_hour(self) -> dict[int, str]:
        latest: dict[int, str] = {}
        for summary in self.plans:
            for partition, hour in summary.latest_hour.items():
                latest[partition] = max(hour, latest.get(partition, hour))
        return latest

    def as_dict(self) -> dict[str, Any]:
        """The JSON line of the job's log."""
        return {
            "topic": self.name,
            "kafka_topic": self.kafka_topic,
            "status": self.status,
            "plans": len([s for s in self.plans if s.plan]),
            **self.totals(),
            "lag": {str(p): n for p, n in sorted(self.lag.items())},
            "latest_hour": {str(p): h for p, h in sorted(self.latest_hour().items())},
            "seconds": round(self.seconds, 3),
            "timings": self.timings(),
            "quarantine_by_reason": dict(sum((Counter(s.quarantine_by_reason) for s in self.plans), Counter())),
            "balanced": all(s.balanced() for s in self.plans),
            "error": self.error,
            "skipped": self.skipped,
            "lease_requests": self.lease_requests,
            "s3_retries": self.s3_retries,
        }


def account(outcome: list[Row], topic: Topic, summary: Summary) -> dict[int, tuple[int, int]]:
    """The writer's outcome rows → the summary: objects, counts per Kafka partition and reason, task timings.
    Returns schema version → (rows, objects) written."""
    reasons: Counter[str] = Counter()
    per_version: dict[int, tuple[int, int]] = {}
    for row in outcome:
        kind, partition, rows = row["kind"], row["kafka_partition"], row["rows"]
        if kind in (WAITED, WROTE):
            phase = "read_decode" if kind == WAITED else "write"
            summary.timings[phase] = summary.timings.get(phase, 0.0) + row["seconds"]
            continue
        if kind == RETRIED:
            summary.s3_retries += rows
            continue
        per = summary.per_partition.setdefault(partition, {})
        if kind == COUNT:
            _add(per, "read", rows)
            summary.read += rows
            if row["error"] == TOMBSTONE:
                _add(per, "tombstones", rows)
                summary.tombstones += rows
            elif row["error"] is not None:
                _add(per, "quarantined", rows)
                reasons[row["error"]] += rows
        elif kind == QUARANTINE:
            summary.quarantine_objects.append(_stored_object(row))
        else:
            stored = _stored_object(row)
            summary.stored.append(stored)
            _add(per, "files", 1)
            _add(per, "written", rows)
            written = parse_data_key(stored.key).partition
            hour = written.start.isoformat()
            summary.latest_hour[partition] = max(hour, summary.latest_hour.get(partition, hour))
            version_rows, version_objects = per_version.get(written.schema_version, (0, 0))
            per_version[written.schema_version] = (version_rows + rows, version_objects + 1)
    summary.objects = len(summary.stored)
    summary.quarantine_by_reason = dict(reasons)
    summary.quarantined = sum(o.rows for o in summary.quarantine_objects)
    kept = summary.tombstones if topic.keeps_tombstones else 0  # delete-log rows are not data rows
    summary.written = sum(o.rows for o in summary.stored) - kept
    return per_version


def _add(counts: dict[str, int], name: str, n: int) -> None:
    counts[name] = counts.get(name, 0) + n


def _stored_object(row: Row) -> StoredObject:
    return StoredObject(row["key"], row["kafka_partition"], row["first_offset"], row["last_offset"], row["rows"])


def receipt(topic: Topic, plan: Plan, summary: Summary) -> ArchiveReceipt:
    """How each Kafka partition's records of the plan were accounted for, and the objects written."""
    accounts = {}
    for partition, (start, end) in sorted(plan.ranges.items()):
        per = summary.per_partition.get(partition, {})
        dropped = 0 if topic.keeps_tombstones else per.get("tombstones", 0)
        stored = sum(o.rows for o in summary.stored if o.kafka_partition == partition)
        accounts[partition] = PartitionAccount(
            start, end, per.get("read", 0), stored, per.get("quarantined", 0), dropped
        )
    return ArchiveReceipt(plan.kafka_topic, plan.created_at, accounts, summary.stored, summary.quarantine_objects)
