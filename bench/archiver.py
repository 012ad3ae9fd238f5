"""Archiver: throughput against `kafka-consumer-perf-test` on the same topic in the same run, and peak memory
for a 1x and a 10x backlog (the per-run record limit is what keeps memory bounded).

One topic of BENCH_RECORDS (default 2,000,000) Avro records of about 200 bytes on the local broker. The
archiver runs in a child process until caught up; the peak resident memory of its whole process tree (Python
driver, Spark JVM, Python workers) is sampled from /proc.
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

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.common import write_result
from kafkalake.kafka import ensure_topic
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.settings import Endpoints
from kafkalake.wire import encode
from kafkalake_dev import stack
from kafkalake_dev.local import local_endpoints

RECORDS = int(os.environ.get("BENCH_RECORDS", "2000000"))
PER_RUN = RECORDS // 10
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


def produce(endpoints: Endpoints, topic: str, records: int) -> float:
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic, 3)
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
        if i % 200_000 == 0:
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


def _tree_rss_kib(root: int) -> int:
    total, pending = 0, [root]
    while pending:
        pid = pending.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        match = re.search(r"VmRSS:\s+(\d+)", status)
        total += int(match.group(1)) if match else 0
        pending += [int(c) for c in children]
    return total


def archive(endpoints: Endpoints, topic: str, per_run: int) -> dict[str, float]:
    """Run the archiver in a child process until caught up; wall time and peak RSS of its process tree."""
    with tempfile.TemporaryDirectory() as folder:
        result_file = Path(folder) / "result.json"
        child = subprocess.Popen([sys.executable, "-m", "bench.archiver_run", topic, str(per_run), str(result_file)])
        peak = 0

        def sample() -> None:
            nonlocal peak
            while child.poll() is None:
                peak = max(peak, _tree_rss_kib(child.pid))
                time.sleep(0.25)

        sampler = threading.Thread(target=sample)
        sampler.start()
        child.wait()
        sampler.join()
        if child.returncode != 0:
            raise RuntimeError(f"archiver child exited with {child.returncode}")
        outcome: dict[str, float] = json.loads(result_file.read_text())
    return {**outcome, "peak_rss_mib": peak / 1024}


def main() -> None:
    endpoints = local_endpoints()
    with stack.running():
        big, small = f"bench.archiver.{uuid.uuid4().hex[:8]}", f"bench.archiver.{uuid.uuid4().hex[:8]}"
        value_bytes = produce(endpoints, big, RECORDS)
        produce(endpoints, small, PER_RUN)
        perf = consumer_perf_test(endpoints, big, RECORDS)
        print(f"[bench] kafka-consumer-perf-test: {perf}", flush=True)
        ten_x = archive(endpoints, big, PER_RUN)
        print(f"[bench] archiver on {RECORDS} records: {ten_x}", flush=True)
        one_x = archive(endpoints, small, PER_RUN)
        print(f"[bench] archiver on {PER_RUN} records: {one_x}", flush=True)
        archiver_rate = ten_x["records"] / ten_x["seconds"]
        result: dict[str, Any] = {
            "records": RECORDS,
            "avg_value_bytes": value_bytes,
            "max_records_per_run": PER_RUN,
            "consumer_perf_test": perf,
            "archiver_10x": ten_x,
            "archiver_1x": one_x,
            "archiver_records_per_second": archiver_rate,
            "ratio_archiver_to_consumer_reported": archiver_rate / perf["records_per_second_reported"],
            "ratio_archiver_to_consumer_wall": archiver_rate / perf["records_per_second_wall"],
            "ratio_peak_memory_10x_to_1x": ten_x["peak_rss_mib"] / one_x["peak_rss_mib"],
        }
        write_result("archiver", result)
