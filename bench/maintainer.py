"""Maintainer: 10,000 events with 15% duplicates over P partitions in T tables, on the local stack.

Counts API calls against their lower bounds (ReceiveMessage and DeleteMessageBatch ⌈N/10⌉, BatchCreatePartition
⌈new partitions/100⌉ per table, and ⌈partitions/100⌉ per table and drain for confirming every partition of a drain)
and the handler's own CPU time; moto's speed is not measured.

Events arrive in waves (``BENCH_WAVE``, default 500), one warm handler run per wave, as they would between
10-minute schedules: moto's ReceiveMessage slows down linearly with queue depth, so one 10,000-deep drain
would take hours of moto time without changing any call count. Both lower bounds are reported: per wave
(what a drain of that wave can achieve) and global (all events in one drain).

Every drain sends each partition of its keys to ``BatchCreatePartition``, new or not (``AlreadyExists`` is Glue's
confirmation before a message is acknowledged): its floor is the per-wave ``confirm`` bound, and
``partition_create_requests_for_existing`` and ``duplicate_partitions_created`` count those confirmations (requests
Glue answered ``AlreadyExists``, never a partition created twice).
"""

from __future__ import annotations

import io
import math
import os
import random
import tempfile
import time
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import write_result
from kafkalake.aws import make_client
from kafkalake.layout import DataKey, Partition
from kafkalake.naming import TableInference
from kafkalake.topic_catalog import load_topic_catalog, tables_document
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.provision import PROVISIONED_SERVICES, provision
from kafkalake_dev.local.s3_events import as_s3_sends
from kafkalake_dev.local.sandbox import count_calls, isolated_env
from lambdas.maintainer.dal import Clients, State
from lambdas.maintainer.logic import DrainConfig, drain
from lambdas.maintainer.report import Report
from lambdas.tables import tables_from_document

EVENTS = int(os.environ.get("BENCH_EVENTS", "10000"))
DUPLICATE_SHARE = 0.15
HOURS_PER_TABLE = int(os.environ.get("BENCH_HOURS_PER_TABLE", "120"))
WAVE = int(os.environ.get("BENCH_WAVE", "500"))


def _parquet() -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"id": ["a"], "n": pa.array([1], pa.int64())}), out)
    return out.getvalue()


