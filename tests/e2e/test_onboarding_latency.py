"""How long a brand-new topic takes on the local stack, with the demo's settings, from its first record to its rows
being readable through Glue: imported into the catalog, provisioned, archived by the archiver's job-run
specification, registered by the maintainer (native inference) and read through Glue's partition locations.

Reported (printed, and recorded as test properties), never asserted: the local stack runs the steps back to back,
without the schedules; docs/catalog.md (Freshness) adds the AWS intervals for the worst case."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from infra.repo import catalog_dir
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.job_runs import archiver_run
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.topic_catalog import DEFAULTS_FILE, load_topic_catalog
from kafkalake.wire import encode
from kafkalake_dev.checks.inventory import take_inventory
from kafkalake_dev.checks.query import partition_locations, read_locations
from kafkalake_dev.cli.app import app
from kafkalake_dev.demo import run_checked
from kafkalake_dev.local.maintainer import invoke_locally
from kafkalake_dev.local.provision import PROVISIONED_SERVICES, provision
from kafkalake_dev.local.runner import LocalAssets
from kafkalake_dev.local.sandbox import isolated_env
from kafkalake_dev.local.stack import state_dir
from kafkalake_dev.local.workload import ensure_topic

pytestmark = pytest.mark.stack
RECORDS = 50
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "occurred_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }
)


def test_time_from_a_new_topics_first_record_to_its_rows_in_glue(
    local_stack: Endpoints,
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    record_property: Callable[[str, object], None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings, _, environments = isolated_env(tmp_path)
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(environments))
    endpoints = dataclasses.replace(local_stack, bucket=settings.bucket)
    root = tmp_path / "new-catalog"
    root.mkdir()
    shutil.copy(catalog_dir() / DEFAULTS_FILE, root / DEFAULTS_FILE)
    kafka_topic = f"{settings.name}.acme.onboarding.events"
    ensure_topic(AdminClient({"bootstrap.servers": local_stack.kafka_bootstrap}), kafka_topic, 1)
    schema_id = RegistryClient(local_stack.schema_registry_url).register(value_subject(kafka_topic), SCHEMA)
    steps: dict[str, float] = {}
    first_record = time.monotonic()

    def step(name: str, since: float) -> float:
        now = time.monotonic()
        steps[name] = round(now - since, 1)
        return now

    producer = Producer({"bootstrap.servers": local_stack.kafka_bootstrap})
    produced_from = datetime.now(UTC).replace(microsecond=0)
    moment = produced_from - timedelta(minutes=5)
    for i in range(RECORDS):
        producer.produce(kafka_topic, encode(schema_id, SCHEMA, {"id": f"e{i}", "occurred_at": moment}))
    producer.flush(10)
    produced_until = datetime.now(UTC) + timedelta(seconds=1)
    mark = step("produce", first_record)
    imported = CliRunner().invoke(app, ["catalog", "import", "--env", settings.name, "--catalog", str(root)])
    assert imported.exit_code == 0, imported.output
    catalog = load_topic_catalog(root)
    [topic] = catalog.for_env(settings.name)
    clients = {s: make_client(endpoints, s) for s in PROVISIONED_SERVICES}
    provision(clients, endpoints.region, settings, catalog)
    mark = step("import and provision (a pull request and a deploy in AWS)", mark)
    assets = LocalAssets.build(state_dir() / "assets" / settings.name, root)
    run_checked(archiver_run(settings, assets.artifacts), endpoints, print)
    mark = step("archiver run (job-run specification, spark-submit)", mark)
    maintained = invoke_locally(endpoints, settings, catalog, native=True)
    mark = step("maintainer drain (native inference)", mark)
    rows = read_locations(spark, partition_locations(clients["glue"], topic.database, topic.table))
    assert rows is not None and rows.count() == RECORDS
    step("read through Glue", mark)
    [inventory] = take_inventory(clients["s3"], clients["glue"], settings.bucket, [topic])
    assert inventory.newest_kafka_time is not None
    assert produced_from <= inventory.newest_kafka_time <= produced_until  # the records' Kafka (producer) time
    assert set(maintained["data_age_seconds"]) == {f"{topic.database}.{topic.table}"}

    total = round(time.monotonic() - first_record, 1)
    record_property("first_record_to_glue_seconds", total)
    record_property("steps_seconds", json.dumps(steps))
    record_property("maintainer_data_age_seconds", json.dumps(maintained["data_age_seconds"]))
    with capsys.disabled():
        print(f"\nnew topic {kafka_topic}: first record to rows readable through Glue in {total} s on the local stack")
        for name, seconds in steps.items():
            print(f"  {name:<60} {seconds:>7} s")
        print(f"  maintainer's GlueDataAgeSeconds: {maintained['data_age_seconds']}")
