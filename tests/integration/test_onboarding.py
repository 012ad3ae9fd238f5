"""Onboarding a fleet on the local stack: ten topics the catalog does not know are imported, validated and
archived; the ones off the naming convention (or whose schema cannot be had) are listed with a reason; a topic
created after the import shows as drift, on the command line and as a metric on the local endpoint."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from typer.testing import CliRunner

from infra.repo import catalog_dir
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.environments import EnvironmentConfig
from kafkalake.metrics import ENVIRONMENT_DIMENSION, NAMESPACE, SchemaDriftMetric
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.topic_catalog import DEFAULTS_FILE, load_topic_catalog
from kafkalake.topic_spec import ValueFormat
from kafkalake.wire import encode, split_header
from kafkalake_dev.cli.app import app
from kafkalake_dev.local.producers import ProducerSchemas
from kafkalake_dev.local.provision import ensure_pseudonym_key
from kafkalake_dev.local.sandbox import isolated_env, with_bucket
from kafkalake_dev.local.workload import ensure_topic
from kafkalake_dev.onboarding.importer import SAMPLE_GROUP
from tests.integration.archive_helpers import read_back

pytestmark = pytest.mark.stack
RECORDS = 12
MILLIS = {"type": "long", "logicalType": "timestamp-millis"}


def avro(name: str, *fields: tuple[str, Any]) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]})


class Cluster:
    """Topics of one throw-away environment on the local stack, each with one partition."""

    def __init__(self, endpoints: Endpoints, env: str) -> None:
        self.endpoints, self.env = endpoints, env
        self.admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
        self.registry = RegistryClient(endpoints.schema_registry_url)
        self.producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
        self.start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)

    def moment(self, i: int) -> datetime:
        return self.start + timedelta(minutes=10 * i)

    def topic(self, name: str, values: list[bytes | None] | None = None) -> str:
        kafka_topic = name.format(env=self.env)
        ensure_topic(self.admin, kafka_topic, 1)
        for i, value in enumerate(values or []):
            self.producer.produce(kafka_topic, key=f"k{i}".encode(), value=value)
        self.producer.flush(10)
        return kafka_topic

    def avro_topic(self, name: str, schemas: list[str], record: Any, tombstones: int = 0) -> str:
        ids = [self.registry.register(value_subject(name.format(env=self.env)), s) for s in schemas]
        values: list[bytes | None] = [
            encode(ids[i * len(ids) // RECORDS], schemas[i * len(ids) // RECORDS], record(i)) for i in range(RECORDS)
        ]
        return self.topic(name, values + [None] * tombstones)

    def registered_only(self, name: str, schema: str) -> str:
        """A topic with a value subject and no records yet."""
        self.registry.register(value_subject(name.format(env=self.env)), schema)
        return self.topic(name)

    def json_topic(self, name: str, record: Any) -> str:
        return self.topic(name, [json.dumps(record(i)).encode() for i in range(RECORDS)])


def make_topics(cluster: Cluster) -> dict[str, str | None]:
    """Kafka topic → the business-time field the import must choose (None: not imported)."""
    placed_v1 = avro("Placed", ("id", "string"), ("amount", "long"), ("placed_at", MILLIS))
    placed_v2 = json.dumps(
        {
            **json.loads(placed_v1),
            "fields": [
                *json.loads(placed_v1)["fields"],
                {"name": "coupon", "type": ["null", "string"], "default": None},
            ],
        }
    )
    m = cluster.moment
    return {
        cluster.avro_topic(
            "{env}.acme.orders.placed",
            [placed_v1, placed_v2],
            lambda i: {"id": f"p{i}", "amount": i, "placed_at": m(i)},
            tombstones=2,
        ): "placed_at",
        cluster.avro_topic(
            "{env}.acme.orders.shipped",
            [avro("Shipped", ("id", "string"), ("shipped_at", "string"))],
            lambda i: {"id": f"s{i}", "shipped_at": m(i).isoformat()},
        ): "shipped_at",
        cluster.avro_topic(
            "{env}.globex.billing.invoices",
            [avro("Invoice", ("id", "string"), ("updated_at", "string"), ("issued_at_ms", "long"))],
            lambda i: {"id": f"i{i}", "updated_at": m(i + 1).isoformat(), "issued_at_ms": int(m(i).timestamp() * 1000)},
        ): "issued_at_ms",
        cluster.json_topic(
            "{env}.globex.iot.readings", lambda i: {"id": f"r{i}", "ts": int(m(i).timestamp()), "celsius": 20.5}
        ): "ts",
        cluster.json_topic(
            "{env}.globex.iot.pings", lambda i: {"id": f"g{i}", "event": {"occurred_at": m(i).isoformat()}}
        ): "event.occurred_at",
        cluster.registered_only(
            "{env}.globex.crm.signups", avro("Signup", ("id", "string"), ("signed_up_at", MILLIS))
        ): "signed_up_at",
        cluster.topic("{env}.globex.crm.pending"): None,  # JSON, no records yet: nothing to infer from
        cluster.topic("{env}.globex.crm.blobs", [b"\x01\x02binary"] * 3): None,  # neither registered nor JSON
        cluster.json_topic("legacy.{env}.orders", lambda i: {"id": i}): None,  # off the naming convention
        cluster.json_topic("{env}.Globex.crm.upper", lambda i: {"id": i}): None,  # not a catalog name
    }


def empty_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[EnvironmentConfig, Path]:
    """A throw-away environment (the CLI reads it from ``KAFKALAKE_ENVIRONMENTS``) and a catalog holding only the
    defaults, for an import to fill."""
    env, _, environments = isolated_env(tmp_path)
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(environments))
    catalog = tmp_path / "fleet-catalog"
    catalog.mkdir()
    shutil.copy(catalog_dir() / DEFAULTS_FILE, catalog / DEFAULTS_FILE)
    return env, catalog


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_import_validate_archive_then_drift(
    local_stack: Endpoints, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, catalog = empty_catalog(tmp_path, monkeypatch)
    endpoints = with_bucket(local_stack, env.bucket)
    cluster = Cluster(endpoints, env.name)
    expected = make_topics(cluster)
    match = ["--match", f"*{env.name}*"]

    imported = cli("catalog", "import", "--env", env.name, "--catalog", str(catalog), *match)

    assert "6 topics imported" in imported and "2 flagged, 2 off the naming convention" in imported
    assert f"not imported: {env.name}.globex.crm.pending: JSON without a registered schema, and no records" in imported
    assert (
        f"not imported: {env.name}.globex.crm.blobs: no value subject in the registry, and the values are not JSON"
        in imported
    )
    assert f"not imported: legacy.{env.name}.orders: does not match the naming convention" in imported
    assert f"not imported: {env.name}.Globex.crm.upper: its company 'Globex' is not a catalog name" in imported
    assert "; 0 existing files would change" in imported
    cli("catalog", "validate", "--catalog", str(catalog))
    cli("catalog", "check", "--catalog", str(catalog), "--env", env.name, "--registry")
    found = load_topic_catalog(catalog)
    chosen = {t.kafka_topic: t.spec.time_fields[0].path for t in found.for_env(env.name)}
    assert chosen == {k: v for k, v in expected.items() if v is not None}
    placed = found.get(f"{env.name}.acme.orders.placed")
    assert len(placed.schemas) == 2 and placed.spec.tombstones == "keep"
    assert "2 tombstones" in placed.source.read_text()
    again = cli("catalog", "import", "--env", env.name, "--catalog", str(catalog), *match)
    assert again.count("unchanged") == 13 and "  written" not in again  # 6 topic files and 7 schemas, untouched

    archived = cli("archive", "--env", env.name, "--catalog", str(catalog))

    assert "FAILED" not in archived
    for topic in found.for_env(env.name):
        if topic.name == "signups":
            continue  # no records yet: nothing archived, nothing failed
        rows = read_back(spark, endpoints, topic).filter(F.col("id").isNotNull())
        sources = {r["_time_source"] for r in rows.select("_time_source").distinct().collect()}
        assert rows.count() == RECORDS and sources == {chosen[topic.kafka_topic]}, topic.kafka_topic
        hours = {(r["dt"], r["hour"]) for r in rows.select("dt", "hour").distinct().collect()}
        assert hours == {(cluster.moment(i).date(), cluster.moment(i).hour) for i in range(RECORDS)}
    sampler = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": SAMPLE_GROUP})
    try:  # the import's sample committed nothing
        assert sampler.committed([TopicPartition(placed.kafka_topic, 0)], timeout=10)[0].offset < 0
    finally:
        sampler.close()

    late = cluster.json_topic("{env}.acme.orders.late", lambda i: {"id": i})
    result = CliRunner().invoke(app, ["catalog", "drift", "--env", env.name, "--catalog", str(catalog)])

    assert result.exit_code == 1, result.output
    assert f"uncatalogued: {late} (would be acme/orders/{env.name}/late)" in result.output
    now = datetime.now(UTC)
    points = make_client(endpoints, "cloudwatch").get_metric_statistics(
        Namespace=NAMESPACE,
        MetricName=SchemaDriftMetric.UNCATALOGUED_TOPICS.value,
        Dimensions=[{"Name": ENVIRONMENT_DIMENSION, "Value": env.name}],
        StartTime=now - timedelta(minutes=5),
        EndTime=now + timedelta(minutes=5),
        Period=60,
        Statistics=["Maximum"],
    )["Datapoints"]
    assert [p["Maximum"] for p in points] == [3.0]  # the late topic and the two flagged ones


def test_a_json_topic_with_a_registered_subject_is_imported_as_json(
    local_stack: Endpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The format comes from the sampled bytes, not from the subject: JSON records under a registered value subject
    (as the demo's JSON topics have) are JSON, with the registered schema; a dry run writes nothing and says so."""
    env, catalog = empty_catalog(tmp_path, monkeypatch)
    cluster = Cluster(local_stack, env.name)
    schema = avro("Shipment", ("id", "string"), ("scanned_at", "string"))
    kafka_topic = cluster.registered_only("{env}.acme.logistics.shipments", schema)
    cluster.topic(
        kafka_topic,
        [json.dumps({"id": f"s{i}", "scanned_at": cluster.moment(i).isoformat()}).encode() for i in range(RECORDS)],
    )
    args = ["catalog", "import", "--env", env.name, "--catalog", str(catalog), "--match", kafka_topic]

    dry = cli(*args, "--dry-run")

    assert f"{kafka_topic}: json ({RECORDS} sampled values: {RECORDS} JSON; a value subject with 1 version(s)" in dry
    assert "1 topics would be imported (dry run: nothing written)" in dry and "would write" in dry
    assert sorted(p.name for p in catalog.rglob("*")) == [DEFAULTS_FILE]

    cli(*args)

    topic = load_topic_catalog(catalog).get(kafka_topic)
    assert topic.spec.value_format == ValueFormat.JSON
    assert [json.loads(s) for s in topic.schemas] == [json.loads(schema)]  # the registered version, not inferred
    assert topic.spec.time_fields[0].path == "scanned_at"
    assert f"{RECORDS} sampled values parse as ISO 8601" in topic.source.read_text()  # the JSON values were read
    cli("catalog", "check", "--catalog", str(catalog), "--env", env.name, "--registry")


