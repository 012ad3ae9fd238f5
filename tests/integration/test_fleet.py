"""The archiver over a fleet on the local stack: isolation, catch-up, metrics, and SIGKILLs at random moments."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from typer.testing import CliRunner

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.metrics import ENVIRONMENT_DIMENSION, NAMESPACE, ArchiverMetric
from kafkalake.registry import RegistryClient
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake.wire import encode
from kafkalake_dev.cli.app import app
from kafkalake_dev.local.provision import ensure_pseudonym_key
from kafkalake_dev.local.sandbox import isolated_env, with_bucket
from kafkalake_dev.local.workload import ensure_topic, produce_topic, sample_value
from spark_jobs.archiver.metrics import metric_data, publish
from spark_jobs.archiver.topic_run import catch_up
from tests.crashes import kill_on_progress, random_kills
from tests.integration.archive_helpers import (
    ICEBERG_COMPANIES,
    START,
    audit_problems,
    committed_and_end,
    fresh,
    keys,
    produce,
    state_beyond_receipts,
    table_rows,
)

pytestmark = pytest.mark.stack
RECORDS = 3000


LEASE_TTL_SECONDS = 3
"""Short, so a run after a SIGKILL takes the killed run's topics over within seconds."""


class Fleet:
    """An isolated environment (its own catalog copy, bucket and Kafka topic names) for CLI and subprocess runs."""

    def __init__(self, local_stack: Endpoints, folder: Path, archive: str = "", name: str = "card-authorized") -> None:
        """``archive``: settings added to topic ``name``'s file."""
        self.env, self.catalog_dir, self.environments = isolated_env(folder)
        if archive:
            path = load_topic_catalog(self.catalog_dir).get(name, self.env.name).source
            own = path.read_text()
            if (
                "table_format: iceberg" in archive
            ):  # an Iceberg topic sets no table_inference (no crawler, no maintainer)
                own = "".join(line for line in own.splitlines(keepends=True) if not line.startswith("table_inference:"))
                company = path.relative_to(self.catalog_dir).parts[0]
                if company not in ICEBERG_COMPANIES:  # where a deployed archiver may make an Iceberg table
                    own += f"database: {ICEBERG_COMPANIES[0]}_{self.env.name}\n"
            path.write_text(own + archive)
        self.catalog = load_topic_catalog(self.catalog_dir)
        self.endpoints = with_bucket(local_stack, self.env.bucket)
        glue = make_client(self.endpoints, "glue")
        for database in sorted({t.database for t in self.catalog.for_env(self.env.name)}):  # the stack deploys them
            glue.create_database(DatabaseInput={"Name": database})  # an Iceberg topic's table is made in its own

    def topic(self, name: str) -> Topic:
        return self.catalog.get(name, self.env.name)

    def command(self, *topics: str) -> list[str]:
        names = [arg for t in topics for arg in ("--topic", t)]
        ttl = ["--lease-ttl-seconds", str(LEASE_TTL_SECONDS)]
        return ["archive", "--env", self.env.name, "--catalog", str(self.catalog_dir), *ttl, *names]


def data_rows(spark: SparkSession, fleet: Fleet, topic: Topic) -> tuple[int, int, int]:
    """(rows, distinct ids, duplicate (partition, offset) rows) as a reader finds them (an Iceberg table's through
    the Iceberg catalog)."""
    rows = table_rows(spark, fleet.endpoints, topic).filter(F.col("id").isNotNull())
    duplicates = rows.groupBy("_kafka_partition", "_kafka_offset").count().filter("count > 1").count()
    return rows.count(), rows.select("id").distinct().count(), duplicates


