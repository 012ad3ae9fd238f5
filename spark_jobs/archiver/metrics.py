"""The archiver's steering wheel: per topic and Kafka partition lag, records, freshness and run time, as CloudWatch
metrics (``PutMetricData``; locally the local endpoint takes them)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from kafkalake.glue import chunks
from kafkalake.metrics import ENVIRONMENT_DIMENSION, NAMESPACE, ArchiverMetric
from spark_jobs.archiver.summary import TopicResult

PUT_CHUNK = 1000
"""Metrics per PutMetricData call (the API's limit)."""
PARTITION_COUNTS = {
    "read": ArchiverMetric.RECORDS_READ,
    "written": ArchiverMetric.RECORDS_WRITTEN,
    "quarantined": ArchiverMetric.RECORDS_QUARANTINED,
    "tombstones": ArchiverMetric.TOMBSTONES,
}


def _datum(name: ArchiverMetric, value: float, now: datetime, unit: str, **dimensions: str) -> dict[str, Any]:
    return {
        "MetricName": name.value,
        "Dimensions": [{"Name": k, "Value": v} for k, v in dimensions.items()],
        "Timestamp": now,
        "Value": value,
        "Unit": unit,
    }


def _topic_data(result: TopicResult, env: str, now: datetime) -> Iterator[dict[str, Any]]:
    topic = {ENVIRONMENT_DIMENSION: env, "Topic": result.kafka_topic}
    yield _datum(ArchiverMetric.RUN_SECONDS, result.seconds, now, "Seconds", **topic)
    per_partition: dict[int, dict[str, int]] = {}
    for summary in result.plans:
        for partition, counts in summary.per_partition.items():
            merged = per_partition.setdefault(partition, {})
            for key, value in counts.items():
                merged[key] = merged.get(key, 0) + value
    for partition in sorted(set(result.lag) | set(per_partition)):
        dimensions = {**topic, "Partition": str(partition)}
        if partition in result.lag:
            yield _datum(ArchiverMetric.LAG, result.lag[partition], now, "Count", **dimensions)
        for key, name in PARTITION_COUNTS.items():
            yield _datum(name, per_partition.get(partition, {}).get(key, 0), now, "Count", **dimensions)
    for partition, hour in sorted(result.latest_hour().items()):
        seconds = datetime.fromisoformat(hour).timestamp()
        yield _datum(ArchiverMetric.LATEST_HOUR, seconds, now, "Seconds", **topic, Partition=str(partition))


def metric_data(results: Iterable[TopicResult], env: str, now: datetime) -> list[dict[str, Any]]:
    """Every metric of one run: per topic and partition, and per environment (failed topics, total lag, records
    held for schema versions the catalog lacks)."""
    results = list(results)
    data = [datum for result in results for datum in _topic_data(result, env, now)]
    environment = {ENVIRONMENT_DIMENSION: env}
    data.append(_datum(ArchiverMetric.TOPICS_FAILED, sum(not r.ok for r in results), now, "Count", **environment))
    total_lag = sum(n for r in results for n in r.lag.values())
    data.append(_datum(ArchiverMetric.TOTAL_LAG, total_lag, now, "Count", **environment))
    held = sum(r.totals()["held"] for r in results)
    data.append(_datum(ArchiverMetric.RECORDS_HELD, held, now, "Count", **environment))
    return data


def publish(cloudwatch: Any, data: list[dict[str, Any]]) -> int:
    """PutMetricData in chunks; returns the calls made."""
    calls = 0
    for chunk in chunks(data, PUT_CHUNK):
        cloudwatch.put_metric_data(Namespace=NAMESPACE, MetricData=list(chunk))
        calls += 1
    return calls
