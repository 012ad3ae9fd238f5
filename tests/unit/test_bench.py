"""The benchmarks' own logic: the process-tree walk, the Spark-alone plans, the EMR sizes, the cost model, the generated
performance section of docs/benchmarks.md and the adopted results it comes from."""

from __future__ import annotations

import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bench import cost, report, rows
from bench.archiver import kafka_time
from bench.common import RESULTS
from bench.proc import MEMORY_FIGURES, cpu_since, tree_sample
from bench.sizing import (
    ARCHIVER_EXECUTOR_CORES,
    HEADROOM,
    PlanMemory,
    archiver_sizes,
    emr_sizes,
    spark_defaults,
    supported_memory_gb,
)
from bench.spark_alone import plans
from infra.constructs.jobs import WORKER_SIZES

STARTS_FROM_A_THREAD = """
import subprocess, sys, threading
def start():
    code = "import time; data = bytearray(64 << 20); print(flush=True); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    child.stdout.readline()  # its 64 MiB are touched
    print(child.pid, flush=True)
    sys.stdin.read()  # the thread lives on (a thread's children pass to another thread when it ends)
thread = threading.Thread(target=start)
thread.start()
thread.join()
"""


def test_a_child_started_from_a_thread_is_in_the_tree() -> None:
    """As the Spark JVM starts Spark's Python daemon: from a thread that is not the main one, and lives on."""
    parent = subprocess.Popen(
        [sys.executable, "-c", STARTS_FROM_A_THREAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        memory, cpu = tree_sample(parent.pid)
        alone, _ = tree_sample(child)
    finally:
        subprocess.run(["kill", str(child)], check=True)
        parent.communicate("")
    assert set(cpu) == {parent.pid, child}
    assert set(memory) == set(MEMORY_FIGURES)
    assert alone["rss"] >= 64 * 1024  # KiB
    assert memory["rss"] > alone["rss"] and memory["pss"] > alone["pss"]
    assert memory["jvm_rss"] == 0  # no JVM here
    assert memory["driver_python_rss"] + memory["workers_python_rss"] == memory["rss"]
    assert memory["workers_python_rss"] == alone["rss"]  # the root is the driver; the rest are its workers


CHURNS_THREADS = """
import threading, time
print(flush=True)
while True:
    threads = [threading.Thread(target=time.sleep, args=(0.0005,)) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
"""


def test_a_process_whose_threads_end_while_it_is_sampled_stays_in_the_tree() -> None:
    """As the Spark JVM's threads come and go: one ending between the listing and the read of its children dropped the
    whole process (one run in eight of these lost it; a B-fleet run lost the JVM's CPU)."""
    child = subprocess.Popen([sys.executable, "-c", CHURNS_THREADS], stdout=subprocess.PIPE)
    assert child.stdout is not None
    child.stdout.readline()
    try:
        missed = sum(child.pid not in tree_sample(child.pid)[1] for _ in range(200))
    finally:
        child.kill()
        child.wait()
    assert missed == 0


def test_the_spark_alone_plans_advance_each_partition_by_its_share_to_its_end() -> None:
    assert plans([5, 3, 4], 6) == [([0, 0, 0], [2, 2, 2]), ([2, 2, 2], [4, 3, 4]), ([4, 3, 4], [5, 3, 4])]
    assert plans([0, 0, 0], 6) == []


def test_cpu_since_counts_each_process_growth_and_new_processes_from_zero() -> None:
    assert cpu_since({1: 2.0, 2: 1.0}, {1: 5.0, 3: 0.5}) == 3.5


def test_kafka_times_spread_evenly_over_the_hours_asked() -> None:
    now = 10 * 3_600_000
    times = [kafka_time(i, 4, (6, 3), now) for i in range(4)]
    assert times == [4 * 3_600_000, 4.75 * 3_600_000, 5.5 * 3_600_000, 6.25 * 3_600_000]


def test_worker_memory_rounds_up_to_a_size_emr_serverless_supports() -> None:
    assert supported_memory_gb(4, 100) == 8  # the 4-vCPU minimum
    assert supported_memory_gb(4, 9 * 1024 + 1) == 10
    assert supported_memory_gb(8, 17 * 1024) == 20  # 4 GB steps from 16
    with pytest.raises(ValueError, match="add cores"):
        supported_memory_gb(2, 17 * 1024)


def test_emr_sizes_take_each_part_at_its_peak_over_the_plan_sizes() -> None:
    measured = [PlanMemory(10_000, 900, 180, 460, 1540), PlanMemory(1_000_000, 600, 190, 520, 1310)]
    sizes = emr_sizes(measured, local_cores=2)
    assert sizes.records_per_plan == 1_000_000
    assert sizes.driver.needed_mib == (900 + 190) * HEADROOM
    assert sizes.executor.needed_mib == (900 + 520 / 2 * ARCHIVER_EXECUTOR_CORES) * HEADROOM
    assert (sizes.executor.cpu, sizes.executor.memory_gb, sizes.executor.heap_gb) == (2, 4, 2)
    assert sizes.executor.heap_gb < sizes.executor.memory_gb  # the Python workers live in the overhead


MEASURED = cost.Measured(
    record_bytes=200,
    stored_bytes_per_record=20,
    archiver_cpu_seconds_per_million=10,
    archiver_utilization=0.5,
    spark_start_seconds=10,
    cpu_seconds_per_topic_run=1,
    s3_puts_per_topic_run=4,
    s3_gets_per_topic_run=1,
    max_records_per_file=500_000,
    archiver_workers=cost.Workers(cost.Worker(2, 4), cost.Worker(4, 8)),
    compactor_workers=cost.Workers(cost.Worker(2, 4), cost.Worker(4, 10)),
    consumer_records_per_core_second=500_000,
    maintainer_cpu_seconds_per_event=0.001,
    maintainer_wall_seconds_per_event=0.05,
    maintainer_sqs_calls_per_event=0.2,
    maintainer_glue_calls_per_table_drain=2,
    maintainer_memory_gb=1,
    compactor_core_seconds_per_gib=60,
    compactor_core_seconds_per_partition=0.5,
    compactor_s3_puts_per_partition=8,
    compactor_s3_gets_per_partition=12,
    compactor_glue_calls_per_table_run=1,
    compactor_glue_calls_per_partition=2,
)


def test_an_emr_run_adds_executors_only_when_the_work_would_miss_the_schedule() -> None:
    workers = MEASURED.archiver_workers
    small = cost.emr_run(100, 0.5, 900, 10, workers)  # 100 core-s on 4 vCPU at half use: 50 s, after a 10 s start
    assert (small.executors, small.wall_seconds) == (1, 60)
    assert small.vcpu_hours == 6 * 60 / 3600 and small.gb_hours == 12 * 60 / 3600
    short = cost.emr_run(1, 1.0, 900, 10, workers)
    assert short.vcpu_hours == 6 / 60  # at least a minute per worker
    big = cost.emr_run(10_000, 0.5, 900, 10, workers)
    assert big.executors == math.ceil(10_000 / 2 / 890)
    assert big.wall_seconds <= 900


def test_the_fleet_writes_an_object_per_partition_and_hour_touched_per_run() -> None:
    fleet = cost.Fleet(heavy_topics=1, heavy_records_per_day=96_000_000, heavy_partitions=2, light_topics=0)
    # 1M records per run over 2 partitions and 1.25 hours: 400k per partition and hour, one object each
    assert fleet.objects_per_run(500_000) == 2 * 1.25
    assert fleet.objects_per_run(100_000) == 2 * 1.25 * 4
    assert fleet.records_per_day == 96_000_000 and fleet.topics == 1
    hourly = cost.Fleet(light_every_runs=4)  # the light topics in one run of four: a range of an hour spans two
    assert hourly.topics_per_run == 4 + 156 / 4
    light = hourly.objects_per_run(500_000) - cost.Fleet(light_topics=0).objects_per_run(500_000)
    assert light == 156 / 4 * 3 * 2


def test_the_day_sums_its_lines_and_names_what_dominates() -> None:
    bill = cost.day(cost.Fleet(), MEASURED)
    for way in bill["per_day"].values():
        assert way["total_dollars"] == pytest.approx(sum(line["dollars"] for line in way["lines"]))
    ours = bill["per_day"]["kafkalake"]["lines"]
    top = max(ours, key=lambda line: line["dollars"])
    assert bill["dominant"]["part"] == top["part"]
    assert bill["levers"]["archiving every 30 minutes"] < 1
    connect = bill["per_day"]["kafka_connect_s3_sink"]["lines"][0]
    assert connect["usage"]["workers"] == 2  # the volume needs less than one worker: two for availability
    conversion = bill["per_day"]["firehose"]["lines"][1]
    assert conversion["usage"]["gb_billed"] == cost.Fleet().records_per_day * 5 * 1024 / 1e9


def test_s3_requests_are_split_by_price_class_and_deletes_are_free() -> None:
    calls = {"s3.PutObject": 3, "s3.ListObjectsV2": 1, "s3.GetObject": 5, "s3.HeadObject": 1, "s3.DeleteObject": 9}
    assert report.s3_requests({**calls, "glue.GetPartitions": 4}) == (4, 6)


def test_numbers_keep_three_significant_digits_below_a_hundred() -> None:
    assert [rows.number(v) for v in (1234567.8, 123.4, 12.34, 1.234, 0.01234, 0, 96.0)] == [
        "1,234,568",
        "123",
        "12.3",
        "1.23",
        "0.0123",
        "0",
        "96",
    ]


def test_spark_settings_fill_each_worker_with_its_heap_and_overhead() -> None:
    sizes = emr_sizes([PlanMemory(1_000_000, 600, 190, 520, 1310)], local_cores=2).to_dict()
    assert spark_defaults(sizes) == {
        "spark.driver.cores": "2",
        "spark.driver.memory": "1g",
        "spark.driver.memoryOverhead": "3g",
        "spark.executor.cores": "2",
        "spark.executor.memory": "1g",
        "spark.executor.memoryOverhead": "3g",
    }


def test_the_stacks_worker_sizes_are_what_the_adopted_measurements_derive() -> None:
    results = report.adopted()
    assert WORKER_SIZES["Archiver"] == spark_defaults(archiver_sizes(results["archiver"]))
    assert WORKER_SIZES["Compactor"] == spark_defaults(results["compactor"]["emr_sizes"])
    assert report.derived_worker_sizes(results) == {k: WORKER_SIZES[k] for k in ("Archiver", "Compactor")}


def test_the_docs_performance_section_is_what_the_adopted_results_render() -> None:
    doc = report.DOC.read_text()
    assert report.section(doc) == report.render(report.adopted())


def test_every_adopted_result_is_committed_and_every_benchmark_has_one() -> None:
    index = json.loads((RESULTS / report.INDEX).read_text())
    assert set(index) == set(report.latest())
    for name, file in index.items():
        assert json.loads((RESULTS / file).read_text())["benchmark"] == name


def newer_result(results: Path, name: str) -> dict[str, Any]:
    """A result of ``name`` as a later run would write it: newer than any, other figures, other worker sizes."""
    document: dict[str, Any] = json.loads((results / report.adopted(results)[name]["file"]).read_text())
    document["utc"] = "29991231T235959Z"
    throughput = document["throughput"]
    throughput["archiver_default_limit"]["rates_after_start"] = [1.0, 2.0, 3.0]
    throughput["memory_per_plan_size"][-1]["jvm_mib"] = 8000  # an executor of 13 GB, 12 of them heap
    (results / f"{name}-{document['utc']}.json").write_text(json.dumps(document))
    return document


def test_a_new_result_in_bench_results_changes_nothing_the_suite_pins_until_adopted(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    pinned = report.render(report.adopted(results)), report.derived_worker_sizes(report.adopted(results))
    newer = newer_result(results, "archiver")
    assert report.latest(results)["archiver"]["utc"] == newer["utc"], "the new file is the newest archiver result"
    assert (report.render(report.adopted(results)), report.derived_worker_sizes(report.adopted(results))) == pinned
    assert pinned == (report.render(report.adopted()), report.derived_worker_sizes(report.adopted()))

    with pytest.raises(KeyError, match="no result"):
        report.adopt(["no-such-benchmark"], results)
    adopted = report.adopt(["archiver"], results)  # on purpose: now the docs and the sizes follow it
    assert adopted["archiver"]["utc"] == newer["utc"]
    assert {n: r["file"] for n, r in adopted.items() if n != "archiver"} == {
        n: r["file"] for n, r in report.adopted().items() if n != "archiver"
    }
    assert report.render(adopted) != pinned[0]
    assert report.derived_worker_sizes(adopted)["Archiver"]["spark.executor.memory"] == "12g"
    assert report.older_than_cost_inputs(adopted) == ["archiver"]


def test_the_erasure_benchmark_puts_its_subjects_rows_in_few_partitions_and_counts_them() -> None:
    from bench.erasure import FILES, HOLDING, PARTITIONS, ROWS, SUBJECTS, erasure_topic, plan_lake

    lake = plan_lake(erasure_topic("unit"))
    assert len(lake.files) == PARTITIONS and all(len(f) == FILES for f in lake.files.values())
    assert lake.rows == PARTITIONS * FILES * ROWS
    found: dict[str, int] = {}
    holding = set()
    for partition, files in lake.files.items():
        for _, body in files:
            customers = pq.read_table(io.BytesIO(body), columns=["customer_id"])["customer_id"].to_pylist()
            for customer in customers:
                if customer.startswith("subject-"):
                    found[customer] = found.get(customer, 0) + 1
                    holding.add(partition)
    assert found == lake.subject_rows and len(found) > 0.9 * SUBJECTS
    assert len(holding) <= HOLDING, "the subjects' rows sit in the few holding partitions only"


def test_the_erasure_benchmark_drops_its_bucket_with_every_version(s3: Any) -> None:
    from bench.erasure import drop_bucket

    s3.put_bucket_versioning(Bucket="lake", VersioningConfiguration={"Status": "Enabled"})
    for body in (b"one", b"two"):
        s3.put_object(Bucket="lake", Key="data/x.parquet", Body=body)
    s3.delete_object(Bucket="lake", Key="data/x.parquet")  # a delete marker over two versions
    drop_bucket(s3, "lake")
    assert "lake" not in {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_paired_ratios_are_each_pairs_ratio_and_their_median_is_the_paired_ratio() -> None:
    from bench.common import pair_ratios, paired_ratio

    assert pair_ratios([2.0, 3.0, 9.0], [4.0, 3.0, 3.0]) == [0.5, 1.0, 3.0]
    assert paired_ratio([2.0, 3.0, 9.0], [4.0, 3.0, 3.0]) == 1.0
    with pytest.raises(ValueError, match="zip"):
        pair_ratios([1.0], [1.0, 2.0])


def test_the_uploads_result_renders_both_cases_only_once_there_is_one() -> None:
    assert rows.uploads_rows({}) == []
    case = {
        "objects": 234,
        "uploads_in_flight": 8,
        "seconds": [1.0, 1.2, 0.9],
        "baseline_seconds": [8.0, 8.4, 7.9],
        "ratios": [0.125, 0.143, 0.114],
        "ratio": 0.125,
        "ratio_spread": [0.114, 0.143],
    }
    result = {"members": 78, "records": 156078, "s3_latency": {**case, "added_latency_ms": 30.0}}
    rendered = rows.uploads_rows({"uploads": {**result, "local": {**case, "added_latency_ms": 0.0}}})
    assert [row[3] for row in rendered] == ["**0.12** (median of 3 pairs' ratios, 0.11-0.14)"] * 2
    assert "each PUT 30 ms later" in rendered[0][0] and "moto's own" in rendered[1][0]
    assert (rendered[0][1], rendered[0][2]) == ("1.00 s", "one upload at a time (the writer before): 8.00 s")
