"""Cost per environment per day (``python -m bench cost``), from the figures the benchmarks measured, for a fleet like
the seed's, beside the same volume through Kafka Connect's S3 sink and through Firehose. Pure logic; ``bench.report``
feeds it the latest results.

The fleet (``Fleet``): 160 topics, 4 heavy ones of 50M records a day each (12 partitions) dwarfing 156 light ones of
200k a day each (3 partitions): 231M records a day, 87% of them in the heavy four. Archiving every 15 minutes, the
maintainer every 10, compaction hourly.

What each part costs, and where its inputs come from (``Measured``, every field read from bench/results):

- archiver (EMR Serverless): per run, the CPU seconds its records need (CPU seconds per million after the Spark start,
  B1) plus the CPU seconds each topic costs whatever its size (the fleet at full size: its archiver run's CPU less
  its records' over its topics), spread over the executors' vCPUs at the utilization measured in B1, plus the Spark
  start (B1), billed for the driver and executor sizes ``bench.sizing`` derived from the measured memory, at least
  one minute per worker;
- compactor (EMR Serverless): per hourly run, the core seconds per GiB (B3) and per partition (B3-fleet), billed the
  same way; one partition per topic and hour;
- maintainer (Lambda): one invocation per schedule; its duration is the handler's CPU per event (the maintainer
  bench) times the events, a lower bound (Glue's and SQS's latency is not measured on moto);
- requests: S3 PUTs and GETs (one PUT per object; the driver's lease and receipt calls per topic and run from
  the fleet at full size; the compactor's driver calls per partition from B3-fleet, plus a GET per input and a PUT
  per output from its executors: an output is inspected from its local file, not read back), SQS (S3's event sends,
  and the maintainer's receives and deletes per event), Glue (the maintainer's calls per table and drain; the
  compactor's per table and run and per partition, from the fleet at full size), EventBridge.

Kafka Connect: always-on workers (two for availability; more when the CPU the volume needs at the raw consumer's
rate, ``kafka-consumer-perf-test`` in B1, the least any consumer needs, exceeds one worker), and one S3 PUT per
partition and rotation interval (the archiver's schedule, the same freshness), no compaction. Firehose: one stream
per topic with the MSK cluster as its source (Amazon MSK's delivery to Amazon S3 is this product), ingestion per GB,
Parquet conversion billed per record rounded up to 5 KB (Firehose converts JSON only: Avro needs a transforming
Lambda on top, not counted), dynamic partitioning per GB and per object. Each price cites its page (``Prices``).

What each archiver schedule costs and how fresh it keeps the tables, ours and theirs side by side, and the default
schedule chosen from that: ``bench.freshness``, over this model.

Past 400 lines on purpose: the model reads top to bottom in one place, prices → fleet → inputs → each way's bill →
the levers on ours.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

PRICES_AS_OF = "2025-06, AWS public price pages, eu-west-1 (on-demand, no free tier)"


@dataclass(frozen=True)
class Prices:
    """US dollars, eu-west-1, as of PRICES_AS_OF, each from the price page named beside it. The rates were read in
    2025-06 and not re-read since: the pages render their per-region rates in the browser, and no copy of them could
    be checked in 2026-11 (issue #37), so a rate that changed since is not known to this model."""

    emr_vcpu_hour: float = 0.052624
    """EMR Serverless, per vCPU-hour: https://aws.amazon.com/emr/pricing/ (EMR Serverless)."""
    emr_gb_hour: float = 0.0057785
    """EMR Serverless, per GB-hour of memory: https://aws.amazon.com/emr/pricing/."""
    lambda_gb_second: float = 0.0000133334
    """arm64, as the maintainer runs: https://aws.amazon.com/lambda/pricing/."""
    lambda_request: float = 0.20e-6
    s3_put: float = 0.005e-3
    """PUT, COPY, POST, LIST, S3 Standard: https://aws.amazon.com/s3/pricing/ (Requests & data retrievals)."""
    s3_get: float = 0.0004e-3
    sqs_request: float = 0.40e-6
    """Standard queue: https://aws.amazon.com/sqs/pricing/."""
    glue_request: float = 1.00e-6
    """Data Catalog requests: https://aws.amazon.com/glue/pricing/."""
    events_put: float = 1.00e-6
    """Custom events put on a bus: https://aws.amazon.com/eventbridge/pricing/."""
    connect_worker_hour: float = 0.107
    """One Kafka Connect worker: an m6i.large (2 vCPU, 8 GiB) on-demand, Linux:
    https://aws.amazon.com/ec2/pricing/on-demand/."""
    connect_worker_vcpu: int = 2
    firehose_ingest_gb: float = 0.031
    """https://aws.amazon.com/firehose/pricing/. With an MSK cluster as the source, ingestion is tiered, billed per
    GB on the greater of the bytes ingested and delivered, with no 5 KB rounding; that source has a rate of its own
    beside Direct PUT's, and which of the two this figure is was not recorded in 2025-06 nor checked since."""
    firehose_conversion_gb: float = 0.018
    """Billed per GB ingested in 5 KB increments per record: https://aws.amazon.com/firehose/pricing/."""
    firehose_partitioning_gb: float = 0.020
    """Dynamic partitioning, per GB delivered and per object: https://aws.amazon.com/firehose/pricing/."""
    firehose_partitioning_object: float = 0.005e-3


@dataclass(frozen=True)
class Fleet:
    """The environment's topics and schedules (the seed's shape: a few heavy topics dwarf the rest)."""

    heavy_topics: int = 4
    heavy_records_per_day: int = 50_000_000
    heavy_partitions: int = 12
    light_topics: int = 156
    light_records_per_day: int = 200_000
    light_partitions: int = 3
    archive_every_minutes: int = 15
    light_every_runs: int = 1
    """The light topics are archived by one run in this many (each run takes every heavy topic)."""
    maintain_every_minutes: int = 10
    compact_every_minutes: int = 60

    @property
    def topics(self) -> int:
        return self.heavy_topics + self.light_topics

    @property
    def records_per_day(self) -> int:
        return self.heavy_topics * self.heavy_records_per_day + self.light_topics * self.light_records_per_day

    def runs_per_day(self, every_minutes: int) -> int:
        return 24 * 60 // every_minutes

    @property
    def topics_per_run(self) -> float:
        """Topics one archiver run takes, on average."""
        return self.heavy_topics + self.light_topics / self.light_every_runs

    def objects_per_run(self, max_records_per_file: int) -> float:
        """Data objects one archiver run writes on average: per topic it takes, per Kafka partition and business hour
        its records span (a range of m minutes crosses an hour boundary once in 60 / m), cut at
        ``max_records_per_file``."""
        runs = self.runs_per_day(self.archive_every_minutes)
        total = 0.0
        for topics, per_day, partitions, every in (
            (self.heavy_topics, self.heavy_records_per_day, self.heavy_partitions, 1),
            (self.light_topics, self.light_records_per_day, self.light_partitions, self.light_every_runs),
        ):
            hours = 1 + min(1.0, self.archive_every_minutes * every / 60)
            per_partition_hour = per_day / (runs / every) / partitions / hours
            objects = partitions * hours * math.ceil(per_partition_hour / max_records_per_file)
            total += topics / every * objects
        return total

    def objects_per_day(self, max_records_per_file: int) -> float:
        """Data objects the archiver writes a day (``objects_per_run`` over the day's runs): S3 events for the
        maintainer."""
        return self.objects_per_run(max_records_per_file) * self.runs_per_day(self.archive_every_minutes)

    def partitions(self) -> int:
        return self.heavy_topics * self.heavy_partitions + self.light_topics * self.light_partitions

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "topics": self.topics, "records_per_day": self.records_per_day}


