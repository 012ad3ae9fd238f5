"""Freshness against the peer (``python -m bench peer-freshness``, issue #55): from a record produced to it being
readable in each side's Iceberg table, at each side's default and fastest settings.

- **The sink, measured** at each commit interval of BENCH_PEER_FRESHNESS_INTERVALS (default ``1,10`` seconds; the
  sink takes any ``iceberg.control.commit.interval-ms``, and a commit starts only once the one before has ended): a
  fresh worker and sink on a new topic; once the sink has its partitions (its coordinator started), RATE records a
  second for SECONDS seconds; then, once the table holds them all, each record's latency is the time of the snapshot
  that added its data file (the commit's, on this machine's clock) less its Kafka timestamp (the producer's
  CreateTime, this machine's clock). Its default interval, 300 s, is **derived**: 300 s plus what each measured run's
  worst record waited beyond its interval.
- **kafkalake, measured once, derived per schedule**: the archiver (a child process, as the job runs) started over
  the backlog RATE records a second leave in the shortest schedule an environment may set; ``commit_seconds`` is
  from the run's start to its table's snapshot. A record produced just after a run read the high watermarks waits
  for the next run, so at a schedule of S minutes the worst is S plus ``commit_seconds`` and the best
  ``commit_seconds``, **derived** at the default schedule and the shortest (EMR Serverless's start of a job run is
  not counted, as in ``bench.freshness``).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench import connect, peer_kills
from bench.archiver import PARTITIONS, child_run, payment_fields
from bench.common import BUCKET, delivered, say, send, write_result
from bench.peer import produce_json
from bench.peer_tables import DATABASE, KAFKALAKE_COLUMNS, PEER_COLUMNS, ensure_database, table_records
from kafkalake.endpoints import Endpoints
from kafkalake.environments import ARCHIVER_SCHEDULE_MINIMUM_MINUTES, EnvironmentConfig
from kafkalake.iceberg import table_catalog
from kafkalake.topic_spec import ArchivePolicy
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import ensure_topic

INTERVALS = tuple(float(s) for s in os.environ.get("BENCH_PEER_FRESHNESS_INTERVALS", "1,10").split(","))
RATE = int(os.environ.get("BENCH_PEER_FRESHNESS_RATE", "200"))
SECONDS = float(os.environ.get("BENCH_PEER_FRESHNESS_SECONDS", "60"))
SINK_DEFAULT_INTERVAL_SECONDS = 300.0
"""``iceberg.control.commit.interval-ms``'s default (300,000), IcebergSinkConfig.COMMIT_INTERVAL_MS_DEFAULT."""


def stream(endpoints: Endpoints, topic: str, rate: int, seconds: float) -> int:
    """``rate`` JSON records a second to ``topic`` for ``seconds``, each stamped by the producer as it is sent; how
    many."""
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "linger.ms": 5, "enable.idempotence": True})
    started, sent, base_ms = time.monotonic(), 0, int(time.time() * 1000)
    while (elapsed := time.monotonic() - started) < seconds:
        while sent < int(elapsed * rate):
            send(producer, topic, str(sent).encode(), json.dumps(payment_fields(sent, base_ms)).encode())
            sent += 1
        producer.poll(0)
        time.sleep(0.02)
    delivered(producer, topic)
    return sent


def commit_latencies(endpoints: Endpoints, table: str, timestamp: str) -> list[float]:
    """Each row's seconds from its Kafka timestamp (``timestamp``: epoch milliseconds, or a timestamp column) to the
    snapshot that added its data file."""
    loaded = table_catalog(endpoints).load_table(table)
    committed_ms = {s.snapshot_id: s.timestamp_ms for s in loaded.snapshots()}
    latencies: list[float] = []
    for entry in loaded.inspect.entries().to_pylist():
        with loaded.io.new_input(entry["data_file"]["file_path"]).open() as file:
            stamps = pq.read_table(file, columns=[timestamp])[timestamp]
        if pa.types.is_timestamp(stamps.type):
            stamps = stamps.cast(pa.timestamp("ms", "UTC")).cast(pa.int64())
        commit_ms = committed_ms[entry["snapshot_id"]]
        latencies += [(commit_ms - ms) / 1000 for ms in stamps.to_pylist()]
    return latencies


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "median_seconds": statistics.median(ordered),
        "p95_seconds": ordered[int(0.95 * (len(ordered) - 1))],
        "max_seconds": ordered[-1],
        "min_seconds": ordered[0],
    }


