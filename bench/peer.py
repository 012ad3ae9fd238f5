"""kafkalake against a peer (``python -m bench peer``): the Apache Iceberg Kafka Connect sink (``bench.connect``), on
the same topic and the same records, in the same run.

The topic: BENCH_PEER_RECORDS (default 200,000; issue #55 asks 2,000,000, which does not fit a short run on two
cores) plain JSON records in 3 partitions, the fields of ``bench.archiver.SCHEMA`` (about 220 bytes each). JSON
because both sides read it without a registry: the sink through Kafka's JsonConverter (schemas.enable=false, the
table's columns inferred from the first records), the archiver as ``value_format: json`` (the columns of the
catalog's schema); an Avro topic would need a Confluent-compatible converter the sink's distribution does not carry.

Each pair, alternated BENCH_PAIRS (default 3) times: a fresh Connect worker (one, distributed mode) with a new sink
into a new Glue table, committing every BENCH_PEER_COMMIT_SECONDS (default 10; the sink's default is 300), from the
start of its JVM until the table holds every record; then kafkalake's archiver (``bench.peer_archive``, a child
process as the job runs) over the same topic into its own new Iceberg table, from the start of its Python process
until caught up. Per side: wall seconds, CPU seconds of its whole process tree (the worker's JVM; the archiver's
Python driver, Spark JVM and Python workers), both including each side's start; then the table's rows, duplicate
(Kafka partition, offset) pairs and data files per table-hour (data files ÷ distinct hours of Kafka time). Each
figure is kafkalake ÷ peer per pair, with the median and the spread (``bench.common``). Then each side's
kill-and-restart run on the same topic (``bench.peer_kills``; BENCH_PEER_KILLS=0 leaves it out).
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

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench import connect, peer_kills
from bench.archiver import PARTITIONS, child_run, forget_offsets, payment_fields
from bench.common import BUCKET, delivered, pair_ratios, say, send, spread, timed, write_result
from bench.peer_tables import DATABASE, KAFKALAKE_COLUMNS, PEER_COLUMNS, ensure_database, table_figures, table_records
from bench.proc import tree_sample
from kafkalake.endpoints import Endpoints
from kafkalake.topic_spec import ArchivePolicy
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import ensure_topic

RECORDS = int(os.environ.get("BENCH_PEER_RECORDS", "200000"))
PAIRS = int(os.environ.get("BENCH_PAIRS", "3"))
COMMIT_SECONDS = float(os.environ.get("BENCH_PEER_COMMIT_SECONDS", "10"))


def produce_json(endpoints: Endpoints, topic: str, records: int) -> float:
    """``records`` JSON records with ``bench.archiver.SCHEMA``'s fields (3 partitions); the values' mean size."""
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic, PARTITIONS)
    settings = {"bootstrap.servers": endpoints.kafka_bootstrap, "linger.ms": 50, "compression.type": "lz4"}
    producer = Producer({**settings, "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True})
    base_ms, sizes = int(time.time() * 1000) - 3_600_000, 0
    for i in range(records):
        value = json.dumps(payment_fields(i, base_ms)).encode()
        sizes += len(value)
        send(producer, topic, str(i).encode(), value)
    delivered(producer, topic)
    return sizes / records


def peer_run(
    endpoints: Endpoints,
    topic: str,
    records: int,
    folder: Path,
    *,
    commit_seconds: float = COMMIT_SECONDS,
    wait_seconds: float = 1800,
) -> dict[str, Any]:
    """A fresh worker and sink from ``topic`` into a new table, until the table holds ``records`` rows: wall and CPU
    seconds of the worker's JVM from its start (and after its REST API answered), how the worker ended (its exit
    code once stopped), then the table's figures."""
    worker = connect.Worker(endpoints, folder)
    table = f"{DATABASE}.peer_{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    worker.start()
    assert worker.process is not None  # started
    up_seconds, up_cpu = time.monotonic() - started, sum(tree_sample(worker.process.pid)[1].values())
    try:
        worker.sink(worker.name, topic, table, commit_seconds=commit_seconds, tasks=connect.TASKS)
        while table_records(endpoints, table) < records:
            failed = worker.failures(worker.name)
            if failed or time.monotonic() - started > wait_seconds:
                raise RuntimeError(f"the sink did not drain {topic}: {failed or 'timed out'}; see {worker.log}")
            time.sleep(1)
        wall, cpu = time.monotonic() - started, sum(tree_sample(worker.process.pid)[1].values())
    finally:
        worker.stop()
    return {
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "start_seconds": up_seconds,
        "start_cpu_seconds": up_cpu,
        "table": table,
        "worker_log": str(worker.log),
        "worker_exit": worker.process.returncode,
        **table_figures(endpoints, table, PEER_COLUMNS),
    }