@dataclass(frozen=True)
class Worker:
    cpu: int
    memory_gb: int


@dataclass(frozen=True)
class Workers:
    """A job's driver and executor sizes (``bench.sizing``, from its measured memory)."""

    driver: Worker
    executor: Worker


EMR_DEFAULT = Workers(Worker(4, 16), Worker(4, 16))


@dataclass(frozen=True)
class Measured:
    """Every input of the model, read from bench/results (``bench.report.measured``)."""

    record_bytes: float
    stored_bytes_per_record: float
    archiver_cpu_seconds_per_million: float
    archiver_utilization: float
    """CPU seconds over (cores x wall seconds) of the B1 run after the Spark start."""
    spark_start_seconds: float
    cpu_seconds_per_topic_run: float
    s3_puts_per_topic_run: float
    """The driver's PUT-class S3 requests (PUT, LIST) per topic and run: leases, receipts; GETs are ``s3_gets_...``."""
    s3_gets_per_topic_run: float
    max_records_per_file: int
    archiver_workers: Workers
    compactor_workers: Workers
    consumer_records_per_core_second: float
    maintainer_cpu_seconds_per_event: float
    maintainer_wall_seconds_per_event: float
    """The fleet at full size's drain: its wall seconds over the messages it took, on the local stack (moto's
    latency and the drain's creation of every table included); the drain's duration in ``bench.freshness``, where
    the bill keeps the CPU lower bound."""
    maintainer_sqs_calls_per_event: float
    maintainer_glue_calls_per_table_drain: float
    maintainer_memory_gb: float
    compactor_core_seconds_per_gib: float
    compactor_core_seconds_per_partition: float
    compactor_s3_puts_per_partition: float
    compactor_s3_gets_per_partition: float
    compactor_glue_calls_per_table_run: float
    """Reads of the table's partitions per run; ``compactor_glue_calls_per_partition`` per partition it compacts."""
    compactor_glue_calls_per_partition: float