def workload(topics: list[Any]) -> tuple[list[DataKey], list[DataKey]]:
    """(unique object keys, the events for them: shuffled, 15% duplicates), seeded."""
    unique = EVENTS - int(EVENTS * DUPLICATE_SHARE)
    rng = random.Random(42)
    keys = []
    for i in range(unique):
        topic = topics[i % len(topics)]
        hour = rng.randrange(HOURS_PER_TABLE)
        day = date(2026, 11, 1) + timedelta(days=hour // 24)
        keys.append(DataKey(topic.prefix, Partition(1, day, hour % 24), 0, i * 10, i * 10 + 9))
    events = [*keys, *(rng.choice(keys) for _ in range(EVENTS - unique))]
    rng.shuffle(events)
    return keys, events


def drain_waves(events: list[DataKey], settings: DrainConfig, clients: Clients) -> tuple[Report, float, Counter[str]]:
    """Put the objects wave by wave, draining after each; return the summed report, the handler's CPU seconds and
    two per-wave lower bounds of BatchCreatePartition calls: ``new`` (⌈new partitions/100⌉ per table: creating only
    what Glue lacks) and ``confirm`` (⌈partitions/100⌉ per table: confirming every partition of the drain)."""
    body = _parquet()
    state = State(600)
    report = Report()
    cpu = 0.0
    seen: set[tuple[object, Partition]] = set()
    wave_bounds: Counter[str] = Counter()
    started = time.monotonic()
    for start in range(0, EVENTS, WAVE):
        wave = events[start : start + WAVE]
        for data_key in wave:
            clients.s3.put_object(Bucket=settings.bucket, Key=data_key.key(), Body=body)
        partitions = {(k.table, k.partition) for k in wave}
        new = Counter(table for table, partition in partitions if (table, partition) not in seen)
        seen |= partitions
        wave_bounds["new"] += sum(math.ceil(n / 100) for n in new.values())
        every = Counter(table for table, _ in partitions)
        wave_bounds["confirm"] += sum(math.ceil(n / 100) for n in every.values())
        tick = time.process_time()
        wave_report = drain(settings, clients, state, lambda: 900_000)
        cpu += time.process_time() - tick
        report.counts.update(wave_report.counts)
        report.errors.extend(wave_report.errors)
        print(f"[bench] {start + len(wave)}/{EVENTS} events drained ({time.monotonic() - started:.0f}s)", flush=True)
    return report, cpu, wave_bounds


def main() -> None:
    endpoints = local_endpoints()
    with stack.running():
        env, catalog_dir, _ = isolated_env(Path(tempfile.mkdtemp(prefix="kafkalake-bench-")))
        catalog = load_topic_catalog(catalog_dir)
        topics = catalog.for_env(env.name)
        clients = {s: make_client(endpoints, s) for s in PROVISIONED_SERVICES}
        provisioned = provision(clients, endpoints.region, env, catalog)
        tables = [
            t.model_copy(update={"inference": TableInference.NATIVE})
            for t in tables_from_document(tables_document(topics))
        ]
        keys, events = workload(topics)
        calls: Counter[str] = Counter()
        created_values: list[tuple[str, str, tuple[str, ...]]] = []

        def record_creates(params: dict[str, Any], **_: Any) -> None:
            for item in params["PartitionInputList"]:
                created_values.append((params["DatabaseName"], params["TableName"], tuple(item["Values"])))

        glue = count_calls(make_client(endpoints, "glue"), calls)
        glue.meta.events.register("provide-client-params.glue.BatchCreatePartition", record_creates)
        sqs = as_s3_sends(count_calls(make_client(endpoints, "sqs"), calls))
        settings = DrainConfig(
            queue_url=provisioned.queue_url,
            bucket=env.bucket,
            event_bus=env.event_bus_name,
            env=env.name,
            tables=tables,
            max_messages=EVENTS * 2,
            wait_seconds=0,
        )
        drained = Clients(sqs, glue, clients["s3"], clients["events"], clients["lakeformation"])
        report, cpu, wave_bounds = drain_waves(events, settings, drained)
        write_result("maintainer", summarize(report, calls, keys, len(topics), wave_bounds, cpu, created_values))


def summarize(  # noqa: PLR0917 - the measurements of one run
    report: Report,
    calls: Counter[str],
    keys: list[DataKey],
    tables: int,
    wave_bounds: Counter[str],
    cpu: float,
    created_values: list[tuple[str, str, tuple[str, ...]]],
) -> dict[str, Any]:
    messages = report.counts["messages"]  # the data events plus S3's TestEvent
    waves = math.ceil(EVENTS / WAVE)
    partitions_per_table = Counter((k.table, k.partition) for k in keys)
    new_per_table = Counter(table for table, _ in partitions_per_table)
    bound_create = sum(math.ceil(n / 100) for n in new_per_table.values())
    creates = calls["glue.BatchCreatePartition"]
    return {
        "events": EVENTS,
        "duplicate_share": DUPLICATE_SHARE,
        "tables": tables,
        "partitions": len(partitions_per_table),
        "messages_drained": messages,
        "drains": waves,
        "calls": dict(sorted(calls.items())),
        "ratios": {
            "ReceiveMessage": calls["sqs.ReceiveMessage"] / math.ceil(messages / 10),
            "ReceiveMessage_excluding_final_empty_poll_per_wave": (calls["sqs.ReceiveMessage"] - waves)
            / math.ceil(messages / 10),
            "BatchCreatePartition_vs_per_wave_bound": creates / wave_bounds["new"],
            "BatchCreatePartition_vs_per_wave_confirm_bound": creates / wave_bounds["confirm"],
            "DeleteMessageBatch": calls["sqs.DeleteMessageBatch"] / math.ceil(messages / 10),
            "BatchCreatePartition": calls["glue.BatchCreatePartition"] / bound_create,
        },
        "lower_bounds": {
            "ReceiveMessage": math.ceil(messages / 10),
            "DeleteMessageBatch": math.ceil(messages / 10),
            "BatchCreatePartition": bound_create,
        },
        "duplicate_partitions_created": len(created_values) - len(set(created_values)),
        "partition_create_requests_for_existing": len(created_values) - report.counts["partitions_added"],
        "handler_cpu_seconds_per_10k_events": cpu * 10_000 / EVENTS,
        "left_for_retry": report.counts["left_for_retry"],
        "counts": dict(sorted(report.counts.items())),
    }
