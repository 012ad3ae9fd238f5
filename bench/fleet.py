"""Archiver fleets.

B-fleet (``python -m bench archiver-fleet``, issue #37): one archiver cycle of the fleet against one light topic, each
figure against its baseline in the same run. Produced once, 3 partitions each: the fleet, BENCH_FLEET_HEAVY (4) heavy
topics of BENCH_FLEET_HEAVY_RECORDS records and BENCH_FLEET_TOPICS (156) light ones of BENCH_FLEET_RECORDS (2,000);
and one more light topic, the baseline. Then BENCH_PAIRS (3) rounds of three archiver runs (``bench.archiver.archive``:
a child process running the job's ``archive_fleet``, BENCH_FLEET_CONCURRENCY heavy topics at a time, the job's
ARCHIVER_CONCURRENCY by default, at the catalog's default per-plan limit), in this order (``RUNS``):

1. ``fleet``: the fleet's topics, heavy and light, in one run: one cycle;
2. ``one``: the baseline light topic alone, right after it;
3. ``light``: the fleet's light topics alone, right after that (the baseline sits between the two runs it is set
   against).

Every run archives each of its topics whole, from its first offset, into a table of an environment of its own (a bare
Kafka topic to ``bench.archiver_run.bench_topic``), once the topics' archiver consumer groups are deleted (the group is
per Kafka topic: ``bench.archiver.forget_offsets``, as ``bench.archiver`` does between its runs); each run's topics and
records are checked against what was produced, so every round does the same work. Reported, each round's figure with
their median and spread (``bench.common``), every run's own figures kept in ``runs``:

- ``wall_ratio``: the fleet's run seconds after its Spark start ÷ the baseline's (issue #37's bar: ≤ 2);
- ``cpu_ratio``: the CPU seconds of the fleet run's process tree after its Spark start ÷ the baseline's (bar ≤ 2);
- ``cpu_seconds_per_light_topic``: CPU per light topic per run, (CPU of the ``light`` run - CPU of the ``one`` run)
  ÷ (BENCH_FLEET_TOPICS - 1), both after the Spark start (``per_light_topic``): what one more light topic adds to a
  run, the run's own fixed cost cancelled out. It includes the topic's records (2,000 at B1's 11.6 CPU seconds per
  million: about 0.02 s). Unlike the cost model's ``cpu_seconds_per_topic_run`` (the fleet at full size: its run's
  CPU less its records' at B1's rate, over all its topics, the run's fixed cost spread over them), it needs no figure
  from another run (bar ≤ 0.1 s).

The heavy topics' size by default is one cycle of a heavy topic of the cost model's fleet at the default schedule
(``bench.cost.Fleet``: 50M records a day, archived every 8 minutes: 277,777 records; 173,611 at the 5 minutes of the
default before), about the 250,000 of the fleet at full size: the three rounds archive the heavy topics three times, the
light ones six times and the baseline three times, on two cores. The wall ratio grows with the heavy topics' records (at
B1's rate, 4 x 277,777 records are about 13 s of a whole machine), so the bar holds for this cycle, not for a backlog.
The light topics keep the 2,000 records of the earlier B-fleet and of the fleet at full size (a 15-minute cycle's; 694
at 5 minutes): a light topic's cost is its per-topic work, not its records.

At full size, 7 minutes on two idle cores (measured 2026-11-27, producing the 161 topics included).

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

Each job's wall time is set against its schedule (15 minutes, 10, an hour). ``bench.fleet_scale`` runs these steps
and one inventory, at one size or several (issue #54), and measures their CPU and memory too.
"""

from __future__ import annotations

import math
import os
import statistics
import time
import uuid
from collections import Counter
from typing import Any

from bench.archiver import PAIRS, archive, forget_offsets, produce
from bench.archiver_run import bench_topic, driver_s3_latency_ms
from bench.calls import count_every_client
from bench.common import pair_ratios, paired_ratio, say, spread, write_result
from bench.cost import Fleet
from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.environments import EnvironmentConfig
from kafkalake.jobspec import ARCHIVER_CONCURRENCY
from kafkalake.layout import parse_data_key
from kafkalake.topic_catalog import Topic, tables_document
from kafkalake.topic_spec import ArchivePolicy
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.s3_events import as_s3_sends
from kafkalake_dev.local.sandbox import count_calls
from kafkalake_dev.local.spark import local_session
from lambdas.maintainer.dal import Clients, State
from lambdas.maintainer.logic import DrainConfig, drain
from lambdas.tables import tables_from_document
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Action, Knobs