@dataclass(frozen=True)
class EmrRun:
    wall_seconds: float
    vcpu_hours: float
    gb_hours: float
    executors: int


def emr_run(core_seconds: float, utilization: float, interval_seconds: float, start: float, workers: Workers) -> EmrRun:
    """One job run: the fewest executors that finish ``core_seconds`` of CPU work (at ``utilization`` of their
    vCPUs) within the schedule's interval after the Spark start; every worker billed at least a minute."""
    driver, executor = workers.driver, workers.executor
    cores = executor.cpu * utilization
    executors = max(1, math.ceil(core_seconds / cores / (interval_seconds - start)))
    wall = start + core_seconds / (cores * executors)
    billed = max(wall, 60.0) / 3600
    vcpus = driver.cpu + executors * executor.cpu
    memory = driver.memory_gb + executors * executor.memory_gb
    return EmrRun(wall, vcpus * billed, memory * billed, executors)


@dataclass(frozen=True)
class Line:
    """One part of the day's bill: what is used, and what it costs."""

    part: str
    usage: dict[str, float]
    dollars: float


def archive_run(fleet: Fleet, measured: Measured) -> EmrRun:
    """One archiver run: its records' CPU (B1's CPU seconds per million after the Spark start) and its topics' (the
    fleet at full size's CPU per topic and run), on the fewest executors that finish within the schedule."""
    archive_runs = fleet.runs_per_day(fleet.archive_every_minutes)
    records_per_run = fleet.records_per_day / archive_runs
    archive_core_seconds = (
        records_per_run * measured.archiver_cpu_seconds_per_million / 1e6
        + fleet.topics_per_run * measured.cpu_seconds_per_topic_run
    )
    return emr_run(
        archive_core_seconds,
        measured.archiver_utilization,
        fleet.archive_every_minutes * 60,
        measured.spark_start_seconds,
        measured.archiver_workers,
    )