def test_one_run_over_four_topics_archives_the_good_and_reports_the_bad(
    local_stack: Endpoints, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # customer-updated hashes personal fields: with no pseudonym key it would fail on that before its registry subject
    ensure_pseudonym_key(make_client(local_stack, "secretsmanager"))
    fleet = Fleet(local_stack, tmp_path)
    good = [fleet.topic("card-authorized"), fleet.topic("refund-issued")]
    missing = fleet.topic("sensor-readings")  # never created in Kafka
    unregistered = fleet.topic("customer-updated")  # records, but no schema under its subject
    produced = {t.name: produce(fleet.endpoints, t, 300) for t in good}
    ensure_topic(AdminClient({"bootstrap.servers": local_stack.kafka_bootstrap}), unregistered.kafka_topic, 3)
    producer = Producer({"bootstrap.servers": local_stack.kafka_bootstrap})
    schema = unregistered.schemas[0]
    for i in range(20):
        producer.produce(unregistered.kafka_topic, encode(1, schema, sample_value(json.loads(schema), "c", i)))
    producer.flush(10)
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(fleet.environments))

    result = CliRunner().invoke(app, fleet.command(*(t.name for t in [*good, missing, unregistered])))

    assert result.exit_code == 1, result.output
    assert "2 of 4 topics FAILED" in result.output
    told = " ".join(result.output.split())  # as read, whatever the terminal's width wrapped
    assert f"topic {missing.kafka_topic}: Kafka at {local_stack.kafka_bootstrap} has no such topic" in told, told
    assert "Check the catalog file's kafka_topic" in told, told
    assert f"no schema under subject '{unregistered.kafka_topic}-value'" in result.output
    for topic in good:
        counts = produced[topic.name]
        expected = sum(v for k, v in counts.items() if k.startswith("schema_version"))
        assert data_rows(spark, fleet, topic) == (expected, expected, 0)
        committed, ends = committed_and_end(fleet.endpoints, topic)
        assert committed == ends
    for topic in (missing, unregistered):
        assert keys(fleet.endpoints, topic.prefix.data_prefix()) == set()
        assert keys(fleet.endpoints, topic.prefix.quarantine_prefix()) == set()
    committed, _ = committed_and_end(fleet.endpoints, unregistered)
    assert all(offset < 0 for offset in committed.values()), "a failed topic committed offsets"


def test_a_backlog_of_five_plans_is_caught_up_in_one_run_with_metrics(
    local_stack: Endpoints, spark: SparkSession
) -> None:
    endpoints = with_bucket(local_stack, "kafkalake-fleet-tests")
    topic = fresh("card-authorized", max_records_per_run=100, max_records_per_file=50)
    produce(endpoints, topic, 500)
    result = catch_up(spark, endpoints, topic, deadline=time.monotonic() + 600, say=lambda _: None)

    carried_out = [s for s in result.plans if s.plan]
    assert len(carried_out) == 5 and all(s.read <= 100 for s in carried_out)  # memory: one plan's records at a time
    assert sum(s.read for s in carried_out) == 500 and all(s.balanced() for s in carried_out)
    assert result.lag == {0: 0, 1: 0, 2: 0}
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends
    assert set(result.timings()) == {"plan", "read_decode", "write", "commit"}
    assert all(seconds > 0 for seconds in result.timings().values())

    cloudwatch = make_client(endpoints, "cloudwatch")
    env = f"fleet-{topic.env}"
    assert publish(cloudwatch, metric_data([result], env, datetime.now(UTC))) == 1
    now = datetime.now(UTC)

    def statistic(name: ArchiverMetric, partition: int, stat: str) -> float:
        dimensions = {ENVIRONMENT_DIMENSION: env, "Topic": topic.kafka_topic, "Partition": str(partition)}
        points = cloudwatch.get_metric_statistics(
            Namespace=NAMESPACE,
            MetricName=name.value,
            Dimensions=[{"Name": k, "Value": v} for k, v in dimensions.items()],
            StartTime=now - timedelta(minutes=5),
            EndTime=now + timedelta(minutes=5),
            Period=60,
            Statistics=[stat],
        )["Datapoints"]
        return float(sum(p[stat] for p in points))

    assert [statistic(ArchiverMetric.LAG, p, "Maximum") for p in range(3)] == [0.0, 0.0, 0.0]
    assert sum(statistic(ArchiverMetric.RECORDS_READ, p, "Sum") for p in range(3)) == 500
    assert all(statistic(ArchiverMetric.LATEST_HOUR, p, "Maximum") > 0 for p in range(3))
    failed = cloudwatch.get_metric_statistics(
        Namespace=NAMESPACE,
        MetricName=ArchiverMetric.TOPICS_FAILED.value,
        Dimensions=[{"Name": ENVIRONMENT_DIMENSION, "Value": env}],
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=5),
        Period=60,
        Statistics=["Maximum"],
    )["Datapoints"]
    assert [p["Maximum"] for p in failed] == [0.0]


