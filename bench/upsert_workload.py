"""``bench.upsert``'s workload and figures, pure (``tests/unit/test_bench_upsert.py``): the change objects of a
``customer-updated``-shaped topic keyed by its Kafka key, as the archiver writes them for an upsert table (the value's
fields, the Kafka metadata, the business time, the Kafka key, the delete-log flag, the schema version), which ids a
plan changes, and the pairs' ratios and the commits' bytes."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.common import pair_ratios, spread
from kafkalake.layout import Partition
from kafkalake.topic_spec import Envelope
from spark_jobs.archiver.upsert import Keying
from spark_jobs.archiver.writer import TOMBSTONE_COLUMN

KAFKA_PARTITIONS: Final = 3
SHARES: Final = {"updates": 0.80, "inserts": 0.15, "deletes": 0.05}
"""The plan's changes: updates of held keys, inserts of new keys, tombstones of held keys (each key once)."""
KEYING: Final = Keying((), None, Envelope.NONE, kafka_key_kept=True)
"""Keyed by the Kafka key, which the table keeps (``customer-updated`` in the SIGKILL test)."""
START: Final = datetime(2026, 11, 1, tzinfo=UTC)
"""The first hour of the built tables' rows; the plan's changes fall in the hour after the last."""
SCHEMA_VERSION: Final = 1
KAFKA_TOPIC: Final = "bench.customer-updated"
VALUE_FIELDS: Final = pa.schema(
    [
        ("customer_id", pa.int64()),
        ("name", pa.string()),
        ("email", pa.string()),
        ("country", pa.string()),
        ("tier", pa.int32()),
        ("balance", pa.float64()),
    ]
)
CHANGE_SCHEMA: Final = pa.schema(
    [
        *VALUE_FIELDS,
        ("_kafka_partition", pa.int32()),
        ("_kafka_offset", pa.int64()),
        ("_kafka_timestamp", pa.timestamp("us", tz="UTC")),
        ("_business_time", pa.timestamp("us", tz="UTC")),
        ("_key", pa.binary()),
        (TOMBSTONE_COLUMN, pa.bool_()),
        ("schema_version", pa.int32()),
    ]
)
"""A change object's columns as the archiver writes them (tests/unit/test_upsert.py's shape): the value's fields,
the Kafka metadata, the business time, the Kafka key, the delete-log flag, the schema version."""
COUNTRIES: Final = pa.array(["DE", "FR", "NL", "SE", "PL", "ES", "IT", "GB", "US", "BR"])
HEX: Final = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def kafka_keys(ids: np.ndarray) -> pa.Array:
    """Each customer id's Kafka key, ``customer-<id, 10 digits>``, as bytes."""
    digits = pc.utf8_lpad(pc.cast(pa.array(ids, pa.int64()), pa.string()), 10, "0")
    return pc.cast(pc.binary_join_element_wise("customer-", digits, ""), pa.binary())


def change_file(
    ids: np.ndarray,
    times: np.ndarray,
    tombstone: np.ndarray,
    *,
    kafka_partition: int,
    first_offset: int,
    rng: np.random.Generator,
) -> pa.Table:
    """One change object of a Kafka partition: a change of each of ``ids`` at ``times`` (microseconds since the
    epoch, in offset order) at consecutive offsets from ``first_offset``; where ``tombstone``, a Kafka tombstone (no
    value, the delete-log flag set). The email is a 64-character hex digest, as the archiver stores a hashed field."""
    rows = len(ids)
    live = pa.array(~tombstone)
    stamp = pa.array(times, pa.timestamp("us", tz="UTC"))
    digest = HEX[rng.integers(0, 16, (rows, 64), dtype=np.uint8)].reshape(-1)
    email = pa.FixedSizeBinaryArray.from_buffers(pa.binary(64), rows, [None, pa.py_buffer(digest.tobytes())])

    def value(values: pa.Array) -> pa.Array:
        return pc.if_else(live, values, pa.scalar(None, values.type))

    columns = {
        "customer_id": value(pa.array(ids, pa.int64())),
        "name": value(
            pc.binary_join_element_wise("name-", pc.cast(pa.array(rng.integers(0, 2**40, rows)), pa.string()), "")
        ),
        "email": value(pc.cast(pc.cast(email, pa.binary()), pa.string())),
        "country": value(pc.take(COUNTRIES, pa.array(rng.integers(0, len(COUNTRIES), rows)))),
        "tier": value(pa.array(rng.integers(0, 4, rows), pa.int32())),
        "balance": value(pa.array(np.round(rng.uniform(0, 10_000, rows), 2))),
        "_kafka_partition": pa.array(np.full(rows, kafka_partition), pa.int32()),
        "_kafka_offset": pa.array(np.arange(first_offset, first_offset + rows), pa.int64()),
        "_kafka_timestamp": stamp,
        "_business_time": stamp,
        "_key": kafka_keys(ids),
        TOMBSTONE_COLUMN: pa.array(tombstone, pa.bool_()),
        "schema_version": pa.array(np.full(rows, SCHEMA_VERSION), pa.int32()),
    }
    return pa.table(columns, schema=CHANGE_SCHEMA)