CYCLE_HEAVY_RECORDS = Fleet().heavy_records_per_day // Fleet().runs_per_day(
    EnvironmentConfig.model_fields["archiver_schedule_minutes"].default
)
"""One cycle of a heavy topic of the cost model's fleet at the default archiver schedule."""
FLEET_HEAVY = int(os.environ.get("BENCH_FLEET_HEAVY", "4"))
FLEET_HEAVY_RECORDS = int(os.environ.get("BENCH_FLEET_HEAVY_RECORDS", str(CYCLE_HEAVY_RECORDS)))
FLEET_TOPICS = int(os.environ.get("BENCH_FLEET_TOPICS", "156"))
"""The fleet's light topics."""
FLEET_RECORDS = int(os.environ.get("BENCH_FLEET_RECORDS", "2000"))
FLEET_CONCURRENCY = int(os.environ.get("BENCH_FLEET_CONCURRENCY", str(ARCHIVER_CONCURRENCY)))
RUNS = ("fleet", "one", "light")
"""A round's runs, in their order."""
BARS = {"wall_ratio": 2.0, "cpu_ratio": 2.0, "cpu_seconds_per_light_topic": 0.1}
"""Issue #37's bars: each figure at most this."""
FULL_TOPICS = int(os.environ.get("BENCH_FULL_TOPICS", "160"))
FULL_HEAVY = int(os.environ.get("BENCH_FULL_HEAVY", "4"))
FULL_HEAVY_RECORDS = int(os.environ.get("BENCH_FULL_HEAVY_RECORDS", "250000"))
FULL_LIGHT_RECORDS = int(os.environ.get("BENCH_FULL_LIGHT_RECORDS", "2000"))
HOURS_AGO = (6, 3)
SCHEDULE_SECONDS = {"archiver": 15 * 60, "maintainer": 10 * 60, "compactor": 60 * 60}


def produce_fleet(endpoints: Endpoints) -> tuple[dict[str, list[str]], dict[str, int]]:
    """The fleet's topics and the baseline's, produced: each run's Kafka topics (``RUNS``) and its records."""
    tag = uuid.uuid4().hex[:8]
    heavy = [f"bench.fleet.{tag}.h{i:03d}" for i in range(FLEET_HEAVY)]
    light = [f"bench.fleet.{tag}.l{i:03d}" for i in range(FLEET_TOPICS)]
    every = [*heavy, *light, f"bench.fleet.{tag}.one"]
    for index, topic in enumerate(every):
        produce(endpoints, topic, FLEET_HEAVY_RECORDS if topic in heavy else FLEET_RECORDS, quiet=True)
        if index % 20 == 0:
            say(f"fleet: produced {index + 1}/{len(every)} topics")
    topics = {"fleet": every[:-1], "one": every[-1:], "light": light}
    light_records = FLEET_TOPICS * FLEET_RECORDS
    return topics, {
        "fleet": FLEET_HEAVY * FLEET_HEAVY_RECORDS + light_records,
        "one": FLEET_RECORDS,
        "light": light_records,
    }


def archive_afresh(endpoints: Endpoints, topics: list[str], records: int) -> dict[str, Any]:
    """One archiver run over ``topics`` from their first offsets into fresh tables, checked to archive ``records``."""
    forget_offsets(endpoints, *topics)
    run = archive(topics, ArchivePolicy().max_records_per_run, FLEET_CONCURRENCY)
    if (run["topics"], run["records"]) != (len(topics), records):
        raise RuntimeError(
            f"a run over {len(topics)} topics of {records} records archived {run['topics']} topics, "
            f"{run['records']} records"
        )
    return run


