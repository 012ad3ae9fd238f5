"""Archiver, each figure against its baseline in the same run:

- B1: one topic of BENCH_RECORDS (default 2,000,000) Avro records of about 200 bytes in 3 partitions: the
  archiver's records/s after its Spark session is up, against `kafka-consumer-perf-test` on the same topic; at
  the catalog's default per-plan limit (1,000,000 records), and at a tenth of BENCH_RECORDS per plan (the B1m
  run, ten plans). Also reported: plans 2-10 of that run alone (``ratio_warm_plans``), without the first plan's
  warm-up (Python workers, Kafka clients, code generation, JIT), which a run pays once. The CPU seconds the
  archiver's process tree used per record at the default limit are reported too, and the floor Spark itself sets
  here: the topic through Spark alone (``bench.spark_alone``: Kafka source, from_avro, Spark's Parquet writer, no
  Python) in the same plans, against perf-test and against the archiver.
- B1m: the peak resident memory of the archiver's whole process tree (Python driver, Spark JVM, Python daemon and
  workers, sampled from /proc) at a 10x backlog against a 1x backlog: the per-plan record limit keeps memory
  bounded. Each is the median of BENCH_MEMORY_RUNS (5) runs. Beside it: the same ratio for the summed PSS and for
  the JVM alone, and the 20x backlog against the 10x (the topic doubled), which shows whether the peak still grows.
  B1 and B1m archive the same topic several times (into different tables, its consumer group deleted in between).
- B-fleet: BENCH_FLEET_TOPICS (100) topics x 3 partitions x BENCH_FLEET_RECORDS (2,000) records archived by one
  run against one run archiving one such topic (cycle time reported).

The archiver runs in a child process (``bench.archiver_run``) as the archiver job does: every topic caught up,
several at a time. BENCH_ARCHIVER_PARTS=throughput or =fleet runs one part.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from bench.common import write_result
from kafkalake.catalog import ArchiveSettings
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.settings import Endpoints
from kafkalake.wire import encode
from kafkalake_dev import stack
from kafkalake_dev.local import local_endpoints
from kafkalake_dev.workload import ensure_topic
from spark_jobs.archiver.offsets import consumer_group

RECORDS = int(os.environ.get("BENCH_RECORDS", "2000000"))
PARTITIONS = 3
PER_RUN = RECORDS // 10
MEMORY_RUNS = int(os.environ.get("BENCH_MEMORY_RUNS", "5"))
FLEET_TOPICS = int(os.environ.get("BENCH_FLEET_TOPICS", "100"))
FLEET_RECORDS = int(os.environ.get("BENCH_FLEET_RECORDS", "2000"))
FLEET_CONCURRENCY = int(os.environ.get("BENCH_FLEET_CONCURRENCY", "8"))
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Payment",
        "namespace": "bench",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "amount_cents", "type": "long"},
            {"name": "currency", "type": "string"},
            {"name": "created_at_ms", "type": "long"},
            {"name": "note", "type": "string"},
        ],
    }
)


def produce(endpoints: Endpoints, topic: str, records: int, *, quiet: bool = False) -> float:
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic, PARTITIONS)
    schema_id = RegistryClient(endpoints.schema_registry_url).register(value_subject(topic), SCHEMA)
    producer = Producer(
        {
            "bootstrap.servers": endpoints.kafka_bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
        }
    )
    base_ms = int(time.time() * 1000) - 3_600_000
    started, sizes = time.monotonic(), 0
    for i in range(records):
        value = encode(
            schema_id,
            SCHEMA,
            {
                "id": f"p-{i:012d}",
                "amount_cents": i * 7,
                "currency": "EUR",
                "created_at_ms": base_ms + i % 3_600_000,
                "note": "n" * 140,
            },
        )
        sizes += len(value)
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 200_000 == 0 and not quiet:
            producer.poll(0)
            print(f"[bench] produced {i}/{records} to {topic} ({time.monotonic() - started:.0f}s)", flush=True)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not deliver every record to {topic}")
    return sizes / records


def consumer_perf_test(endpoints: Endpoints, topic: str, records: int) -> dict[str, float]:
    """Kafka's own consumer benchmark (kafka-consumer-perf-test) from the cached Kafka jars."""
    libs = stack.kafka_libs()
    command = [
        "java",
        "-Xmx512m",
        "-cp",
        f"{libs}/*",
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        endpoints.kafka_bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--group",
        f"perf-{uuid.uuid4().hex[:6]}",
        "--timeout",
        "60000",
    ]
    started = time.monotonic()
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    wall = time.monotonic() - started
    header, row = [line for line in output.splitlines() if line.strip()][-2:]
    values = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")], strict=False))
    return {
        "wall_seconds": wall,
        "records_per_second_wall": records / wall,
        "records_per_second_reported": float(values["nMsg.sec"]),
        "mb_per_second_reported": float(values["MB.sec"]),
    }