def ours(fleet: Fleet, measured: Measured, prices: Prices) -> list[Line]:
    archive_runs = fleet.runs_per_day(fleet.archive_every_minutes)
    archive = archive_run(fleet, measured)
    compact_runs = fleet.runs_per_day(fleet.compact_every_minutes)
    gib_per_run = fleet.records_per_day * measured.stored_bytes_per_record / compact_runs / 2**30
    compact_core_seconds = (
        gib_per_run * measured.compactor_core_seconds_per_gib
        + fleet.topics * measured.compactor_core_seconds_per_partition
    )
    compact = emr_run(  # core seconds measured as wall seconds x cores: at full use
        compact_core_seconds,
        1.0,
        fleet.compact_every_minutes * 60,
        measured.spark_start_seconds,
        measured.compactor_workers,
    )
    objects = fleet.objects_per_day(measured.max_records_per_file)
    drains = fleet.runs_per_day(fleet.maintain_every_minutes)
    lambda_seconds = objects * measured.maintainer_cpu_seconds_per_event
    s3_puts = objects + archive_runs * fleet.topics_per_run * measured.s3_puts_per_topic_run
    s3_gets = archive_runs * fleet.topics_per_run * measured.s3_gets_per_topic_run
    compactor_puts = compact_runs * fleet.topics * measured.compactor_s3_puts_per_partition
    compactor_gets = compact_runs * fleet.topics * measured.compactor_s3_gets_per_partition
    sqs = objects * (1 + measured.maintainer_sqs_calls_per_event)
    glue = fleet.topics * (
        drains * measured.maintainer_glue_calls_per_table_drain
        + compact_runs * (measured.compactor_glue_calls_per_table_run + measured.compactor_glue_calls_per_partition)
    )
    events = compact_runs * fleet.topics  # one PartitionComplete per table and hour
    return [
        _emr("archiver (EMR Serverless)", archive, archive_runs, prices),
        _emr("compactor (EMR Serverless)", compact, compact_runs, prices),
        Line(
            "maintainer (Lambda)",
            {"invocations": drains, "gb_seconds": lambda_seconds * measured.maintainer_memory_gb},
            lambda_seconds * measured.maintainer_memory_gb * prices.lambda_gb_second + drains * prices.lambda_request,
        ),
        Line(
            "S3 requests",
            {"put": s3_puts + compactor_puts, "get": s3_gets + compactor_gets},
            (s3_puts + compactor_puts) * prices.s3_put + (s3_gets + compactor_gets) * prices.s3_get,
        ),
        Line("SQS requests", {"requests": sqs}, sqs * prices.sqs_request),
        Line("Glue calls", {"calls": glue}, glue * prices.glue_request),
        Line("EventBridge events", {"events": events}, events * prices.events_put),
    ]


def _emr(part: str, run: EmrRun, runs: int, prices: Prices) -> Line:
    vcpu_hours, gb_hours = run.vcpu_hours * runs, run.gb_hours * runs
    usage = {
        "runs": runs,
        "wall_seconds_per_run": run.wall_seconds,
        "executors": run.executors,
        "vcpu_hours": vcpu_hours,
        "gb_hours": gb_hours,
    }
    return Line(part, usage, vcpu_hours * prices.emr_vcpu_hour + gb_hours * prices.emr_gb_hour)


def kafka_connect(fleet: Fleet, measured: Measured, prices: Prices) -> list[Line]:
    """Always-on workers (at least two) and one PUT per partition and rotation; no catalog, no compaction."""
    core_seconds = fleet.records_per_day / measured.consumer_records_per_core_second
    needed = math.ceil(core_seconds / (24 * 3600 * prices.connect_worker_vcpu))
    workers = max(2, needed)
    puts = fleet.partitions() * fleet.runs_per_day(fleet.archive_every_minutes)
    return [
        Line(
            "workers (always on)",
            {"workers": workers, "hours": workers * 24.0},
            workers * 24 * prices.connect_worker_hour,
        ),
        Line("S3 requests", {"put": puts}, puts * prices.s3_put),
    ]


