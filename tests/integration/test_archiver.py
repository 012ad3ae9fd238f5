"""The archiver on the local stack: real broker, real registry, moto S3 through S3A, local Spark."""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kafkalake.endpoints import Endpoints
from kafkalake.lease import Held
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake.topic_spec import StoredAs
from kafkalake.wire import encode
from kafkalake_dev.local.sandbox import with_bucket
from spark_jobs.archiver import topic_run
from spark_jobs.common import Run
from tests.crashes import CRASH_POINTS, InjectedCrash
from tests.integration.archive_helpers import (
    archive_topic,
    committed_and_end,
    contents,
    differing_rows,
    fresh,
    keys,
    produce,
    read_back,
    state_beyond_receipts,
    through_kafka_secret,
    topic_with_schema,
)

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-archiver-tests"


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, BUCKET)


def test_archives_two_avro_versions_and_json_exactly(spark: SparkSession, endpoints: Endpoints) -> None:
    for name in ("card-authorized", "shipment-events"):
        topic = fresh(name)
        counts = produce(endpoints, topic, 1500)
        good = sum(v for k, v in counts.items() if k.startswith("schema_version"))
        summary = archive_topic(spark, endpoints, topic)
        assert summary.read == 1500 and summary.balanced()
        assert summary.quarantined == counts["poison"]
        assert summary.tombstones == counts["tombstones"]
        per = summary.per_partition
        assert sorted(per) == [0, 1, 2] and sum(p["read"] for p in per.values()) == 1500
        assert sum(p["quarantined"] for p in per.values()) == counts["poison"]
        assert sum(p["files"] for p in per.values()) == summary.objects
        for partition, (start, end) in summary.plan.items():
            assert per[partition]["read"] == end - start
            assert per[partition]["read"] == per[partition]["written"] + per[partition].get("quarantined", 0) + (
                0 if topic.spec.tombstones == "keep" else per[partition]["tombstones"]
            )
        rows = read_back(spark, endpoints, topic)
        assert rows.count() == good + (counts["tombstones"] if topic.spec.tombstones == "keep" else 0)
        data = rows.filter(F.col("id").isNotNull())
        assert data.select("id").distinct().count() == good
        assert data.groupBy("_kafka_partition", "_kafka_offset").count().filter("count > 1").count() == 0
        for column in ("_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_business_time", "_time_source"):
            assert column in rows.columns
        misplaced = data.filter(
            (F.date_format("_business_time", "yyyy-MM-dd") != F.col("dt")) | (F.hour("_business_time") != F.col("hour"))
        )
        assert misplaced.count() == 0
        assert {r["_time_source"] for r in data.select("_time_source").distinct().collect()} == {
            topic.spec.time_fields[0].path
        }
        versions = {r["schema_version"]: r["count"] for r in data.groupBy("schema_version").count().collect()}
        expected = {int(k.rsplit("_", 1)[1]): v for k, v in counts.items() if k.startswith("schema_version")}
        assert versions == expected
        committed, ends = committed_and_end(endpoints, topic)
        assert committed == ends
        assert state_beyond_receipts(endpoints, topic) == set()  # no plan left


def normalized(endpoints: Endpoints, topic: Topic) -> set[str]:
    return {k.replace(topic.env, "ENV") for k in keys(endpoints, topic.prefix.data_prefix())}


@pytest.fixture(scope="module")
def clean_topic(spark: SparkSession, endpoints: Endpoints) -> Topic:
    """The reference: the same 600 records archived by one run that nothing disturbed."""
    topic = fresh("card-authorized", max_records_per_file=40)
    produce(endpoints, topic, 600)
    archive_topic(spark, endpoints, topic)
    return topic


@pytest.fixture(scope="module")
def clean_run(endpoints: Endpoints, clean_topic: Topic) -> set[str]:
    return normalized(endpoints, clean_topic)


