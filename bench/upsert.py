"""Upsert tables against append tables (``python -m bench upsert``, issue #53), each in the same run as its baseline.

One plan of BENCH_UPSERT_CHANGES (default 100,000) changes in the archiver's change objects (``bench.upsert_workload``:
80% updates, 15% inserts, 5% tombstones, one object per Kafka partition, one hour), committed by the archiver's own
functions (``spark_jobs.archiver.table_commit``):

- ``upsert_plan`` into an upsert table of BENCH_UPSERT_KEYS (default 1,000,000) keys whose rows' business times span
  BENCH_UPSERT_HOURS (default 168) hours, one data file per hour: the changes read, each key's winner found, the
  changed keys' rows deleted (copy-on-write: every data file read and rewritten) and the winners appended, one commit;
- ``append_plan`` of the same objects into an append table of the same rows (the archiver-shaped files the upsert
  table was built from, one per hour and Kafka partition): their footers read and the files added.

Both tables are built once per size, never changed: each measurement registers a fresh Glue table on the built table's
metadata file, commits the plan to it, drops it and deletes what its commit wrote, so every pair starts from identical
tables and no building is counted. BENCH_PAIRS (default 3) alternated pairs (upsert, append, then the extra variant
``bound_once`` with BENCH_UPSERT_VARIANT=1) at BENCH_UPSERT_KEYS; BENCH_UPSERT_GROWTH_PAIRS (default 1, no variant)
at BENCH_UPSERT_GROWTH (default 10) times as many. Wall and CPU seconds of this process (every thread), upsert ÷
append per pair (median, spread), the seconds in the commit's copy-on-write delete (``table_commit._delete_keys``),
the bytes each commit added and removed (its snapshots' summaries). No Spark.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyiceberg
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import SetPredicate
from pyiceberg.table import Table

from bench.common import say, write_result
from bench.upsert_workload import (
    KAFKA_PARTITIONS,
    KAFKA_TOPIC,
    KEYING,
    SHARES,
    START,
    PlanKeys,
    hour_files,
    paired,
    plan_keys,
    summary_bytes,
)
from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.iceberg import table_catalog, table_location
from kafkalake.layout import DataKey, Partition, TablePrefix
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from spark_jobs.archiver import table_commit
from spark_jobs.archiver.table_commit import append_plan, upsert_plan

KEYS = int(os.environ.get("BENCH_UPSERT_KEYS", "1000000"))
CHANGES = int(os.environ.get("BENCH_UPSERT_CHANGES", "100000"))
GROWTH = int(os.environ.get("BENCH_UPSERT_GROWTH", "10"))
"""The second size: this many times BENCH_UPSERT_KEYS (1: the first size only)."""
HOURS = int(os.environ.get("BENCH_UPSERT_HOURS", "168"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "3"))
GROWTH_PAIRS = int(os.environ.get("BENCH_UPSERT_GROWTH_PAIRS", "1"))
VARIANT = os.environ.get("BENCH_UPSERT_VARIANT", "0") == "1"  # off: the commit's own delete binds no In


@dataclass
class Built:
    """One size's tables, built once: what each measurement registers afresh."""

    keys: int
    database: str
    upsert_location: str
    upsert_metadata: str
    append_metadata: str
    plan: PlanKeys
    plan_files: list[str]
    ranges: dict[int, tuple[int, int]]
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class Clock:
    """Wall and CPU seconds spent inside the commit's copy-on-write delete while it is wrapped."""

    wall: float = 0.0
    cpu: float = 0.0


@contextlib.contextmanager
def delete_clock() -> Iterator[Clock]:
    """The commit's copy-on-write delete (``table_commit._delete_keys``) timed while the block runs."""
    clock, original = Clock(), table_commit._delete_keys

    def timed(*args: Any, **kwargs: Any) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            original(*args, **kwargs)
        finally:
            clock.wall += time.perf_counter() - wall
            clock.cpu += time.process_time() - cpu

    setattr(table_commit, "_delete_keys", timed)  # noqa: B010
    try:
        yield clock
    finally:
        setattr(table_commit, "_delete_keys", original)  # noqa: B010