def test_protobuf_and_json_schema_topics_are_imported_in_their_format_and_archived(
    local_stack: Endpoints, spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The format comes from the sampled bytes and the registry's schemaType for the ids they carry: the demo
    producers' Protobuf topic (its version 2's records name OrderPlaced at index [1]) is imported as protobuf with its
    message, the JSON Schema one as json_schema; both with the registry's renderings, and both archive exactly."""
    env, catalog = empty_catalog(tmp_path, monkeypatch)
    cluster = Cluster(local_stack, env.name)
    ensure_pseudonym_key(make_client(local_stack, "secretsmanager"))  # both hash a field the registry tags
    demo = load_topic_catalog(catalog_dir())
    expected: dict[str, tuple[ValueFormat, str | None, tuple[str, ...]]] = {}
    for name, pattern in (("order-placed", "{env}.acme.shop.orders"), ("ticket-opened", "{env}.globex.help.tickets")):
        source = demo.get(name, "staging")
        kafka_topic = pattern.format(env=env.name)
        producers = ProducerSchemas(source)
        encoders = producers.register(cluster.registry, value_subject(kafka_topic))
        newest = encoders[-1]
        moment = cluster.moment(0)
        time_field = source.spec.time_fields[0].path
        stamp: Any = moment if source.spec.value_format == ValueFormat.PROTOBUF else moment.isoformat()
        records = [{"id": f"r{i}", "customer_id": "c", "priority": 1, time_field: stamp} for i in range(RECORDS)]
        cluster.topic(kafka_topic, [newest(r, i) for i, r in enumerate(records)])
        expected[kafka_topic] = (source.spec.value_format, source.spec.message, source.schemas)

    for kafka_topic in expected:
        cli("catalog", "import", "--env", env.name, "--catalog", str(catalog), "--match", kafka_topic)

    imported = load_topic_catalog(catalog)
    for kafka_topic, (value_format, message, schemas) in expected.items():
        topic = imported.get(kafka_topic)
        assert (topic.spec.value_format, topic.spec.message) == (value_format, message), kafka_topic
        assert [json.loads(s) for s in topic.schemas] == [json.loads(s) for s in schemas], kafka_topic
    cli("catalog", "check", "--catalog", str(catalog), "--env", env.name, "--registry")
    endpoints = with_bucket(local_stack, env.bucket)  # the stack makes the bucket
    cli("archive", "--env", env.name, "--catalog", str(catalog))
    for kafka_topic in expected:
        assert read_back(spark, endpoints, imported.get(kafka_topic)).count() == RECORDS, kafka_topic