@pytest.mark.parametrize("crash_at", ["after_plan", "mid_write", "after_write", "after_commit"])
def test_crash_then_rerun_gives_the_clean_objects(
    spark: SparkSession,
    endpoints: Endpoints,
    clean_run: set[str],
    clean_topic: Topic,
    crash_at: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = fresh("card-authorized", max_records_per_file=40)
    produce(endpoints, topic, 600)
    with monkeypatch.context() as patch:
        CRASH_POINTS[crash_at](patch, topic_run)
        with pytest.raises(Exception, match="injected crash") as crashed:
            archive_topic(spark, endpoints, topic)
    assert crashed.type is InjectedCrash or "InjectedCrash" in str(crashed.value)
    rerun = archive_topic(spark, endpoints, topic)
    assert rerun.redone_plan
    archive_topic(spark, endpoints, topic)  # caught up: nothing left to do
    assert normalized(endpoints, topic) == clean_run
    assert differing_rows(contents(spark, endpoints, topic), contents(spark, endpoints, clean_topic)) == 0
    rows = read_back(spark, endpoints, topic)
    assert rows.groupBy("_kafka_partition", "_kafka_offset").count().filter("count > 1").count() == 0
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends


def test_two_runs_at_once_one_holds_the_topic_the_other_is_refused(
    spark: SparkSession, endpoints: Endpoints, clean_run: set[str]
) -> None:
    topic = fresh("card-authorized", max_records_per_file=40)
    produce(endpoints, topic, 600)
    results: list[Any] = []
    refused: list[Held] = []

    def one_run(name: str) -> None:
        try:
            results.append(archive_topic(spark, endpoints, topic, run=Run(name)))
        except Held as held:
            refused.append(held)

    threads = [threading.Thread(target=one_run, args=(name,)) for name in ("run-a", "run-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if not refused:  # the first finished before the second tried: then the second found nothing left to do
        assert sorted(bool(r.plan) for r in results) == [False, True]
    else:
        assert len(results) == 1 and results[0].plan
        assert refused[0].run_id in ("run-a", "run-b") and str(refused[0]).startswith("held by run ")
    assert normalized(endpoints, topic) == clean_run
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends


def test_retention_loss_fails_loudly_unless_accepted() -> None:
    from spark_jobs.archiver.plan import RetentionLoss, plan_ranges

    with pytest.raises(RetentionLoss, match=r"t\[0\]: committed offset 5 is below the earliest retained offset 9"):
        plan_ranges({0: 5}, {0: 9}, {0: 20}, max_records=100, accept_data_loss=False, topic="t")
    assert plan_ranges({0: 5}, {0: 9}, {0: 20}, max_records=100, accept_data_loss=True, topic="t") == {0: (9, 20)}
    # new partitions start at the earliest offset; the record budget is shared fairly and bounds the run
    assert plan_ranges(
        {0: 10, 1: None, 2: 7},
        {0: 0, 1: 3, 2: 0},
        {0: 1000, 1: 1000, 2: 7},
        max_records=100,
        accept_data_loss=False,
        topic="t",
    ) == {0: (10, 60), 1: (3, 53)}


CHAOS_SCHEMA = {
    "type": "record",
    "name": "Chaos",
    "namespace": "test",
    "fields": [
        {"name": "id", "type": "string"},
        {
            "name": "event",
            "type": {
                "type": "record",
                "name": "Event",
                "fields": [{"name": "at", "type": ["null", "string"], "default": None}],
            },
        },
        {"name": "ts_s", "type": ["null", "long"], "default": None},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
        {"name": "ts_us", "type": ["null", "long"], "default": None},
    ],
}


def test_chaos_records_are_counted_per_reason(spark: SparkSession, endpoints: Endpoints, tmp_path: Path) -> None:
    folder = tmp_path / "chaos" / "ops" / "staging"
    folder.mkdir(parents=True)
    (folder / "chaos.v1.avsc").write_text(json.dumps(CHAOS_SCHEMA))
    suffix = uuid.uuid4().hex[:8]
    (folder / "chaos.yaml").write_text(
        f"kafka_topic: test.chaos.{suffix}\n"
        "time_fields:\n"
        "  - {path: event.at, format: iso8601, default_zone: America/New_York}\n"
        "  - {path: ts_s, format: epoch, unit: s}\n"
        "  - {path: ts_ms, format: epoch, unit: ms}\n"
        "  - {path: ts_us, format: epoch, unit: us}\n"
    )
    topic = load_topic_catalog(tmp_path).get("chaos")
    topic = dataclasses.replace(topic, env=f"test{suffix}")
    schema = topic.schemas[0]
    schema_id = topic_with_schema(endpoints, topic, schema)
    moment = datetime(2026, 11, 20, 10, 30, tzinfo=UTC)
    kinds = [
        "garbage",
        "unknown_id",
        "corrupt",
        "tombstone",
        "s",
        "ms",
        "us",
        "iso_offset",
        "iso_local",
        "missing",
        "y2999",
    ]
    per_kind = 20
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
    for i in range(per_kind * len(kinds)):
        kind = kinds[i % len(kinds)]
        record: dict[str, Any] = {"id": f"c-{i}", "event": {"at": None}, "ts_s": None, "ts_ms": None, "ts_us": None}
        value: bytes | None
        if kind == "s":
            record["ts_s"] = int(moment.timestamp())
        elif kind == "ms":
            record["ts_ms"] = int(moment.timestamp() * 1000)
        elif kind == "us":
            record["ts_us"] = int(moment.timestamp() * 1_000_000)
        elif kind == "iso_offset":
            record["event"]["at"] = "2026-11-20T11:30:00+01:00"
        elif kind == "iso_local":
            record["event"]["at"] = "2026-11-20T05:30:00"  # New York, UTC-5 in November
        elif kind == "y2999":
            record["ts_ms"] = int(datetime(2999, 1, 1, tzinfo=UTC).timestamp() * 1000)
        value = encode(schema_id, schema, record)
        if kind == "garbage":
            value = b"\x42garbage"
        elif kind == "unknown_id":
            value = encode(987654, schema, record)
        elif kind == "corrupt":  # a known schema id, then a payload cut short
            value = value[:7]
        elif kind == "tombstone":
            value = None
        producer.produce(topic.kafka_topic, key=f"c-{i}".encode(), value=value, partition=i % 3)
    assert producer.flush(30) == 0

    summary = archive_topic(spark, endpoints, topic)
    assert summary.read == per_kind * len(kinds) and summary.balanced()
    assert summary.tombstones == per_kind
    assert summary.quarantine_by_reason == {
        "bad_magic_byte": per_kind,
        "unknown_schema_id": per_kind,
        "corrupt_avro": per_kind,
        "time_out_of_bounds": per_kind,
    }
    rows = read_back(spark, endpoints, topic)
    sources = {r["_time_source"]: r["count"] for r in rows.groupBy("_time_source").count().collect()}
    assert sources == {
        "ts_s": per_kind,
        "ts_ms": per_kind,
        "ts_us": per_kind,
        "event.at": 2 * per_kind,
        "kafka_timestamp": per_kind,
    }
    timed = rows.filter(F.col("_time_source") != "kafka_timestamp")
    assert {r["t"] for r in timed.select(F.col("_business_time").cast("string").alias("t")).distinct().collect()} == {
        "2026-11-20 10:30:00"
    }
    assert {(str(r["dt"]), r["hour"]) for r in timed.select("dt", "hour").distinct().collect()} == {("2026-11-20", 10)}
    today = datetime.now(UTC).date()
    bad = rows.filter((F.col("dt") < "2000-01-01") | (F.col("dt") > (today + timedelta(days=1)).isoformat()))
    assert bad.count() == 0
    quarantined = keys(endpoints, topic.prefix.quarantine_prefix())
    assert quarantined and all(k.endswith(".parquet") for k in quarantined)
    q = spark.read.parquet(*[f"s3a://{endpoints.bucket}/{k}" for k in quarantined])
    assert q.count() == 4 * per_kind
    poison = q.filter(F.col("_error") == "bad_magic_byte").first()
    assert poison is not None and poison["_raw_value"] == b"\x42garbage"


def test_reads_kafka_with_credentials_from_secrets_manager(spark: SparkSession, endpoints: Endpoints) -> None:
    """The broker's SASL listener admits only the user in the secret; the archiver reads the secret itself."""
    from kafkalake_dev.local.endpoints import KAFKA_SASL_PORT

    topic = fresh("refund-issued")
    counts = produce(endpoints, topic, 200)
    plain = {"mechanism": "PLAIN", "security_protocol": "SASL_PLAINTEXT"}

    wrong = through_kafka_secret(endpoints, KAFKA_SASL_PORT, password="not-the-password", **plain)
    with pytest.raises(RuntimeError, match=r"SASL authentication error: Authentication failed"):
        archive_topic(spark, wrong, topic)
    assert not keys(endpoints, topic.prefix.data_prefix()), "wrote data without being admitted"
    summary = archive_topic(spark, through_kafka_secret(endpoints, KAFKA_SASL_PORT, **plain), topic)
    assert summary.written == counts["schema_version_1"] > 0
    assert read_back(spark, endpoints, topic).count() == summary.written


def test_keys_and_headers_are_archived_when_the_topic_asks(spark: SparkSession, endpoints: Endpoints) -> None:
    topic = fresh("card-authorized", key=StoredAs.CLEAR, headers=StoredAs.CLEAR)
    schema = topic.schemas[-1]
    schema_id = topic_with_schema(endpoints, topic, schema)
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
    at_ms = int(datetime(2026, 11, 20, 10, 30, tzinfo=UTC).timestamp() * 1000)
    for i in range(30):
        record = {
            "id": f"h-{i}",
            "amount_cents": i,
            "currency": "EUR",
            "created_at_ms": at_ms,
            "authorization": {"authorized_at": None, "issuer": "x"},
            "merchant_country": None,
        }
        headers: list[tuple[str, str | bytes | None]] | None = (
            [("trace", f"t-{i}".encode()), ("source", b"pos")] if i % 2 else None
        )
        producer.produce(
            topic.kafka_topic,
            key=f"k-{i}".encode(),
            value=encode(schema_id, schema, record),
            headers=headers,
            partition=i % 3,
        )
    assert producer.flush(30) == 0
    summary = archive_topic(spark, endpoints, topic)
    assert summary.written == 30 and summary.balanced()
    rows = {r["id"]: r for r in read_back(spark, endpoints, topic).collect()}
    assert rows["h-3"]["_key"] == b"k-3"
    assert [(h["key"], bytes(h["value"])) for h in rows["h-3"]["_headers"]] == [("trace", b"t-3"), ("source", b"pos")]
    assert not rows["h-4"]["_headers"]  # a record without headers: an empty list
