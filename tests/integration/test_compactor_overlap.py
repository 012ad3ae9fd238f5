"""Overlapping compactor runs on the local stack: one run at a time plans, swaps and cleans a table, a late file that
lands meanwhile is never lost, and a swap is refused when the partition changed since the run planned it."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from pyspark.sql import SparkSession

from kafkalake.endpoints import Endpoints
from kafkalake_dev.local.sandbox import with_bucket
from spark_jobs.common import Run
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.manifest import ManifestState
from spark_jobs.compaction.work import Knobs, PartitionResult
from tests.crashes import crash_after_saving
from tests.integration.test_compactor import NOW, Lake, assert_exact, compactor

pytestmark = pytest.mark.stack
KNOBS = Knobs(target_file_bytes=64 * 1024, min_input_files=10, grace_period=timedelta(hours=1))


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, "kafkalake-compactor-overlap-tests")


def test_two_runs_started_together_one_compacts_and_a_late_file_in_between_is_kept(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    lake = Lake(endpoints)
    rows = lake.put_files(40)
    lake.register()
    results: dict[str, list[PartitionResult]] = {}
    start = threading.Barrier(2)

    def one_run(name: str) -> None:
        start.wait()
        run = Compactor(spark, endpoints, [lake.topic], KNOBS, run=Run(name), now=lambda: NOW, say=lambda _: None)
        results[name] = run.run()

    threads = [threading.Thread(target=one_run, args=(name,)) for name in ("run-a", "run-b")]
    for thread in threads:
        thread.start()
    time.sleep(1)
    late_rows = lake.put_files(3)  # lands while the runs plan and write
    for thread in threads:
        thread.join()

    outcomes = sorted((r.action.value, r.reason.split(" since ")[0]) for rs in results.values() for r in rs)
    assert outcomes in (
        [("compacted", ""), ("skipped", "held by run run-a")],
        [("compacted", ""), ("skipped", "held by run run-b")],
        [("compacted", ""), ("compacted", "")],  # the first was done before the second took the table
    ), outcomes
    assert lake.read_current(spark).count() in (rows, rows + late_rows)  # never a row twice
    compactor(spark, lake, now=NOW + timedelta(minutes=10)).run()  # the late file, if no run took it yet
    assert_exact(spark, lake, rows + late_rows)
    compactor(spark, lake, now=NOW + timedelta(hours=3)).run()
    assert_exact(spark, lake, rows + late_rows)
    assert lake.raw() == {}


def test_a_swap_is_refused_when_another_run_swapped_the_partition_since_it_planned(
    spark: SparkSession, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = Lake(endpoints)
    rows = lake.put_files(30)
    lake.register()
    with monkeypatch.context() as patch:
        crash_after_saving(patch, ManifestState.VERIFIED)
        [crashed] = compactor(spark, lake).run()
    assert crashed.action == "failed"
    elsewhere = lake.location().rstrip("/") + "-moved-by-another-run/"
    partition = lake.glue.get_partition(
        DatabaseName=lake.topic.database, TableName=lake.topic.table, PartitionValues=crashed.partition
    )["Partition"]
    descriptor = {**partition["StorageDescriptor"], "Location": elsewhere}
    lake.glue.update_partition(
        DatabaseName=lake.topic.database,
        TableName=lake.topic.table,
        PartitionValueList=crashed.partition,
        PartitionInput={"Values": crashed.partition, "StorageDescriptor": descriptor},
    )

    [refused] = compactor(spark, lake).run()

    assert refused.action == "skipped" and refused.reason.startswith("swap refused: the partition points at "), refused
    assert lake.location() == elsewhere, "a refused swap changes nothing"
    assert lake.manifest()["state"] == ManifestState.VERIFIED
    assert len([k for k in lake.raw() if "/_compacted/" not in k]) == rows // 40, "no input was deleted"