def forget_offsets(endpoints: Endpoints, topic: str) -> None:
    """Delete the topic's archiver consumer group, so that the next run archives the topic again."""
    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
    for future in admin.delete_consumer_groups([consumer_group(topic)]).values():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:  # never archived yet
                raise


MEMORY_FIGURES = ("rss", "pss", "jvm_rss")
"""Sampled over the archiver's process tree: the RSS summed (B1m), the PSS summed (shared pages counted once), the
Spark JVM's RSS alone."""
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def tree_sample(root: int) -> tuple[dict[str, int], dict[int, float]]:
    """MEMORY_FIGURES of ``root`` and all its descendants, in KiB, and the CPU seconds each has used so far. Children
    are listed per thread: the JVM starts Spark's Python daemon (and so every Python worker) from one of its threads,
    never from its main thread."""
    memory, cpu, pending = dict.fromkeys(MEMORY_FIGURES, 0), {}, [root]
    while pending:
        pid = pending.pop()
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{pid}/comm").read_text().strip()
            threads = list(Path(f"/proc/{pid}/task").iterdir())
            pending += [int(child) for task in threads for child in (task / "children").read_text().split()]
        except OSError:  # ended while sampled
            continue
        rss = _rollup_kib(rollup, "Rss")
        memory["rss"] += rss
        memory["pss"] += _rollup_kib(rollup, "Pss")
        memory["jvm_rss"] += rss if command == "java" else 0
        cpu[pid] = (int(stat[11]) + int(stat[12])) / TICKS_PER_SECOND  # utime + stime, all threads
    return memory, cpu


def _rollup_kib(rollup: str, field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+)", rollup, re.MULTILINE)
    return int(match.group(1)) if match else 0


def archive(topics: list[str], per_run: int, concurrency: int = 4) -> dict[str, Any]:
    """Run the archiver in a child process until every topic is caught up; its timings, the peak memory of its
    process tree (MEMORY_FIGURES, each its own peak) and the CPU seconds the tree used (the Spark start included)."""
    with tempfile.TemporaryDirectory() as folder:
        result_file = Path(folder) / "result.json"
        command = [sys.executable, "-m", "bench.archiver_run", str(result_file), str(per_run), str(concurrency)]
        child = subprocess.Popen([*command, *topics])
        peaks, cpu = dict.fromkeys(MEMORY_FIGURES, 0), {}

        def sample() -> None:
            while child.poll() is None:
                memory, used = tree_sample(child.pid)
                peaks.update({name: max(peaks[name], value) for name, value in memory.items()})
                cpu.update(used)
                time.sleep(0.25)

        sampler = threading.Thread(target=sample)
        sampler.start()
        child.wait()
        sampler.join()
        if child.returncode != 0:
            raise RuntimeError(f"archiver child exited with {child.returncode}")
        outcome: dict[str, Any] = json.loads(result_file.read_text())
    memory_mib = {f"peak_{name}_mib": kib / 1024 for name, kib in peaks.items()}
    return {**outcome, **memory_mib, "cpu_seconds": sum(cpu.values())}


def spark_alone(topic: str, per_plan: int) -> dict[str, Any]:
    """The same topic through Spark alone (``bench.spark_alone``) in plans of ``per_plan`` records: the floor."""
    with tempfile.TemporaryDirectory() as folder:
        result_file = Path(folder) / "result.json"
        command = [sys.executable, "-m", "bench.spark_alone", str(result_file), str(per_plan), topic]
        subprocess.run(command, check=True)
        outcome: dict[str, Any] = json.loads(result_file.read_text())
    return outcome