@pytest.mark.parametrize(
    ("name", "table_format"),
    [
        ("card-authorized", "hive"),
        ("card-authorized", "iceberg"),
        ("order-placed", "hive"),
        ("customer-updated", "upsert"),
    ],
)  # order-placed: a Protobuf topic; customer-updated as an upsert table keyed by the Kafka key
def test_sigkill_at_random_moments_then_a_clean_run(
    local_stack: Endpoints, spark: SparkSession, tmp_path: Path, name: str, table_format: str
) -> None:
    """The archiver's process group is killed with SIGKILL up to three times while it works (until a run ends by itself,
    having done all that was left), each time a random number of objects into its own run (plans of 300 records, 9 or
    more objects each) and up to 2 s later, so kills land while reading, writing and committing (for an Iceberg table,
    its table commits too); then it is left to finish. An upsert table then holds the state the stream leaves: each
    good record's row (every key is its own) but those a later tombstone deleted."""
    upsert = table_format == "upsert"
    table = "  key: clear\ntable_format: iceberg\nmode: upsert\n" if upsert else f"table_format: {table_format}\n"
    settings = f"archive:\n  max_records_per_run: 300\n  max_records_per_file: 40\n{table}"
    fleet = Fleet(local_stack, tmp_path, settings, name)
    topic = fleet.topic(name)
    registry = RegistryClient(fleet.endpoints.schema_registry_url)
    produced = produce_topic(topic, fleet.endpoints.kafka_bootstrap, registry, RECORDS, start=START, hours=5)
    counts = produced.counts
    kafkalake = str(Path(sys.executable).parent / "kafkalake")
    environ = {**os.environ, "KAFKALAKE_ENVIRONMENTS": str(fleet.environments)}
    seed = random.randrange(1_000_000)
    kills = random_kills(seed, range(1, 25))
    command = [kafkalake, *fleet.command(topic.name)]

    def objects() -> int:
        return len(keys(fleet.endpoints, topic.prefix.data_prefix()))

    killed = kill_on_progress(command, environ, objects, kills, lease_ttl=LEASE_TTL_SECONDS)
    assert killed >= 1, f"seed {seed}: none of the kills {kills} found the archiver still running"
    final = subprocess.run(command, check=False, env=environ, capture_output=True, text=True)
    assert final.returncode == 0, f"seed {seed}, kills {kills}: {final.stdout[-3000:]}{final.stderr[-3000:]}"

    good = sum(v for k, v in counts.items() if k.startswith("schema_version"))
    assert good == RECORDS - counts["poison"] - counts["tombstones"]
    kept = good - len(produced.tombstoned) if upsert else good
    assert data_rows(spark, fleet, topic) == (kept, kept, 0), f"seed {seed}, kills {kills}"
    committed, ends = committed_and_end(fleet.endpoints, topic)
    assert committed == ends
    assert audit_problems(fleet.endpoints, topic) == [], f"seed {seed}, kills {kills}"
    lease = (
        make_client(fleet.endpoints, "s3")
        .get_object(Bucket=fleet.endpoints.bucket, Key=topic.prefix.archive_lease_key())["Body"]
        .read()
    )
    assert state_beyond_receipts(fleet.endpoints, topic) == set(), (  # no plan left
        f"seed {seed}, kills {kills}, lease {lease.decode()[:2000]}, final run: {final.stdout[-2000:]}"
    )