def rounds(
    endpoints: Endpoints, topics: dict[str, list[str]], records: dict[str, int]
) -> dict[str, list[dict[str, Any]]]:
    """PAIRS rounds of ``RUNS``: each kind's runs, round by round."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in RUNS}
    for number in range(1, PAIRS + 1):
        for name in RUNS:
            run = archive_afresh(endpoints, topics[name], records[name])
            runs[name].append(run)
            say(
                f"round {number}/{PAIRS}, {name} ({len(topics[name])} topics): {run['run_seconds']:.1f} s and "
                f"{run['run_cpu_seconds']:.1f} CPU seconds after the Spark start"
            )
    return runs


def per_light_topic(light_cpu: float, one_cpu: float, light_topics: int) -> float:
    """CPU seconds one more light topic adds to a run: the run of ``light_topics`` light topics less the run of one,
    over the topics it has more (each run's fixed cost cancels out)."""
    if light_topics < 2:
        raise ValueError(f"{light_topics} light topics: CPU per light topic needs two or more")
    return (light_cpu - one_cpu) / (light_topics - 1)


def summary(runs: dict[str, list[dict[str, Any]]], light_topics: int) -> dict[str, Any]:
    """Each round's wall and CPU ratios (fleet ÷ one) and CPU per light topic, their medians and spreads, against
    ``BARS``; every run beside them."""
    seconds = {name: [run["run_seconds"] for run in runs[name]] for name in RUNS}
    cpu = {name: [run["run_cpu_seconds"] for run in runs[name]] for name in RUNS}
    walls, cpus = pair_ratios(seconds["fleet"], seconds["one"]), pair_ratios(cpu["fleet"], cpu["one"])
    per_light = [per_light_topic(a, b, light_topics) for a, b in zip(cpu["light"], cpu["one"], strict=True)]
    figures = {
        "wall_ratio": paired_ratio(seconds["fleet"], seconds["one"]),
        "cpu_ratio": paired_ratio(cpu["fleet"], cpu["one"]),
        "cpu_seconds_per_light_topic": statistics.median(per_light),
    }
    return {
        **figures,
        "wall_ratios": walls,
        "wall_ratio_spread": spread(walls),
        "cpu_ratios": cpus,
        "cpu_ratio_spread": spread(cpus),
        "cpu_seconds_per_light_topic_rounds": per_light,
        "cpu_seconds_per_light_topic_spread": spread(per_light),
        "heavy_topics_cpu_seconds_rounds": [a - b for a, b in zip(cpu["fleet"], cpu["light"], strict=True)],
        "run_seconds": seconds,
        "run_cpu_seconds": cpu,
        "bars": BARS,
        "met": {name: figures[name] <= bar for name, bar in BARS.items()},
        "runs": runs,
    }


def b_fleet(endpoints: Endpoints) -> dict[str, Any]:
    """B-fleet: PAIRS rounds of the fleet, the baseline light topic and the light topics, each run in a child."""
    topics, records = produce_fleet(endpoints)
    runs = rounds(endpoints, topics, records)
    result = summary(runs, FLEET_TOPICS)
    say(
        f"fleet ÷ one, after the Spark start: wall {result['wall_ratios']}, CPU {result['cpu_ratios']}; CPU per light "
        f"topic per run: {result['cpu_seconds_per_light_topic_rounds']}"
    )
    return {
        "heavy_topics": FLEET_HEAVY,
        "heavy_records": FLEET_HEAVY_RECORDS,
        "light_topics": FLEET_TOPICS,
        "light_records": FLEET_RECORDS,
        "topics": FLEET_HEAVY + FLEET_TOPICS,
        "records": records,
        "records_per_plan": ArchivePolicy().max_records_per_run,
        "concurrency": FLEET_CONCURRENCY,
        "pairs": PAIRS,
        "order": list(RUNS),
        **result,
    }


def main() -> None:
    """B-fleet, into ``archiver-fleet-<time>.json``; with the driver's S3 requests delayed
    (``BENCH_DRIVER_S3_LATENCY_MS``, ``bench.archiver_run.driver_s3_latency_ms``: AWS's round trip, which moto lacks),
    into ``archiver-fleet-s3-latency-<time>.json``, a result of its own that no report adopts as B-fleet's."""
    endpoints = local_endpoints()
    latency = driver_s3_latency_ms()
    with stack.running():
        result = b_fleet(endpoints)
        if latency:
            write_result("archiver-fleet-s3-latency", {**result, "driver_s3_latency_ms": latency})
        else:
            write_result("archiver-fleet", result)


def fleet_topics(endpoints: Endpoints, env: str, count: int, heavy: int) -> tuple[list[Topic], list[str], int]:
    """The fleet's ``count`` topics, the first ``heavy`` of them heavy, produced to Kafka: catalog topics of ``env``,
    their ``bench.archiver_run`` arguments, and the records in all."""
    per_run = ArchivePolicy().max_records_per_run
    topics, arguments, records = [], [], 0
    for index in range(count):
        kafka_topic, size = (
            f"bench.full.{uuid.uuid4().hex[:8]}",
            FULL_HEAVY_RECORDS if index < heavy else FULL_LIGHT_RECORDS,
        )
        produce(endpoints, kafka_topic, size, quiet=True, hours_ago=HOURS_AGO)
        arguments.append(f"{kafka_topic}={env}/bench/fleet/t{index:04d}")
        topics.append(bench_topic(arguments[-1], per_run))
        records += size
        if index % 100 == 0:
            say(f"full fleet: produced {index + 1}/{count} topics")
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


def compact(endpoints: Endpoints, topics: list[Topic], max_bytes: int | None = None) -> dict[str, Any]:
    """One compactor run over every closed partition with two files or more (at most ``max_bytes`` of inputs, the
    job's default budget without it), its driver's calls counted."""
    spark = local_session(endpoints, "kafkalake-bench-fleet-compactor")
    try:
        calls: Counter[str] = Counter()
        count_every_client(calls)
        started = time.monotonic()
        knobs = Knobs(min_input_files=2)
        if max_bytes is not None:
            knobs = Knobs(min_input_files=2, max_bytes_per_run=max_bytes)
        results = Compactor(spark, endpoints, topics, knobs, say=lambda _: None).run()
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
        "partitions_skipped": sum(1 for r in results if r.action == Action.SKIPPED),
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
