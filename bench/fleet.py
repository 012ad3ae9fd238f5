"""Archiver fleets.

B-fleet (``python -m bench archiver-fleet``): BENCH_FLEET_TOPICS (100) topics of BENCH_FLEET_RECORDS (2,000)
records each (spread over 3 partitions) archived by one run, against one run archiving one such topic.

The fleet at full size (``python -m bench fleet``), one cycle of the three jobs in a throw-away environment (its own
bucket with S3 event notifications, queue, Glue database and event bus): 160 topics, FULL_HEAVY (4) of
FULL_HEAVY_RECORDS (250,000) records and the others of FULL_LIGHT_RECORDS (2,000), all in 3 partitions, their Kafka
time spread over the three hours that ended three hours ago (so every hour is closed for the compactor, whose safety
delay is two). Then, each timed and with its API calls counted against their lower bounds:

1. one archiver run over the 160 topics (``bench.archiver_run``, ARCHIVER_CONCURRENCY at a time as the job runs);
   S3: the driver's calls (``bench.calls``: leases, receipts) plus one PUT per object its executors wrote, against
   one PUT per object plus one per plan (a durable record of its progress);
2. one maintainer drain of the resulting events (``lambdas.maintainer.logic.drain``): ReceiveMessage and
   DeleteMessageBatch against ⌈messages/10⌉, Glue's BatchCreatePartition against ⌈partitions/100⌉ per table;
3. one compactor run over the fleet's closed partitions, every partition with two files or more (a light topic's hour
   holds three: one per Kafka partition), its driver's Glue calls against one read per table and one update per
   compacted partition, its driver's S3 calls per compacted partition.

Each job's wall time is set against its schedule (15 minutes, 10, an hour).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from bench.archiver import archive, produce
from bench.archiver_run import bench_topic
from bench.calls import count_every_client
from bench.common import say, write_result
from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import ARCHIVER_CONCURRENCY
from kafkalake.layout import parse_data_key
from kafkalake.topic_catalog import Topic, TopicCatalog, tables_document
from kafkalake.topic_spec import ArchivePolicy
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import environ_with, local_endpoints
from kafkalake_dev.local.provision import PROVISIONED_SERVICES, provision
from kafkalake_dev.local.s3_events import as_s3_sends
from kafkalake_dev.local.sandbox import count_calls, isolated_env, with_bucket
from kafkalake_dev.local.spark import local_session
from lambdas.maintainer.dal import Clients, State
from lambdas.maintainer.logic import DrainConfig, drain
from lambdas.tables import tables_from_document
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Action, Knobs

FLEET_TOPICS = int(os.environ.get("BENCH_FLEET_TOPICS", "100"))
FLEET_RECORDS = int(os.environ.get("BENCH_FLEET_RECORDS", "2000"))
FLEET_CONCURRENCY = int(os.environ.get("BENCH_FLEET_CONCURRENCY", "8"))
FULL_TOPICS = int(os.environ.get("BENCH_FULL_TOPICS", "160"))
FULL_HEAVY = int(os.environ.get("BENCH_FULL_HEAVY", "4"))
FULL_HEAVY_RECORDS = int(os.environ.get("BENCH_FULL_HEAVY_RECORDS", "250000"))
FULL_LIGHT_RECORDS = int(os.environ.get("BENCH_FULL_LIGHT_RECORDS", "2000"))
HOURS_AGO = (6, 3)
SCHEDULE_SECONDS = {"archiver": 15 * 60, "maintainer": 10 * 60, "compactor": 60 * 60}


def b_fleet(endpoints: Endpoints) -> dict[str, Any]:
    """B-fleet: FLEET_TOPICS topics of FLEET_RECORDS records each (over 3 partitions) archived in one run, against
    one run archiving one such topic."""
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
        write_result("archiver-fleet", b_fleet(endpoints))


def fleet_topics(endpoints: Endpoints, env: str) -> tuple[list[Topic], list[str], int]:
    """The fleet's topics produced to Kafka: catalog topics of ``env``, their ``bench.archiver_run`` arguments, and
    the records in all."""
    per_run = ArchivePolicy().max_records_per_run
    topics, arguments, records = [], [], 0
    for index in range(FULL_TOPICS):
        kafka_topic, size = (
            f"bench.full.{uuid.uuid4().hex[:8]}",
            FULL_HEAVY_RECORDS if index < FULL_HEAVY else FULL_LIGHT_RECORDS,
        )
        produce(endpoints, kafka_topic, size, quiet=True, hours_ago=HOURS_AGO)
        arguments.append(f"{kafka_topic}={env}/bench/fleet/t{index:03d}")
        topics.append(bench_topic(arguments[-1], per_run))
        records += size
        if index % 20 == 0:
            say(f"full fleet: produced {index + 1}/{FULL_TOPICS} topics")
    return topics, arguments, records


def archived_partitions(s3: Any, bucket: str, topics: list[Topic]) -> Counter[str]:
    """Per table, the Glue partitions its data objects fall in."""
    found: Counter[str] = Counter()
    for topic in topics:
        keys = list_objects(s3, bucket, topic.prefix.data_prefix())
        found[topic.table] = len({parse_data_key(key).partition for key in keys})
    return found


def maintain(endpoints: Endpoints, env: Any, queue_url: str, topics: list[Topic]) -> dict[str, Any]:
    """One drain of every event the archiver run caused, its calls counted."""
    calls: Counter[str] = Counter()
    glue = count_calls(make_client(endpoints, "glue"), calls)
    sqs = as_s3_sends(count_calls(make_client(endpoints, "sqs"), calls))
    settings = DrainConfig(
        queue_url=queue_url,
        bucket=env.bucket,
        event_bus=env.event_bus_name,
        env=env.name,
        tables=tables_from_document(tables_document(topics)),
        max_messages=1_000_000,
        wait_seconds=0,
    )
    clients = Clients(
        sqs,
        glue,
        make_client(endpoints, "s3"),
        make_client(endpoints, "events"),
        make_client(endpoints, "lakeformation"),
    )
    started = time.monotonic()
    report = drain(settings, clients, State(600), lambda: 900_000)
    seconds = time.monotonic() - started
    return {"seconds": seconds, "counts": dict(sorted(report.counts.items())), "calls": dict(sorted(calls.items()))}


def compact(endpoints: Endpoints, topics: list[Topic]) -> dict[str, Any]:
    """One compactor run over every closed partition with two files or more, its driver's calls counted."""
    spark = local_session(endpoints, "kafkalake-bench-fleet-compactor")
    try:
        calls: Counter[str] = Counter()
        count_every_client(calls)
        started = time.monotonic()
        results = Compactor(spark, endpoints, topics, Knobs(min_input_files=2), say=lambda _: None).run()
        seconds = time.monotonic() - started
    finally:
        spark.stop()
    done = [r for r in results if r.action == Action.COMPACTED]
    failed = [r for r in results if r.action == Action.FAILED]
    if failed:
        raise RuntimeError(f"the compactor failed: {failed[:3]}")
    return {
        "seconds": seconds,
        "partitions_compacted": len(done),
        "files_before": sum(r.files_before for r in done),
        "files_after": sum(r.files_after for r in done),
        "calls": dict(sorted(calls.items())),
    }