@dataclass(frozen=True)
class PlanKeys:
    """The customer ids a plan changes."""

    updates: np.ndarray
    inserts: np.ndarray
    deletes: np.ndarray

    @property
    def changed(self) -> int:
        return len(self.updates) + len(self.inserts) + len(self.deletes)


def plan_keys(held: int, changes: int, rng: np.random.Generator) -> PlanKeys:
    """Which ids a plan of ``changes`` changes on a table holding ids ``0..held-1`` (``SHARES``): distinct held ids
    updated and deleted, new ids inserted."""
    inserts = round(changes * SHARES["inserts"])
    deletes = round(changes * SHARES["deletes"])
    updates = changes - inserts - deletes
    touched = rng.choice(held, size=updates + deletes, replace=False)
    return PlanKeys(touched[:updates], np.arange(held, held + inserts), touched[updates:])


def in_hour(hour: datetime, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` sorted random times within the hour from ``hour``, in microseconds since the epoch."""
    first = int(hour.timestamp() * 1_000_000)
    return np.sort(rng.integers(first, first + 3_600_000_000, count))


def hour_files(
    ids: np.ndarray,
    tombstone: np.ndarray,
    hour: datetime,
    next_offsets: dict[int, int],
    rng: np.random.Generator,
) -> list[tuple[Partition, int, pa.Table]]:
    """The change objects of one hour: the changes of ``ids`` in random order over the hour, each in its Kafka
    partition (id modulo ``KAFKA_PARTITIONS``) at the partition's next offsets (``next_offsets``, moved on)."""
    order = rng.permutation(len(ids))
    ids, tombstone = ids[order], tombstone[order]
    times = in_hour(hour, len(ids), rng)
    found = []
    partition = Partition(SCHEMA_VERSION, hour.date(), hour.hour)
    for kafka_partition in range(KAFKA_PARTITIONS):
        mine = ids % KAFKA_PARTITIONS == kafka_partition
        if not mine.any():
            continue
        first = next_offsets.get(kafka_partition, 0)
        table = change_file(
            ids[mine], times[mine], tombstone[mine], kafka_partition=kafka_partition, first_offset=first, rng=rng
        )
        next_offsets[kafka_partition] = first + table.num_rows
        found.append((partition, kafka_partition, table))
    return found


def summary_bytes(summaries: Sequence[Mapping[str, str]]) -> dict[str, int]:
    """The bytes, files and records a commit's snapshots added and removed (their summaries, summed)."""
    names = {
        "added_bytes": "added-files-size",
        "removed_bytes": "removed-files-size",
        "added_files": "added-data-files",
        "removed_files": "deleted-data-files",
        "added_records": "added-records",
        "removed_records": "deleted-records",
    }
    return {ours: sum(int(s.get(theirs, 0)) for s in summaries) for ours, theirs in names.items()}


def paired(ours: list[float], baseline: list[float]) -> dict[str, Any]:
    """Runs of ours and of the baseline made in alternation: each pair's ratio, their median and spread."""
    ratios = pair_ratios(ours, baseline)
    return {"ratios": ratios, "median": statistics.median(ratios), "spread": spread(ratios)}