def firehose(fleet: Fleet, measured: Measured, prices: Prices) -> list[Line]:
    """One stream per topic with the MSK cluster as its source (the product behind Amazon MSK's delivery to Amazon
    S3: https://docs.aws.amazon.com/firehose/latest/dev/create-name.html): ingestion per GB, conversion per record
    rounded up to 5 KB, partitioning."""
    gb = fleet.records_per_day * measured.record_bytes / 1e9
    converted_gb = fleet.records_per_day * max(measured.record_bytes, 5 * 1024) / 1e9
    objects = fleet.objects_per_day(measured.max_records_per_file)
    return [
        Line("ingestion", {"gb": gb}, gb * prices.firehose_ingest_gb),
        Line(
            "Parquet conversion (5 KB per record)",
            {"gb_billed": converted_gb},
            converted_gb * prices.firehose_conversion_gb,
        ),
        Line(
            "dynamic partitioning",
            {"gb": gb, "objects": objects},
            gb * prices.firehose_partitioning_gb + objects * prices.firehose_partitioning_object,
        ),
    ]


def total(lines: list[Line]) -> float:
    return sum(line.dollars for line in lines)


def dominant(lines: list[Line]) -> tuple[Line, float]:
    """The part that costs most, and its share of the total."""
    top = max(lines, key=lambda line: line.dollars)
    return top, top.dollars / total(lines)


LEVERS: dict[str, Callable[[Fleet, Measured], tuple[Fleet, Measured]]] = {
    "the light topics archived hourly (the heavy ones every 15 minutes)": lambda f, m: (
        replace(f, light_every_runs=60 // f.archive_every_minutes),
        m,
    ),
    "per-topic CPU halved": lambda f, m: (f, replace(m, cpu_seconds_per_topic_run=m.cpu_seconds_per_topic_run / 2)),
    "archiving every 30 minutes": lambda f, m: (replace(f, archive_every_minutes=30), m),
    "compaction every 2 hours": lambda f, m: (replace(f, compact_every_minutes=120), m),
    "the driver's S3 requests per topic and run halved": lambda f, m: (
        f,
        replace(
            m, s3_puts_per_topic_run=m.s3_puts_per_topic_run / 2, s3_gets_per_topic_run=m.s3_gets_per_topic_run / 2
        ),
    ),
    "EMR's default worker sizes (4 vCPU, 16 GB)": lambda f, m: (
        f,
        replace(m, archiver_workers=EMR_DEFAULT, compactor_workers=EMR_DEFAULT),
    ),
}
"""What-ifs on our bill: each changes one input and the model is run again."""


def levers(fleet: Fleet, measured: Measured, prices: Prices) -> dict[str, float]:
    """Our day's total under each of LEVERS, as a share of today's."""
    today = total(ours(fleet, measured, prices))
    return {name: total(ours(*change(fleet, measured), prices)) / today for name, change in LEVERS.items()}


def bills(fleet: Fleet, measured: Measured, prices: Prices) -> dict[str, list[Line]]:
    """The day's bill of each way: ours, Kafka Connect's S3 sink, Firehose from MSK."""
    return {
        "kafkalake": ours(fleet, measured, prices),
        "kafka_connect_s3_sink": kafka_connect(fleet, measured, prices),
        "firehose": firehose(fleet, measured, prices),
    }


def day(fleet: Fleet, measured: Measured, prices: Prices = Prices()) -> dict[str, Any]:
    """The day's bill of each way, what dominates ours, and what the levers would do to it."""
    per_way = bills(fleet, measured, prices)
    top, share = dominant(per_way["kafkalake"])
    return {
        "prices": {**asdict(prices), "as_of": PRICES_AS_OF},
        "fleet": fleet.describe(),
        "measured": asdict(measured),
        "per_day": {
            name: {"total_dollars": total(lines), "lines": [asdict(line) for line in lines]}
            for name, lines in per_way.items()
        },
        "dominant": {"part": top.part, "share": share},
        "levers": levers(fleet, measured, prices),
    }
