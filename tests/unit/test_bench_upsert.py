"""``bench.upsert``'s own parts: the change objects it writes are what the upsert path reads, the plan's mix, and
the figures it reports."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from bench.upsert_rows import upsert_rows
from bench.upsert_workload import (
    KAFKA_PARTITIONS,
    KEYING,
    SHARES,
    hour_files,
    paired,
    plan_keys,
    summary_bytes,
)
from kafkalake.personal import UPSERT_KEY_COLUMN
from spark_jobs.archiver.table_commit import _partition_of
from spark_jobs.archiver.upsert import change_rows, latest, state_change

HOUR = datetime(2026, 11, 8, 5, tzinfo=UTC)


def test_the_change_objects_are_what_the_upsert_path_reads_and_their_keys_name_their_hour() -> None:
    rng = np.random.default_rng(1)
    ids = np.arange(10)
    tombstone = np.isin(ids, [3, 7])
    offsets: dict[int, int] = {0: 100}
    files = hour_files(ids, tombstone, HOUR, offsets, rng)
    assert [p for _, p, _ in files] == list(range(KAFKA_PARTITIONS))
    assert offsets == {0: 104, 1: 3, 2: 3}
    for partition, kafka_partition, table in files:
        assert (partition.dt, partition.hour, partition.schema_version) == (HOUR.date(), 5, 1)
        assert _partition_of(f"s3://b/data/x/{partition.path()}f.parquet") == partition
        assert set(table.column("_kafka_partition").to_pylist()) == {kafka_partition}
        offsets_in = table.column("_kafka_offset").to_pylist()
        assert offsets_in == sorted(offsets_in) and len(set(offsets_in)) == len(offsets_in)
        times = table.column("_kafka_timestamp").to_pylist()
        assert times == sorted(times) and all(t.hour == 5 for t in times)
    change = state_change(latest(change_rows(pa.concat_tables([t for _, _, t in files]), KEYING), None))
    assert sorted(change.keys.to_pylist()) == sorted(f"customer-{i:010d}".encode().hex() for i in ids)
    assert change.deletes == 2
    held = {r[UPSERT_KEY_COLUMN]: r for r in change.rows.to_pylist()}
    assert len(held) == 8 and all(len(r["email"]) == 64 and r["customer_id"] is not None for r in held.values())
    assert f"customer-{3:010d}".encode().hex() not in held


def test_a_plan_updates_and_deletes_distinct_held_keys_and_inserts_new_ones() -> None:
    plan = plan_keys(1_000, 100, np.random.default_rng(2))
    assert (len(plan.updates), len(plan.inserts), len(plan.deletes)) == (
        100 * SHARES["updates"],
        100 * SHARES["inserts"],
        100 * SHARES["deletes"],
    )
    touched = np.concatenate([plan.updates, plan.deletes])
    assert len(set(touched.tolist())) == len(touched) and touched.max() < 1_000
    assert plan.inserts.min() == 1_000 and plan.changed == 100


def test_pairs_report_each_ratio_their_median_and_spread() -> None:
    found = paired([10.0, 30.0, 12.0], [1.0, 2.0, 4.0])
    assert found == {"ratios": [10.0, 15.0, 3.0], "median": 10.0, "spread": [3.0, 15.0]}
    with pytest.raises(ValueError):
        paired([1.0], [1.0, 2.0])


def test_a_commits_bytes_are_its_snapshots_summed() -> None:
    found = summary_bytes(
        [
            {"operation": "overwrite", "added-files-size": "700", "removed-files-size": "800", "added-data-files": "2"},
            {"operation": "append", "added-files-size": "50", "added-records": "9"},
        ]
    )
    assert found == {
        "added_bytes": 750,
        "removed_bytes": 800,
        "added_files": 2,
        "removed_files": 0,
        "added_records": 9,
        "removed_records": 0,
    }


def test_the_rows_render_each_size_its_growth_and_the_variant_only_once_there_is_a_result() -> None:
    def runs(wall: float, cpu: float) -> list[dict[str, float]]:
        return [
            {"wall_seconds": wall, "cpu_seconds": cpu, "added_bytes": 8e7, "removed_bytes": 8e7, "removed_files": 168}
        ] * 3

    def size(keys: int, wall: float) -> dict[str, object]:
        return {
            "keys": keys,
            "plan": {"updates": 80_000, "inserts": 15_000, "deletes": 5_000},
            "plan_files": 3,
            "plan_bytes": 12e6,
            "upsert_table_data_files": 168,
            "upsert_table_bytes": 8e7,
            "append_table_data_files": 504,
            "upsert_runs": runs(wall, wall / 2),
            "append_runs": runs(0.5, 0.1),
            "upsert_to_append_wall": paired([wall] * 3, [0.5] * 3),
            "upsert_to_append_cpu": paired([wall / 2] * 3, [0.1] * 3),
            "upsert_wall_seconds": wall,
            "upsert_cpu_seconds": wall / 2,
            "append_wall_seconds": 0.5,
            "append_cpu_seconds": 0.1,
            "delete_share_of_upsert_wall": 0.9,
        }

    assert upsert_rows({}) == []
    result = {"changes": 100_000, "pyiceberg": "0.12.0", "sizes": [size(1_000_000, 200.0), size(10_000_000, 400.0)]}
    result["growth"] = {"keys": 10.0, "upsert_wall_seconds": 2.0, "upsert_cpu_seconds": 2.0, "append_wall_seconds": 1.0}
    rendered = upsert_rows({"upsert": result})
    assert len(rendered) == 7 and all(len(row) == 4 for row in rendered)
    assert rendered[0][3] == "**400** (median of 3 pairs' ratios, 400-400)"
    assert "10,000,000 keys against 1,000,000" in rendered[-1][0] and rendered[-1][3].startswith("**2.00x**")
