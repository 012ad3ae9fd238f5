"""Archiver, each figure against its baseline in the same run:

- B1: one topic of BENCH_RECORDS (default 2,000,000) Avro records of about 200 bytes in 3 partitions, at the
  catalog's default per-plan limit (1,000,000 records). The archiver's records/s after its Spark session is up,
  against the same topic through the fairest Spark-alone pipeline (``bench.spark_alone``: the archiver's own
  Kafka read, ``from_avro``, and the archiver's committer: one object per task under an offset-named key, no S3A,
  no rename), in the same plans; the CPU seconds per million records of both (their process trees after the Spark
  start, ``bench.proc``); and both against ``kafka-consumer-perf-test`` on the same topic, the physical reference.
  Also at a tenth of BENCH_RECORDS per plan (ten plans), and plans 2-10 of that run alone (``ratio_warm_plans``),
  without the first plan's warm-up (Python workers, Kafka clients, code generation, JIT), which a run pays once.
- B1m: the peak resident memory of the archiver's whole process tree at a 10x backlog against a 1x backlog: the
  per-plan record limit keeps memory bounded. Each is the median of BENCH_MEMORY_RUNS (5) runs. Beside it: the same
  ratio for the summed PSS and for the JVM alone, and the 20x backlog against the 10x (the topic doubled).
- Memory per plan size: the peaks of the Spark JVM, the Python driver and Spark's Python workers at PLAN_SIZES
  records per plan (each over a topic of at least two such plans), from which ``bench.sizing`` derives the EMR
  Serverless worker sizes.
  B1, B1m and these archive the same topics several times (into different tables, their consumer group deleted in
  between).

The archiver runs in a child process (``bench.archiver_run``) as the archiver job does: every topic caught up,
several at a time. B-fleet and the fleet at full size are in ``bench.fleet``. A few lines past 300: the workload
(producing, perf-test) and the measurements over it stay together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from bench.common import cpu_per_million, delivered, paired_ratio, rate_after_start, send, write_result
from bench.proc import MEMORY_FIGURES, watched
from bench.sizing import PlanMemory
from kafkalake.endpoints import Endpoints
from kafkalake.naming import consumer_group
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.topic_spec import ArchivePolicy
from kafkalake.wire import encode
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.workload import ensure_topic

RECORDS = int(os.environ.get("BENCH_RECORDS", "2000000"))
PARTITIONS = 3
PER_RUN = RECORDS // 10
MEMORY_RUNS = int(os.environ.get("BENCH_MEMORY_RUNS", "5"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "3"))
PLAN_SIZES = (10_000, 100_000)
"""Records per plan measured for memory beside PER_RUN (B1m) and the default limit (B1)."""
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


def produce(
    endpoints: Endpoints,
    topic: str,
    records: int,
    *,
    quiet: bool = False,
    hours_ago: tuple[int, int] | None = None,
    schema: str = SCHEMA,
    more: Callable[[int], dict[str, Any]] | None = None,
) -> float:
    """``records`` records (3 partitions); their Kafka time is now, or spread evenly from ``hours_ago[0]`` hours ago
    to ``hours_ago[1]`` hours ago. SCHEMA's fields, and those of ``schema`` beyond them from ``more`` (record index →
    its further fields). The values' mean size."""
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic, PARTITIONS)
    schema_id = RegistryClient(endpoints.schema_registry_url).register(value_subject(topic), schema)
    producer = Producer(
        {
            "bootstrap.servers": endpoints.kafka_bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "lz4",
        }
    )
    now_ms = int(time.time() * 1000)
    base_ms = now_ms - 3_600_000
    started, sizes = time.monotonic(), 0
    for i in range(records):
        value = encode(
            schema_id,
            schema,
            {**payment_fields(i, base_ms), **(more(i) if more else {})},
        )
        sizes += len(value)
        at = 0 if hours_ago is None else kafka_time(i, records, hours_ago, now_ms)  # 0: the producer's now
        send(producer, topic, str(i).encode(), value, at)
        if i % 200_000 == 0 and not quiet:
            producer.poll(0)
            print(f"[bench] produced {i}/{records} to {topic} ({time.monotonic() - started:.0f}s)", flush=True)
    delivered(producer, topic)
    return sizes / records