def median_peak(endpoints: Endpoints, topic: str, records: int) -> dict[str, Any]:
    """Of MEMORY_RUNS archiver runs over the whole topic at PER_RUN records per plan, the one with the median peak
    memory (a run's peak varies by ~25% with when the JVM grows its heap), with every run's peak."""
    runs = []
    for _ in range(MEMORY_RUNS):
        forget_offsets(endpoints, topic)
        runs.append(archive([topic], PER_RUN))
        print(f"[bench] archiver on {records} records, {PER_RUN} per plan: {runs[-1]}", flush=True)
    runs.sort(key=lambda run: run["peak_rss_mib"])
    return {**runs[len(runs) // 2], "peaks_mib": [run["peak_rss_mib"] for run in runs]}


def memory_ratios(ten_x: dict[str, Any], one_x: dict[str, Any]) -> dict[str, float]:
    """B1m (the RSS of the whole tree), and beside it the same ratio for the PSS and for the Spark JVM alone."""
    ratios = {name: ten_x[f"peak_{name}_mib"] / one_x[f"peak_{name}_mib"] for name in MEMORY_FIGURES}
    return {
        "B1m_ratio_peak_memory_10x_to_1x": ratios.pop("rss"),
        **{f"ratio_peak_{name}_10x_to_1x": ratio for name, ratio in ratios.items()},
    }


def throughput_and_memory(endpoints: Endpoints) -> dict[str, Any]:
    """B1: records/s after the Spark start against kafka-consumer-perf-test on the same topic; B1m: peak RSS at a
    10x backlog against a 1x backlog, with the same per-plan record limit."""
    big, small = f"bench.archiver.{uuid.uuid4().hex[:8]}", f"bench.archiver.{uuid.uuid4().hex[:8]}"
    value_bytes = produce(endpoints, big, RECORDS)
    produce(endpoints, small, PER_RUN)
    perf = consumer_perf_test(endpoints, big, RECORDS)
    print(f"[bench] kafka-consumer-perf-test: {perf}", flush=True)
    default_limit = ArchiveSettings().max_records_per_run
    at_default = archive([big], default_limit)
    print(f"[bench] archiver on {RECORDS} records, {default_limit} per plan: {at_default}", flush=True)
    alone = spark_alone(big, default_limit)
    print(f"[bench] Spark alone on {RECORDS} records, {default_limit} per plan: {alone}", flush=True)
    ten_x = median_peak(endpoints, big, RECORDS)
    one_x = median_peak(endpoints, small, PER_RUN)
    produce(endpoints, big, RECORDS)  # twice the backlog: does the peak still grow?
    twenty_x = median_peak(endpoints, big, 2 * RECORDS)
    after_start = at_default["records"] / at_default["run_seconds"]
    alone_after_start = alone["records"] / alone["run_seconds"]
    end_to_end = at_default["records"] / at_default["seconds"]
    small_plans = ten_x["records"] / ten_x["run_seconds"]
    warm = ten_x["plans_after_the_first"]
    warm_rate = warm["records"] / warm["seconds"]
    return {
        "records": RECORDS,
        "avg_value_bytes": value_bytes,
        "max_records_per_run": PER_RUN,
        "consumer_perf_test": perf,
        "archiver_default_limit": at_default,
        "spark_alone": alone,
        "archiver_10x": ten_x,
        "archiver_1x": one_x,
        "archiver_20x": twenty_x,
        "archiver_records_per_second_after_start": after_start,
        "archiver_records_per_second_end_to_end": end_to_end,
        "B1_ratio_after_start": after_start / perf["records_per_second_reported"],
        "B1_ratio_end_to_end": end_to_end / perf["records_per_second_reported"],
        "spark_alone_ratio_after_start": alone_after_start / perf["records_per_second_reported"],
        "ratio_archiver_to_spark_alone_after_start": after_start / alone_after_start,
        "B1_ratio_after_start_ten_plans": small_plans / perf["records_per_second_reported"],
        "ratio_warm_plans": warm_rate / perf["records_per_second_reported"],
        **memory_ratios(ten_x, one_x),
        "ratio_peak_rss_20x_to_10x": twenty_x["peak_rss_mib"] / ten_x["peak_rss_mib"],
        "archiver_cpu_microseconds_per_record": at_default["cpu_seconds"] / RECORDS * 1e6,
    }


def fleet(endpoints: Endpoints) -> dict[str, Any]:
    """B-fleet: FLEET_TOPICS topics x 3 partitions x FLEET_RECORDS records archived in one run, against one run
    archiving one such topic."""
    topics = [f"bench.fleet.{uuid.uuid4().hex[:8]}" for _ in range(FLEET_TOPICS + 1)]
    for index, topic in enumerate(topics):
        produce(endpoints, topic, FLEET_RECORDS, quiet=True)
        if index % 20 == 0:
            print(f"[bench] fleet: produced {index + 1}/{len(topics)} topics", flush=True)
    one = archive(topics[:1], FLEET_RECORDS, FLEET_CONCURRENCY)
    print(f"[bench] one topic: {one}", flush=True)
    many = archive(topics[1:], FLEET_RECORDS, FLEET_CONCURRENCY)
    print(f"[bench] {FLEET_TOPICS} topics: {many}", flush=True)
    return {
        "topics": FLEET_TOPICS,
        "records_per_topic": FLEET_RECORDS,
        "concurrency": FLEET_CONCURRENCY,
        "one_topic": one,
        "fleet": many,
        "fleet_cycle_seconds": many["seconds"],
        "B_fleet_ratio": many["seconds"] / one["seconds"],
        "B_fleet_ratio_after_start": many["run_seconds"] / one["run_seconds"],
    }


def main() -> None:
    endpoints = local_endpoints()
    with stack.running():
        parts = os.environ.get("BENCH_ARCHIVER_PARTS", "throughput,fleet").split(",")
        result: dict[str, Any] = {}
        if "throughput" in parts:
            result["throughput"] = throughput_and_memory(endpoints)
        if "fleet" in parts:
            result["fleet"] = fleet(endpoints)
        write_result("archiver", result)