def test_framed_values_whose_ids_the_value_subject_lacks_are_flagged(
    local_stack: Endpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The format is never the subject's alone: Protobuf records whose schema is registered under another subject
    (TopicRecordNameStrategy's) on a topic whose value subject holds an Avro version are flagged, not imported as
    Avro; nothing is written."""
    env, catalog = empty_catalog(tmp_path, monkeypatch)
    cluster = Cluster(local_stack, env.name)
    kafka_topic = cluster.topic("{env}.acme.shop.mixed")
    avro_id = cluster.registry.register(value_subject(kafka_topic), avro("Mixed", ("id", "string")))
    producers = ProducerSchemas(load_topic_catalog(catalog_dir()).get("order-placed", "staging"))
    newest = producers.register(cluster.registry, f"{kafka_topic}-acme.shop.OrderPlaced")[-1]
    values: list[bytes | None] = [newest({"id": f"o{i}", "placed_at": cluster.moment(i)}, i) for i in range(RECORDS)]
    cluster.topic(kafka_topic, values)
    protobuf_id = split_header(newest({"id": "x"}, 0))[0]
    assert protobuf_id != avro_id

    output = cli("catalog", "import", "--env", env.name, "--catalog", str(catalog), "--match", kafka_topic)

    assert (
        f"not imported: {kafka_topic}: Confluent-framed values carry schema ids {protobuf_id} that no version of "
        f"value subject '{kafka_topic}-value' has (v1 id {avro_id}), so the registry gives no format for them"
    ) in output
    assert "0 topics imported" in output and "1 flagged" in output
    assert sorted(p.name for p in catalog.rglob("*")) == [DEFAULTS_FILE]