def payment_fields(index: int, base_ms: int) -> dict[str, Any]:
    """The values of record ``index`` of the benchmarks' payments (``SCHEMA``'s fields), its business time within the
    hour from ``base_ms``."""
    return {
        "id": f"p-{index:012d}",
        "amount_cents": index * 7,
        "currency": "EUR",
        "created_at_ms": base_ms + index % 3_600_000,
        "note": "n" * 140,
    }


def kafka_time(index: int, records: int, hours_ago: tuple[int, int], now_ms: int) -> int:
    """The Kafka time (epoch ms) of record ``index`` of ``records`` spread evenly from ``hours_ago[0]`` hours before
    ``now_ms`` to ``hours_ago[1]`` hours before it."""
    first, last = (now_ms - hours * 3_600_000 for hours in hours_ago)
    return first + (last - first) * index // records


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


COORDINATOR_STARTING = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
)
"""What a broker started moments ago answers group requests with until its offsets topic is loaded."""


def forget_offsets(endpoints: Endpoints, *topics: str, attempts: int = 30) -> None:
    """Delete the topics' archiver consumer groups, so that the next run archives each topic again (retried while a
    freshly started broker's group coordinator is not ready yet)."""
    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
    for topic in topics:
        forget_group(admin, consumer_group(topic), attempts)


def forget_group(admin: AdminClient, group: str, attempts: int) -> None:
    """Delete one consumer group (none is fine: never archived yet)."""
    for attempt in range(attempts):
        try:
            for future in admin.delete_consumer_groups([group]).values():
                future.result()
        except KafkaException as exc:
            code = exc.args[0].code()
            if code == KafkaError.GROUP_ID_NOT_FOUND:  # never archived yet
                return
            if code not in COORDINATOR_STARTING or attempt == attempts - 1:
                raise
            time.sleep(1)
        else:
            return


