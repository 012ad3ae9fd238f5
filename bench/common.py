"""Shared benchmark plumbing: results as JSON under bench/results/, the archiver children's Spark session."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import Job
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.spark import LOCAL_CONF, local_session

if TYPE_CHECKING:
    from confluent_kafka import Producer
    from pyspark.sql import SparkSession

RESULTS = Path(__file__).resolve().parent / "results"
BUCKET = "kafkalake-bench"
"""The archiver benchmarks' bucket."""
LOCAL_CORES = int(LOCAL_CONF["spark.master"].removeprefix("local[").removesuffix("]"))
"""The local session's cores (one Python worker each): core seconds are wall seconds times these."""


def send(producer: Producer, topic: str, key: bytes, value: bytes, timestamp: int = 0) -> None:
    """``producer.produce``, waiting for room while its queue is full (``timestamp`` 0: the producer's now)."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, timestamp=timestamp)
            return
        except BufferError:
            producer.poll(0.05)


def delivered(producer: Producer, topic: str) -> None:
    """Every record ``producer`` was given, delivered within two minutes, or ``RuntimeError``."""
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not deliver every record to {topic}")


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = RESULTS / f"{name}-{stamp}.json"
    document = {"benchmark": name, "utc": stamp, "machine": platform.platform(), "local_cores": LOCAL_CORES, **payload}
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    print(json.dumps(document, indent=2, sort_keys=True))
    print(f"[bench] wrote {path}")
    return path


def started_session(app_name: str, job: Job) -> tuple[SparkSession, Endpoints, float]:
    """A local Spark session on the local stack and BENCH_BUCKET (BUCKET by default), its JVM started as ``job``'s
    (``local_session``), once it has run a job, and the seconds that took."""
    started = time.monotonic()
    endpoints = with_bucket(local_endpoints(), os.environ.get("BENCH_BUCKET", BUCKET))
    spark = local_session(endpoints, app_name, job)
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(1).count()  # the session is up
    return spark, endpoints, time.monotonic() - started


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    """The seconds ``action`` took, and what it returned."""
    started = time.perf_counter()
    value = action()
    return time.perf_counter() - started, value


def pair_ratios(ours: list[float], baseline: list[float]) -> list[float]:
    """The ratio of each pair of runs made in alternation (ours[i] right before baseline[i]); their smallest and
    largest are the spread a result reports beside ``paired_ratio``."""
    return [a / b for a, b in zip(ours, baseline, strict=True)]


def paired_ratio(ours: list[float], baseline: list[float]) -> float:
    """The median of the ratios of runs made in alternation (ours[i] right before baseline[i]): each pair saw the
    same load of a shared machine, which the medians of each side alone do not."""
    return statistics.median(pair_ratios(ours, baseline))


def spread(values: list[float]) -> list[float]:
    return [min(values), max(values)]


def between(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, Any]:
    """Two variants' archiver runs of the same rounds: the ratio of their rates (and CPU) round by round."""
    rates = pair_ratios([rate_after_start(r) for r in ours], [rate_after_start(r) for r in theirs])
    cpu = pair_ratios([cpu_per_million(r) for r in ours], [cpu_per_million(r) for r in theirs])
    return {
        "rate_ratios": rates,
        "rate_ratio": statistics.median(rates),
        "rate_ratio_spread": spread(rates),
        "cpu_ratios": cpu,
        "cpu_ratio": statistics.median(cpu),
    }


def rate_after_start(run: dict[str, Any]) -> float:
    """A benchmark child's records/s after its Spark start."""
    return float(run["records"] / run["run_seconds"])


def cpu_per_million(run: dict[str, Any]) -> float:
    """CPU seconds of the run's process tree after the Spark start, per million records."""
    return float(run["run_cpu_seconds"] / run["records"] * 1e6)


def say(line: str) -> None:
    print(f"[bench] {line}", flush=True)
