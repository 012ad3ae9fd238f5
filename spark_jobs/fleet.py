"""The archiver job: every topic of an environment (or those named) in one Spark application, several at once,
each caught up to the high watermark it saw at the start, each isolated from the others.

A topic that fails commits nothing of the failing plan and is reported with what failed and how to fix it; the
others go on; the run exits non-zero at the end when any topic failed. Per topic one JSON line goes to the job's
log, and the run's metrics go to CloudWatch (``spark_jobs.metrics``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.catalog import Catalog, Topic, load_catalog
from kafkalake.jobspec import ARCHIVER_BUDGET_MINUTES, ARCHIVER_CONCURRENCY
from kafkalake.settings import Endpoints
from spark_jobs.archiver import PHASES, Summary, TopicArchiver
from spark_jobs.metrics import metric_data, publish
from spark_jobs.session import job_session

MAX_ERROR_CHARS = 800


@dataclass
class TopicResult:
    name: str
    kafka_topic: str
    plans: list[Summary] = field(default_factory=list)
    lag: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def totals(self) -> Counter[str]:
        keys = ("read", "written", "quarantined", "tombstones", "objects")
        return Counter({k: sum(getattr(s, k) for s in self.plans) for k in keys})

    def timings(self) -> dict[str, float]:
        return {phase: round(sum(s.timings.get(phase, 0.0) for s in self.plans), 3) for phase in PHASES}

    def latest_hour(self) -> dict[int, str]:
        latest: dict[int, str] = {}
        for summary in self.plans:
            for partition, hour in summary.latest_hour.items():
                latest[partition] = max(hour, latest.get(partition, hour))
        return latest

    def as_dict(self) -> dict[str, Any]:
        """The JSON line of the job's log."""
        return {
            "topic": self.name,
            "kafka_topic": self.kafka_topic,
            "status": "ok" if self.ok else "failed",
            "plans": len([s for s in self.plans if s.plan]),
            **self.totals(),
            "lag": {str(p): n for p, n in sorted(self.lag.items())},
            "latest_hour": {str(p): h for p, h in sorted(self.latest_hour().items())},
            "seconds": round(self.seconds, 3),
            "timings": self.timings(),
            "quarantine_by_reason": dict(sum((Counter(s.quarantine_by_reason) for s in self.plans), Counter())),
            "balanced": all(s.balanced() for s in self.plans),
            "error": self.error,
        }


def explain(exc: BaseException, topic: Topic) -> str:
    """What failed, for the topic, with how to fix it when the failure says; bounded in length."""
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") in ("AccessDenied", "403"):
        text += (
            f" (check that the archiver's job role may read and write s3://…/{topic.prefix.data_prefix()}, "
            f"…/{topic.prefix.quarantine_prefix()} and …/{topic.prefix.state_prefix()}, and use the lake key)"
        )
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + f" … [{len(text) - MAX_ERROR_CHARS} more characters]"
    return f"{type(exc).__name__}: {text}"


def catch_up(
    spark: SparkSession,
    endpoints: Endpoints,
    topic: Topic,
    *,
    deadline: float,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    say: Callable[[str], None] = print,
) -> TopicResult:
    """Plans one after another until the topic reaches the high watermark seen at the start, or ``deadline``
    (``time.monotonic()``) passes; memory stays bounded by the per-plan record limit."""
    result = TopicResult(topic.name, topic.kafka_topic)
    started = time.monotonic()
    archiver = TopicArchiver(spark, endpoints, topic, now=now, say=say)
    try:
        committed, low, target = archiver.offsets.state()
        position = {p: committed.get(p) or low[p] for p in target}
        while True:
            summary = archiver.run_plan(ceiling=target)
            result.plans.append(summary)
            position |= {p: end for p, (_, end) in summary.plan.items()}
            reached = all(position[p] >= target[p] for p in target)
            if not summary.plan or reached or time.monotonic() >= deadline:
                break
        result.lag = archiver.lag()
    finally:
        archiver.close()
        result.seconds = time.monotonic() - started
    return result


def archive_fleet(
    spark: SparkSession,
    endpoints: Endpoints,
    topics: list[Topic],
    *,
    concurrency: int,
    deadline: float,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    say: Callable[[str], None] = print,
) -> list[TopicResult]:
    """Every topic, ``concurrency`` at a time in one Spark application (each in its own FAIR pool)."""

    def isolated(topic: Topic) -> TopicResult:
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", topic.name)
        started = time.monotonic()
        try:
            return catch_up(spark, endpoints, topic, deadline=deadline, now=now, say=say)
        except Exception as exc:  # noqa: BLE001 - one topic's failure never stops the others: reported below
            error = explain(exc, topic)
            say(f"{topic.kafka_topic}: FAILED, nothing of the failing plan committed: {error}")
            return TopicResult(topic.name, topic.kafka_topic, seconds=time.monotonic() - started, error=error)

    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="archiver") as pool:
        return list(pool.map(isolated, topics))


def resolve(catalog: Catalog, env: str, names: list[str]) -> tuple[list[Topic], list[TopicResult]]:
    """The named topics (all of the environment's when none are named), and a failed result per unknown name."""
    if not names:
        return catalog.for_env(env), []
    topics, unknown = [], []
    for name in names:
        try:
            topics.append(catalog.get(name, env))
        except KeyError as exc:
            unknown.append(TopicResult(name, name, error=f"KeyError: {exc.args[0]}; add the topic to the catalog"))
    return topics, unknown


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="archiver", description="Archive Kafka topics to S3 Parquet, exactly once.")
    parser.add_argument("--env", required=True)
    parser.add_argument("--catalog", type=Path, required=True, help="topic catalog folder")
    parser.add_argument("--topic", action="append", default=[], help="topic name or Kafka topic (default: all)")
    parser.add_argument("--concurrency", type=int, default=ARCHIVER_CONCURRENCY, help="topics in flight at once")
    parser.add_argument(
        "--budget-minutes", type=float, default=ARCHIVER_BUDGET_MINUTES, help="no new plan starts after this"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """``entrypoint.py archive --env staging --catalog catalog [--topic card-authorized ...]`` (EMR Serverless)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    endpoints = Endpoints.from_env(os.environ)
    topics, unknown = resolve(load_catalog(args.catalog), args.env, args.topic)
    spark = job_session("kafkalake-archiver")
    deadline = time.monotonic() + args.budget_minutes * 60
    results = [*unknown, *archive_fleet(spark, endpoints, topics, concurrency=args.concurrency, deadline=deadline)]
    for result in results:
        print(json.dumps(result.as_dict()), flush=True)
    try:
        publish(make_client(endpoints, "cloudwatch"), metric_data(results, args.env, datetime.now(UTC)))
    except ClientError as exc:
        print(json.dumps({"warning": f"metrics not published: {exc}"}), flush=True)
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"{len(failed)} of {len(results)} topics failed: {', '.join(failed)}", file=sys.stderr)
        raise SystemExit(1)