@contextlib.contextmanager
def bound_once() -> Iterator[None]:
    """The extra variant, never shipped: pyiceberg plans a delete's rewrite by binding its row filter again for
    every data file (``ResidualEvaluator.residual_for`` binds the ``In`` of every changed key, converting each literal
    to the column's type, per file). Here, in this process only while the block runs, ``SetPredicate.bind`` keeps its
    result per predicate and schema, so each ``In`` is bound once: the same commit, what the copy-on-write costs
    without that overhead."""
    original = SetPredicate.bind
    kept: dict[tuple[int, int, bool], tuple[Any, Any, Any]] = {}

    def bind(self: SetPredicate, schema: Any, case_sensitive: bool = True) -> Any:
        key = (id(self), id(schema), case_sensitive)
        if key not in kept:  # the predicate and schema are kept with the result: their ids stay theirs
            kept[key] = (self, schema, original(self, schema, case_sensitive))
        return kept[key][2]

    setattr(SetPredicate, "bind", bind)  # noqa: B010
    try:
        yield
    finally:
        setattr(SetPredicate, "bind", original)  # noqa: B010


def total(table: Table, name: str) -> int:
    """A total of the table's current snapshot's summary (``total-records``, ``total-files-size``, ...)."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        raise RuntimeError(f"{table.name()} has no current snapshot")
    return int(snapshot.summary.additional_properties[name])


def clocked(action: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall and CPU seconds of ``action`` in this process (every thread), and what it returned."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    value = action()
    return time.perf_counter() - wall, time.process_time() - cpu, value


class Bench:
    """The benchmark's own bucket (unversioned, so deleted files free moto's memory) and Glue database."""

    def __init__(self, endpoints: Endpoints) -> None:
        self.run = uuid.uuid4().hex[:8]
        self.bucket = f"kafkalake-bench-upsert-{self.run}"
        self.s3 = make_client(endpoints, "s3")
        self.glue = make_client(endpoints, "glue")
        self.s3.create_bucket(Bucket=self.bucket, CreateBucketConfiguration={"LocationConstraint": endpoints.region})
        self.catalog: Catalog = table_catalog(endpoints)

    def put(self, key: str, table: pa.Table) -> str:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="snappy")  # the archiver's writer's compression
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=sink.getvalue().to_pybytes())
        return f"s3://{self.bucket}/{key}"

    def put_hour(self, prefix: TablePrefix, files: list[tuple[Partition, int, pa.Table]]) -> list[str]:
        """Each of an hour's change objects under ``prefix``, at its data key."""
        found = []
        for partition, kafka_partition, table in files:
            offsets = table.column("_kafka_offset")
            key = DataKey(prefix, partition, kafka_partition, pc.min(offsets).as_py(), pc.max(offsets).as_py())
            found.append(self.put(key.key(), table))
        return found

    def build(self, keys: int) -> Built:
        """The tables of ``keys`` keys and the plan's change objects (not counted)."""
        started = time.monotonic()
        rng = np.random.default_rng(keys)
        database = f"bench_upsert_{self.run}_{keys}"
        self.glue.create_database(DatabaseInput={"Name": database})
        upsert_prefix = TablePrefix("bench", "kafkalake", "upsert", f"upsert-{keys}")
        append_prefix = TablePrefix("bench", "kafkalake", "upsert", f"append-{keys}")
        offsets: dict[int, int] = {}
        files: list[str] = []
        for hour, ids in enumerate(np.array_split(rng.permutation(keys), HOURS)):
            at = START + timedelta(hours=hour)
            files += self.put_hour(append_prefix, hour_files(ids, np.zeros(len(ids), bool), at, offsets, rng))
        say(f"upsert {keys:,} keys: {len(files)} archiver-shaped files written ({time.monotonic() - started:.0f} s)")
        upsert_location = table_location(self.bucket, upsert_prefix)
        ranges = {p: (0, end - 1) for p, end in offsets.items()}
        base: dict[str, Any] = {
            "kafka_topic": KAFKA_TOPIC,
            "ranges": ranges,
            "plan_id": "bench-build",
            "files": files,
            "say": say,
        }
        upsert_plan(self.catalog, (database, "upsert_base"), location=upsert_location, keying=KEYING, **base)
        append_plan(
            self.catalog, (database, "append_base"), location=table_location(self.bucket, append_prefix), **base
        )
        plan = plan_keys(keys, CHANGES, rng)
        ids = np.concatenate([plan.updates, plan.inserts, plan.deletes])
        tombstone = np.concatenate(
            [np.zeros(len(plan.updates) + len(plan.inserts), bool), np.ones(len(plan.deletes), bool)]
        )
        before = dict(offsets)
        plan_files = self.put_hour(
            upsert_prefix, hour_files(ids, tombstone, START + timedelta(hours=HOURS), offsets, rng)
        )
        upsert_base = self.catalog.load_table((database, "upsert_base"))
        facts = self.facts(upsert_base, append_prefix, upsert_prefix, len(files), plan_files)
        facts["build_seconds"] = round(time.monotonic() - started, 1)
        if facts["upsert_table_rows"] != keys:
            raise RuntimeError(f"the built upsert table holds {facts['upsert_table_rows']} rows, not {keys}")
        say(f"upsert {keys:,} keys: tables built ({facts})")
        return Built(
            keys=keys,
            database=database,
            upsert_location=upsert_location,
            upsert_metadata=upsert_base.metadata_location,
            append_metadata=self.catalog.load_table((database, "append_base")).metadata_location,
            plan=plan,
            plan_files=plan_files,
            ranges={p: (before.get(p, 0), end - 1) for p, end in offsets.items()},
            facts=facts,
        )

    def facts(
        self, upsert_base: Table, append_prefix: TablePrefix, upsert_prefix: TablePrefix, files: int, plan: list[str]
    ) -> dict[str, Any]:
        """The built tables' and the plan's sizes."""
        changes = list_objects(self.s3, self.bucket, upsert_prefix.data_prefix())
        return {
            "upsert_table_data_files": total(upsert_base, "total-data-files"),
            "upsert_table_bytes": total(upsert_base, "total-files-size"),
            "upsert_table_rows": total(upsert_base, "total-records"),
            "append_table_data_files": files,
            "append_table_bytes": sum(list_objects(self.s3, self.bucket, append_prefix.data_prefix()).values()),
            "plan_files": len(plan),
            "plan_bytes": sum(size for key, size in changes.items() if f"s3://{self.bucket}/{key}" in plan),
        }

    def measure(self, built: Built, name: str, kind: str) -> dict[str, Any]:
        """The plan committed to a fresh copy of a built table; then the copy dropped, what its commit wrote deleted."""
        identifier = (built.database, name)
        upsert = kind != "append"
        metadata = built.upsert_metadata if upsert else built.append_metadata
        table = self.catalog.register_table(identifier, metadata)
        location = table.location()
        held = set(list_objects(self.s3, self.bucket, location.removeprefix(f"s3://{self.bucket}/")))
        base_snapshots = {s.snapshot_id for s in table.snapshots()}
        common: dict[str, Any] = {
            "location": location,
            "plan_id": "bench-plan",
            "kafka_topic": KAFKA_TOPIC,
            "ranges": built.ranges,
            "files": built.plan_files,
            "say": say,
        }
        with delete_clock() as deleting, bound_once() if kind == "upsert_bound_once" else contextlib.nullcontext():
            if upsert:
                wall, cpu, change = clocked(lambda: upsert_plan(self.catalog, identifier, keying=KEYING, **common))
            else:
                wall, cpu, change = clocked(lambda: append_plan(self.catalog, identifier, **common))
        table = self.catalog.load_table(identifier)
        added = [s for s in table.snapshots() if s.snapshot_id not in base_snapshots]
        summaries = [
            {**s.summary.additional_properties, "operation": s.summary.operation.value} for s in added if s.summary
        ]
        rows = total(table, "total-records")
        plan = built.plan
        expected = built.keys + len(plan.inserts) - len(plan.deletes) if upsert else built.keys + plan.changed
        if rows != expected or (upsert and (change is None or change.deletes != len(plan.deletes))):
            raise RuntimeError(f"{name}: the table holds {rows} rows after the plan, not {expected} ({change})")
        self.catalog.drop_table(identifier)
        written = set(list_objects(self.s3, self.bucket, location.removeprefix(f"s3://{self.bucket}/"))) - held
        self.delete(sorted(written))
        return {
            "wall_seconds": wall,
            "cpu_seconds": cpu,
            "delete_wall_seconds": deleting.wall,
            "delete_cpu_seconds": deleting.cpu,
            "snapshots": [s["operation"] for s in summaries],
            "rows_after": rows,
            "objects_written": len(written),
            **summary_bytes(summaries),
        }

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def pairs(self, built: Built, pairs: int, *, with_variant: bool) -> dict[str, Any]:
        kinds = ["upsert", "append"] + (["upsert_bound_once"] if with_variant else [])
        runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
        for number in range(1, pairs + 1):
            for kind, found in runs.items():
                found.append(self.measure(built, f"{kind}_{number}", kind))
                run = found[-1]
                say(
                    f"upsert {built.keys:,} keys, pair {number}/{pairs}, {kind}: {run['wall_seconds']:.2f} s, "
                    f"CPU {run['cpu_seconds']:.2f} s (delete {run['delete_wall_seconds']:.2f} s), "
                    f"{run['added_bytes'] / 1e6:.1f} MB added, {run['removed_bytes'] / 1e6:.1f} MB removed"
                )
        ups, apps = runs["upsert"], runs["append"]
        return {
            "keys": built.keys,
            **built.facts,
            "plan": {
                "updates": len(built.plan.updates),
                "inserts": len(built.plan.inserts),
                "deletes": len(built.plan.deletes),
            },
            "upsert_runs": ups,
            "append_runs": apps,
            "upsert_to_append_wall": paired([r["wall_seconds"] for r in ups], [r["wall_seconds"] for r in apps]),
            "upsert_to_append_cpu": paired([r["cpu_seconds"] for r in ups], [r["cpu_seconds"] for r in apps]),
            "upsert_wall_seconds": statistics.median(r["wall_seconds"] for r in ups),
            "upsert_cpu_seconds": statistics.median(r["cpu_seconds"] for r in ups),
            "append_wall_seconds": statistics.median(r["wall_seconds"] for r in apps),
            "append_cpu_seconds": statistics.median(r["cpu_seconds"] for r in apps),
            "delete_share_of_upsert_wall": statistics.median(r["delete_wall_seconds"] / r["wall_seconds"] for r in ups),
            **(variant(runs["upsert_bound_once"], ups, apps) if with_variant else {}),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }

    def close(self) -> None:
        for database in [d["Name"] for d in self.glue.get_databases()["DatabaseList"] if self.run in d["Name"]]:
            for table in self.glue.get_tables(DatabaseName=database)["TableList"]:
                self.glue.delete_table(DatabaseName=database, Name=table["Name"])
            self.glue.delete_database(Name=database)
        self.delete(sorted(list_objects(self.s3, self.bucket, "")))
        self.s3.delete_bucket(Bucket=self.bucket)