def bounds(
    archived: dict[str, Any], maintained: dict[str, Any], compacted: dict[str, Any], partitions: Counter[str]
) -> dict[str, Any]:
    """Each job's calls against their lower bounds."""
    messages = maintained["counts"]["messages"]
    s3_archiver = sum(n for c, n in archived["driver_calls"].items() if c.startswith("s3.")) + archived["objects"]
    glue_compactor = sum(n for c, n in compacted["calls"].items() if c.startswith("glue."))
    s3_compactor = sum(n for c, n in compacted["calls"].items() if c.startswith("s3."))
    lower = {
        "archiver_s3": archived["objects"] + archived["plans"],
        "ReceiveMessage": math.ceil(messages / 10),
        "DeleteMessageBatch": math.ceil(messages / 10),
        "BatchCreatePartition": sum(math.ceil(n / 100) for n in partitions.values()),
        "compactor_glue": len(partitions) + compacted["partitions_compacted"],
    }
    calls = maintained["calls"]
    return {
        "lower_bounds": lower,
        "ratios": {
            "archiver_s3": s3_archiver / lower["archiver_s3"],
            "ReceiveMessage": calls.get("sqs.ReceiveMessage", 0) / lower["ReceiveMessage"],
            "DeleteMessageBatch": calls.get("sqs.DeleteMessageBatch", 0) / lower["DeleteMessageBatch"],
            "BatchCreatePartition": calls.get("glue.BatchCreatePartition", 0) / lower["BatchCreatePartition"],
            "compactor_glue": glue_compactor / lower["compactor_glue"],
        },
        "compactor_driver_s3_calls_per_partition": s3_compactor / max(1, compacted["partitions_compacted"]),
    }


def full() -> None:
    """The fleet at full size: one archiver run, one maintainer drain, one compactor run."""
    with stack.running():
        env, _, _ = isolated_env(Path(tempfile.mkdtemp(prefix="kafkalake-bench-fleet-")))
        endpoints = with_bucket(local_endpoints(), env.bucket)
        topics, arguments, records = fleet_topics(endpoints, env.name)
        clients = {s: make_client(endpoints, s) for s in PROVISIONED_SERVICES}
        provisioned = provision(clients, endpoints.region, env, TopicCatalog(Path("bench"), tuple(topics)))
        with environ_with({"BENCH_BUCKET": env.bucket}):
            archived = archive(arguments, ArchivePolicy().max_records_per_run, ARCHIVER_CONCURRENCY)
        say(f"archiver over {len(topics)} topics: {archived['seconds']:.1f} s")
        partitions = archived_partitions(clients["s3"], env.bucket, topics)
        maintained = maintain(endpoints, env, provisioned.queue_url, topics)
        say(f"maintainer drain: {maintained['seconds']:.1f} s, {maintained['counts']}")
        compacted = compact(endpoints, topics)
        say(f"compactor: {compacted['seconds']:.1f} s, {compacted['partitions_compacted']} partitions")
        walls = {
            "archiver": archived["seconds"],
            "maintainer": maintained["seconds"],
            "compactor": compacted["seconds"],
        }
        write_result(
            "fleet",
            {
                "topics": len(topics),
                "heavy_topics": FULL_HEAVY,
                "heavy_records": FULL_HEAVY_RECORDS,
                "light_records": FULL_LIGHT_RECORDS,
                "records": records,
                "concurrency": ARCHIVER_CONCURRENCY,
                "glue_partitions": sum(partitions.values()),
                "archiver": archived,
                "maintainer": maintained,
                "compactor": compacted,
                **bounds(archived, maintained, compacted, partitions),
                "share_of_schedule": {job: walls[job] / SCHEDULE_SECONDS[job] for job in walls},
            },
        )