def sink_freshness(endpoints: Endpoints, folder: Path, interval: float) -> dict[str, Any]:
    """The sink committing every ``interval`` seconds on a stream of RATE records a second for SECONDS seconds."""
    topic = f"bench.peer.fresh.{uuid.uuid4().hex[:8]}"
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic, PARTITIONS)
    worker = connect.Worker(endpoints, folder)
    table = f"{DATABASE}.peer_fresh_{uuid.uuid4().hex[:8]}"
    worker.start()
    try:
        worker.sink(worker.name, topic, table, commit_seconds=interval, tasks=connect.TASKS)
        resumed = peer_kills.resumption(worker.log, 1, peer_kills.RESUME_WAIT)
        if resumed is None:
            raise RuntimeError(f"the sink's coordinator did not start; see {worker.log}")
        produced = stream(endpoints, topic, RATE, SECONDS)
        deadline = time.monotonic() + interval + 120
        while table_records(endpoints, table) < produced and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        worker.stop()
    latencies = commit_latencies(endpoints, table, PEER_COLUMNS[2])
    return {
        "commit_interval_seconds": interval,
        "produced": produced,
        "rows": len(latencies),
        "snapshots": len(table_catalog(endpoints).load_table(table).snapshots()),
        "worker_log": str(worker.log),
        **summary(latencies),
    }


def archiver_commit(endpoints: Endpoints, backlog: int) -> dict[str, Any]:
    """One archiver run over a new topic of ``backlog`` records: seconds from its start to its table's snapshot."""
    topic = f"bench.peer.fresh.{uuid.uuid4().hex[:8]}"
    produce_json(endpoints, topic, backlog)
    started_ms = time.time() * 1000
    run = child_run("bench.peer_archive", str(ArchivePolicy().max_records_per_run), topic)
    [snapshot] = table_catalog(endpoints).load_table(run["table"]).snapshots()
    return {
        "records": backlog,
        "commit_seconds": (snapshot.timestamp_ms - started_ms) / 1000,
        "session_seconds": run["session_seconds"],
        "rows": table_records(endpoints, run["table"]),
        "latencies_of_its_records": summary(commit_latencies(endpoints, run["table"], KAFKALAKE_COLUMNS[2])),
    }


def derived(sink: list[dict[str, Any]], archiver: dict[str, Any]) -> dict[str, Any]:
    """Worst and best seconds from produced to readable at the settings not measured: the sink at its default
    interval (300 s plus the most any measured run's worst record waited beyond its interval), the archiver at its
    default and shortest schedules (the schedule plus its run's commit seconds; best: the commit seconds)."""
    beyond = max(run["max_seconds"] - run["commit_interval_seconds"] for run in sink)
    default = EnvironmentConfig.model_fields["archiver_schedule_minutes"].default
    shortest = ARCHIVER_SCHEDULE_MINIMUM_MINUTES
    return {
        "sink_default_interval": {
            "commit_interval_seconds": SINK_DEFAULT_INTERVAL_SECONDS,
            "worst_seconds": SINK_DEFAULT_INTERVAL_SECONDS + beyond,
        },
        "archiver": {
            f"every_{minutes}_minutes": {
                "schedule_minutes": minutes,
                "worst_seconds": minutes * 60 + archiver["commit_seconds"],
                "best_seconds": archiver["commit_seconds"],
            }
            for minutes in (default, shortest)
        },
    }


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-peer-freshness-"))  # kept: the workers' logs
    with stack.running():
        endpoints = with_bucket(local_endpoints(), BUCKET)
        ensure_database(endpoints)
        sink = []
        for interval in INTERVALS:
            sink.append(sink_freshness(endpoints, folder, interval))
            say(f"peer freshness, the sink every {interval:g} s: {json.dumps(sink[-1])}")
        archiver = archiver_commit(endpoints, RATE * ARCHIVER_SCHEDULE_MINIMUM_MINUTES * 60)
        say(f"peer freshness, the archiver: {json.dumps(archiver)}")
        write_result(
            "peer-freshness",
            {
                "rate_per_second": RATE,
                "stream_seconds": SECONDS,
                "sink": sink,
                "archiver": archiver,
                "derived": derived(sink, archiver),
                "sink_version": connect.SINK_VERSION,
            },
        )