def variant(bound: list[dict[str, Any]], ups: list[dict[str, Any]], apps: list[dict[str, Any]]) -> dict[str, Any]:
    """The extra variant's runs (``bound_once``): against the append beside it and against the upsert as shipped."""
    return {
        "bound_once_runs": bound,
        "bound_once_wall_seconds": statistics.median(r["wall_seconds"] for r in bound),
        "bound_once_cpu_seconds": statistics.median(r["cpu_seconds"] for r in bound),
        "bound_once_to_append_wall": paired([r["wall_seconds"] for r in bound], [r["wall_seconds"] for r in apps]),
        "bound_once_to_upsert_wall": paired([r["wall_seconds"] for r in bound], [r["wall_seconds"] for r in ups]),
    }


def growth(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """How the medians grow from the first size to the last: the ratio of keys, and of each median."""
    first, last = sizes[0], sizes[-1]
    names = ["upsert_wall_seconds", "upsert_cpu_seconds", "append_wall_seconds", "append_cpu_seconds"]
    return {"keys": last["keys"] / first["keys"], **{n: last[n] / first[n] for n in names}}


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes what the run made
    sizes = [KEYS] + ([KEYS * GROWTH] if GROWTH > 1 else [])
    found: list[dict[str, Any]] = []
    with stack.running():
        for keys in sizes:  # a bucket and database per size, removed before the next is built
            bench = Bench(local_endpoints())
            try:
                first = not found
                pairs, with_variant = (PAIRS, VARIANT) if first else (GROWTH_PAIRS, False)
                found.append(bench.pairs(bench.build(keys), pairs, with_variant=with_variant))
            finally:
                bench.close()
            gc.collect()
            write_result("upsert", result(found, complete=len(found) == len(sizes)))  # each size as soon as done


def result(found: list[dict[str, Any]], *, complete: bool) -> dict[str, Any]:
    return {
        "complete": complete,
        "changes": CHANGES,
        "shares": SHARES,
        "hours": HOURS,
        "kafka_partitions": KAFKA_PARTITIONS,
        "pairs": PAIRS,
        "growth_pairs": GROWTH_PAIRS,
        "keying": "the Kafka key",
        "pyiceberg": pyiceberg.__version__,
        "variant": "upsert_bound_once: each In bound once (bench.upsert.bound_once)" if VARIANT else None,
        "sizes": found,
        "growth": growth(found) if len(found) > 1 else None,
    }