def archive(
    topics: list[str], per_run: int, concurrency: int = 4, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run the archiver in a child process until every topic is caught up; its timings, the peak memory of its
    process tree (``bench.proc.MEMORY_FIGURES``, each its own peak) and the CPU seconds the tree used (the Spark start
    included; ``run_cpu_seconds`` after it). ``env``: added to the child's environment (``bench.hashing.VARIANT``)."""
    return child_run("bench.archiver_run", str(per_run), str(concurrency), *topics, env=env)


def spark_alone(topic: str, per_plan: int, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The same topic through Spark alone (``bench.spark_alone``) in plans of ``per_plan`` records: the baseline."""
    return child_run("bench.spark_alone", str(per_plan), topic, env=env)


def child_run(module: str, *arguments: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``python -m module RESULT_FILE arguments...`` watched (``bench.proc.watched``), with ``env`` added to its
    environment: its result, peaks and CPU."""
    with tempfile.TemporaryDirectory() as folder:
        result_file = Path(folder) / "result.json"
        memory, cpu = watched([sys.executable, "-m", module, str(result_file), *arguments], env)
        outcome: dict[str, Any] = json.loads(result_file.read_text())
    return {**outcome, **memory, "cpu_seconds": cpu}


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


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median records/s after the Spark start, with every run's rate beside it."""
    ordered = sorted(runs, key=rate_after_start)
    return {**ordered[len(ordered) // 2], "rates_after_start": [rate_after_start(run) for run in runs]}


def baseline_pairs(endpoints: Endpoints, topic: str, per_plan: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """BENCH_PAIRS runs of the archiver and of Spark alone over the whole topic, alternated (so that each pair sees
    the same load of a shared machine: ``bench.common.paired_ratio``); the median run of each."""
    archiver_runs, alone_runs = [], []
    for _ in range(PAIRS):
        forget_offsets(endpoints, topic)
        archiver_runs.append(archive([topic], per_plan))
        print(f"[bench] archiver on {topic}, {per_plan} per plan: {archiver_runs[-1]}", flush=True)
        alone_runs.append(spark_alone(topic, per_plan))
        print(f"[bench] Spark alone on {topic}, {per_plan} per plan: {alone_runs[-1]}", flush=True)
    return median_run(archiver_runs), median_run(alone_runs)


def memory_per_plan_size(endpoints: Endpoints, small: str, measured: dict[int, dict[str, Any]]) -> list[PlanMemory]:
    """Peak memory of each part at PLAN_SIZES records per plan over the small topic (PER_RUN records), beside the
    runs ``measured`` at other sizes."""
    runs = dict(measured)
    for size in PLAN_SIZES:
        forget_offsets(endpoints, small)
        runs[size] = archive([small], size)
        print(f"[bench] archiver on {PER_RUN} records, {size} per plan: {runs[size]}", flush=True)
    return [PlanMemory.of(size, run) for size, run in sorted(runs.items())]


def throughput_and_memory(endpoints: Endpoints) -> dict[str, Any]:
    """B1: records/s after the Spark start against Spark alone and kafka-consumer-perf-test on the same topic, CPU
    per million records; B1m: peak RSS at a 10x backlog against a 1x backlog, with the same per-plan record limit;
    peak memory per plan size and the EMR worker sizes it calls for."""
    big, small = f"bench.archiver.{uuid.uuid4().hex[:8]}", f"bench.archiver.{uuid.uuid4().hex[:8]}"
    value_bytes = produce(endpoints, big, RECORDS)
    produce(endpoints, small, PER_RUN)
    perf = consumer_perf_test(endpoints, big, RECORDS)
    print(f"[bench] kafka-consumer-perf-test: {perf}", flush=True)
    default_limit = ArchivePolicy().max_records_per_run
    at_default, alone = baseline_pairs(endpoints, big, default_limit)
    ten_x = median_peak(endpoints, big, RECORDS)
    one_x = median_peak(endpoints, small, PER_RUN)
    per_plan = memory_per_plan_size(endpoints, small, {default_limit: at_default, PER_RUN: ten_x})
    produce(endpoints, big, RECORDS)  # twice the backlog: does the peak still grow?
    twenty_x = median_peak(endpoints, big, 2 * RECORDS)
    after_start, alone_after_start = rate_after_start(at_default), rate_after_start(alone)
    perf_rate = perf["records_per_second_reported"]
    end_to_end = at_default["records"] / at_default["seconds"]
    warm = ten_x["plans_after_the_first"]
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
        "spark_alone_records_per_second_after_start": alone_after_start,
        "ratio_archiver_to_spark_alone_after_start": paired_ratio(
            at_default["rates_after_start"], alone["rates_after_start"]
        ),
        "archiver_cpu_seconds_per_million_records": cpu_per_million(at_default),
        "spark_alone_cpu_seconds_per_million_records": cpu_per_million(alone),
        "ratio_cpu_archiver_to_spark_alone": cpu_per_million(at_default) / cpu_per_million(alone),
        "B1_ratio_after_start": after_start / perf_rate,
        "B1_ratio_end_to_end": end_to_end / perf_rate,
        "spark_alone_ratio_after_start": alone_after_start / perf_rate,
        "B1_ratio_after_start_ten_plans": rate_after_start(ten_x) / perf_rate,
        "ratio_warm_plans": warm["records"] / warm["seconds"] / perf_rate,
        **memory_ratios(ten_x, one_x),
        "ratio_peak_rss_20x_to_10x": twenty_x["peak_rss_mib"] / ten_x["peak_rss_mib"],
        "memory_per_plan_size": [m.to_dict() for m in per_plan],
    }


def main() -> None:
    endpoints = local_endpoints()
    with stack.running():
        write_result("archiver", {"throughput": throughput_and_memory(endpoints)})