def kafkalake_run(endpoints: Endpoints, topic: str) -> dict[str, Any]:
    """The archiver over ``topic`` from its first offsets into a new table (``bench.peer_archive``)."""
    forget_offsets(endpoints, topic)
    wall, run = timed(lambda: child_run("bench.peer_archive", str(ArchivePolicy().max_records_per_run), topic))
    return {**run, "wall_seconds": wall, **table_figures(endpoints, run["table"], KAFKALAKE_COLUMNS)}


def ratio(ours: list[float], theirs: list[float]) -> dict[str, Any]:
    ratios = pair_ratios(ours, theirs)
    return {"median": statistics.median(ratios), "spread": spread(ratios), "pairs": ratios}


def pairs(endpoints: Endpoints, topic: str, folder: Path) -> dict[str, Any]:
    """PAIRS alternated pairs of runs of each side over ``topic`` (RECORDS records), each into a new table."""
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for number in range(1, PAIRS + 1):
        theirs.append(peer_run(endpoints, topic, RECORDS, folder))
        say(f"peer pair {number}/{PAIRS}, Iceberg sink: {summary(theirs[-1])}")
        ours.append(kafkalake_run(endpoints, topic))
        say(f"peer pair {number}/{PAIRS}, kafkalake: {summary(ours[-1])}")
    per_cpu = [[RECORDS / run["cpu_seconds"] for run in runs] for runs in (ours, theirs)]
    return {
        "records": RECORDS,
        "topic_partitions": PARTITIONS,
        "peer": {
            "sink": f"org.apache.iceberg:iceberg-kafka-connect:{connect.SINK_VERSION}",
            "connect_runtime": f"org.apache.kafka:connect-runtime:{stack.KAFKA_VERSION}",
            "tasks_max": connect.TASKS,
            "commit_interval_seconds": COMMIT_SECONDS,
            "converter": "JsonConverter, schemas.enable=false",
            "connect_defaults": connect.CONNECT_DEFAULTS,
        },
        "kafkalake_runs": ours,
        "peer_runs": theirs,
        "records_per_cpu_second_kafkalake_to_peer": ratio(*per_cpu),
        "wall_seconds_kafkalake_to_peer": ratio(*[[r["wall_seconds"] for r in runs] for runs in (ours, theirs)]),
        "data_files_per_table_hour_kafkalake_to_peer": ratio(
            *[[r["data_files_per_table_hour"] for r in runs] for runs in (ours, theirs)]
        ),
        "exactness": {
            side: [{k: r[k] for k in ("rows", "duplicate_partition_offset_pairs")} for r in runs]
            for side, runs in (("kafkalake", ours), ("peer", theirs))
        },
    }


def summary(run: dict[str, Any]) -> str:
    return (
        f"{run['wall_seconds']:.0f} s wall, {RECORDS / run['cpu_seconds']:,.0f} records/CPU-s, {run['rows']:,} rows, "
        f"{run['duplicate_partition_offset_pairs']} duplicates, {run['data_files']} data files"
    )


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-peer-"))  # kept: the workers' logs, the sink's commits in them
    with stack.running():
        endpoints = with_bucket(local_endpoints(), BUCKET)
        topic = f"bench.peer.{uuid.uuid4().hex[:8]}"
        value_bytes = produce_json(endpoints, topic, RECORDS)
        say(f"peer: produced {RECORDS:,} JSON records ({value_bytes:.0f} bytes each) to {topic}")
        ensure_database(endpoints)
        measured = pairs(endpoints, topic, folder)
        killed = None  # BENCH_PEER_KILLS=0: the pairs alone
        if peer_kills.KILLS:
            killed = peer_kills.side_by_side(endpoints, topic, RECORDS, folder, COMMIT_SECONDS)
            for side in ("peer", "kafkalake"):
                rows, duplicates = killed[side]["rows"], killed[side]["duplicate_partition_offset_pairs"]
                say(f"{side} killed {peer_kills.KILLS} times: {rows:,} rows of {RECORDS:,}, {duplicates} duplicates")
        write_result("peer", {**measured, "avg_value_bytes": value_bytes, "kill_and_restart": killed})
