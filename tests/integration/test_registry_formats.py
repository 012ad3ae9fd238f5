"""Protobuf and JSON Schema topics from the registry, on the local stack: real broker, real registry (Apicurio), moto
S3 through S3A, local Spark. Decoded into typed columns, personal fields tagged only in the registry hashed at any
depth, every kind of bad record quarantined with its own reason, by a plan alone (Spark's Kafka source) and in a
light pass (the task reader)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafkalake.endpoints import Endpoints
from kafkalake.protobuf_schema import index_bytes
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.topic_catalog import Topic
from kafkalake.wire import frame
from kafkalake_dev.local.producers import ProducerSchemas
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import ensure_topic
from spark_jobs.archiver.job import archive_fleet
from spark_jobs.common import Run
from tests.integration.archive_helpers import (
    archive_topic,
    audit_problems,
    committed_and_end,
    fresh,
    good_records,
    iceberg_topic,
    keyring,
    keys,
    produce,
    read_back,
    table_rows,
)

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-format-tests"
HEX64 = r"^[0-9a-f]{64}$"


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, BUCKET)


def send(endpoints: Endpoints, topic: Topic, values: list[bytes | None]) -> None:
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic.kafka_topic, key=f"k{i}".encode(), value=value, partition=i % 3)
    assert producer.flush(30) == 0


def quarantine(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> DataFrame:
    found = keys(endpoints, topic.quarantine_prefix())
    return spark.read.parquet(*[f"s3a://{endpoints.bucket}/{k}" for k in found])


@pytest.fixture(scope="module")
def orders(spark: SparkSession, endpoints: Endpoints) -> Iterator[tuple[Topic, int, DataFrame]]:
    """order-placed produced by the workload (two versions, the second's message at index [1], a reference), then
    archived by one plan alone."""
    topic = fresh("order-placed")
    counts = produce(endpoints, topic, 1200)
    summary = archive_topic(spark, endpoints, topic, keys=keyring(endpoints))
    assert summary.read == 1200 and summary.balanced()
    assert summary.quarantine_by_reason == {"bad_magic_byte": counts["poison"]}
    yield topic, good_records(counts), read_back(spark, endpoints, topic)


def test_protobuf_versions_with_references_and_a_second_message_index_land_exactly(
    spark: SparkSession, endpoints: Endpoints, orders: tuple[Topic, int, DataFrame]
) -> None:
    topic, good, rows = orders
    assert rows.count() == good
    assert {r["schema_version"] for r in rows.select("schema_version").distinct().collect()} == {1, 2}
    assert rows.groupBy("_kafka_partition", "_kafka_offset").count().filter("count > 1").count() == 0
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends
    assert audit_problems(endpoints, topic) == []
    # version 2's records are OrderPlaced at index [1]: they decoded into its own columns (total, extension)
    v2 = rows.filter("schema_version = 2")
    assert v2.filter(F.col("total").isNull()).count() == 0
    assert v2.filter(F.col("total.currency") == "currency-0").count() + v2.filter(F.col("total.units") >= 0).count() > 0


def test_protobuf_types_follow_the_documented_rules(orders: tuple[Topic, int, DataFrame]) -> None:
    _, _, rows = orders
    types = {f.name: f.dataType.simpleString() for f in rows.schema.fields}  # Parquet reads every column nullable
    assert types["placed_at"] == "timestamp"
    assert types["customer"] == "struct<customer_id:string,email:string>"
    assert types["lines"] == "array<struct<sku:string,quantity:int,unit_price:double>>"
    assert types["attributes"] == "map<string,string>"
    assert types["channel"] == "string"  # an enum: its names
    assert types["coupon"] == "string"  # a wrapper: its scalar
    assert types["priority"] == "int"  # proto3 optional
    assert types["signature"] == "binary"
    assert types["card_token"] == types["voucher"] == "string"  # a oneof: a column per arm
    assert types["ship_to"] == "struct<street:string,city:string,country:string>"  # from the referenced file
    assert types["total"] == "struct<currency:string,units:bigint>"
    assert types["extension"] == "struct<type_url:string,value:binary>"  # Any: its type URL and bytes
    channels = {r["channel"] for r in rows.select("channel").distinct().collect()}
    assert channels == {"CHANNEL_UNSPECIFIED", "WEB", "STORE", "APP"}
    # the workload sets both arms of the oneof: the later one wins, the other is null, never its default ""
    assert rows.filter(F.col("card_token").isNotNull()).count() == 0
    assert rows.filter(F.col("voucher").isNull()).count() == 0
    first = rows.orderBy("_kafka_partition", "_kafka_offset").first()
    assert first is not None and first["coupon"].startswith("coupon-") and first["attributes"]
    assert first["lines"][0]["sku"].startswith("sku-") and first["ship_to"]["city"].startswith("city-")


def test_a_field_tagged_pii_only_in_the_registry_inside_a_nested_message_is_stored_hashed(
    orders: tuple[Topic, int, DataFrame],
) -> None:
    topic, good, rows = orders
    assert "customer.email" not in topic.spec.pii  # the catalog file declares nothing: the registry's tag does
    emails = rows.select("customer.email")
    assert emails.filter(F.col("email").rlike(HEX64)).count() == good
    assert emails.filter(F.col("email").startswith("email-")).count() == 0


def test_protobuf_presence_and_poison_of_every_kind(spark: SparkSession, endpoints: Endpoints) -> None:
    """Unset optional fields, wrappers and messages are null, zero scalars are zero; each kind of bad frame is
    quarantined with its reason, raw bytes and offsets, and the plan's good records land."""
    topic = fresh("order-placed")
    registry = RegistryClient(endpoints.schema_registry_url)
    ensure_topic_for(endpoints, topic)
    producers = ProducerSchemas(topic)
    encode_v1, encode_v2 = producers.register(registry, value_subject(topic.kafka_topic))
    ids = [v.schema_id for v in registry.versions(value_subject(topic.kafka_topic), topic.spec.message)]
    placed = datetime.now(UTC) - timedelta(hours=2)
    sparse = {"id": "sparse", "placed_at": placed, "priority": 0}
    empty = {"id": "", "placed_at": placed}
    values: list[bytes | None] = [
        encode_v1(sparse, 0),
        encode_v2(empty, 0),
        b"\x07not framed",  # bad_magic_byte
        frame(987654, b"\x0a\x01x", b"\x00"),  # unknown_schema_id
        frame(ids[0], b"\x0a\x01x", index_bytes((7,))),  # an index that names no message
        frame(ids[1], b"\x0a\x03EUR", b"\x00"),  # version 2's first message (Money), not the table's
        frame(ids[0], b"\xff\xff\xff\xff", b"\x00"),  # bytes that do not parse
        frame(ids[0], b"\x0a\x01", b"\x00"),  # truncated inside a field
        None,
    ]
    send(endpoints, topic, values)
    summary = archive_topic(spark, endpoints, topic, keys=keyring(endpoints))
    assert summary.read == len(values) and summary.balanced() and summary.tombstones == 1
    assert summary.quarantine_by_reason == {
        "bad_magic_byte": 1,
        "unknown_schema_id": 1,
        "unknown_message_index": 1,
        "other_message_type": 1,
        "corrupt_protobuf": 2,
    }
    rows = {r["id"]: r for r in read_back(spark, endpoints, topic).collect()}
    assert set(rows) == {"sparse", ""}
    sparse_row, empty_row = rows["sparse"], rows[""]
    assert sparse_row["priority"] == 0  # proto3 optional set to zero: kept, not null
    assert empty_row["priority"] is None  # unset optional: null, not 0
    assert empty_row["coupon"] is None and empty_row["customer"] is None and empty_row["total"] is None
    assert empty_row["lines"] == [] and empty_row["attributes"] == {} and empty_row["signature"] == bytearray()
    assert empty_row["channel"] == "CHANNEL_UNSPECIFIED" and empty_row["card_token"] is None
    assert empty_row["placed_at"] is not None
    held = quarantine(spark, endpoints, topic)
    assert held.count() == 6 and held.filter(F.col("_raw_value").isNull()).count() == 0
    by_reason = {r["_error"]: r for r in held.collect()}
    assert by_reason["unknown_message_index"]["_raw_value"] == values[4]
    assert by_reason["unknown_message_index"]["_kafka_offset"] >= 0


def ensure_topic_for(endpoints: Endpoints, topic: Topic) -> None:
    from confluent_kafka.admin import AdminClient

    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic.kafka_topic, 3)


def test_json_schema_topic_with_nested_objects_arrays_and_refs_lands_typed_and_refused_records_are_quarantined(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = fresh("ticket-opened")
    counts = produce(endpoints, topic, 600)
    [encode] = ProducerSchemas(topic).register(
        RegistryClient(endpoints.schema_registry_url), value_subject(topic.kafka_topic)
    )
    schema_id = int.from_bytes(encode({}, 0)[1:5], "big")
    opened = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    valid = {"id": "valid", "customer_id": "c-1", "opened_at": opened, "priority": 1}
    refused = [
        {"id": "x", "customer_id": "c", "opened_at": opened},  # priority is required
        {**valid, "id": "y", "priority": -1},  # below the minimum
        {**valid, "id": "z", "unknown": 1},  # additionalProperties: false
        {**valid, "id": "w", "address": {"street": "s"}},  # the referenced schema requires city
    ]
    values: list[bytes | None] = [
        frame(schema_id, json.dumps(valid).encode()),
        *[frame(schema_id, json.dumps(r).encode()) for r in refused],
        frame(schema_id, b"{not json"),
    ]
    send(endpoints, topic, values)
    summary = archive_topic(spark, endpoints, topic, keys=keyring(endpoints))
    assert summary.read == 600 + len(values) and summary.balanced()
    assert summary.quarantine_by_reason == {
        "bad_magic_byte": counts["poison"],
        "json_schema_invalid: $: required": 1,
        "json_schema_invalid: $.priority: minimum": 1,
        "json_schema_invalid: $: additionalProperties": 1,
        "json_schema_invalid: $.address: required": 1,
        "bad_json": 1,
    }
    rows = read_back(spark, endpoints, topic)
    assert rows.count() == good_records(counts) + 1
    types = {f.name: f.dataType.simpleString() for f in rows.schema.fields}
    assert types["tags"] == "array<string>" and types["priority"] == "bigint" and types["opened_at"] == "string"
    assert types["contact"] == "struct<name:string,phone:string>"  # a $ref into the schema's definitions
    assert types["address"] == "struct<street:string,postcode:string,city:string>"  # a $ref to a reference
    produced = rows.filter(F.col("id") != "valid")
    # tagged in the registry (email, contact.name, address.postcode) and declared in the catalog (contact.phone,
    # address.street): all hashed, at any depth
    for column in ("email", "contact.name", "contact.phone", "address.street", "address.postcode"):
        assert produced.filter(F.col(column).rlike(HEX64)).count() == good_records(counts), column
    assert produced.filter(F.col("address.city").startswith("city-")).count() == good_records(counts)
    assert audit_problems(endpoints, topic) == []


def test_a_light_pass_decodes_protobuf_and_json_schema_beside_avro(spark: SparkSession, endpoints: Endpoints) -> None:
    topics = [fresh("order-placed"), fresh("ticket-opened"), fresh("card-authorized")]
    counts = {t.kafka_topic: produce(endpoints, t, 150) for t in topics}
    lines: list[str] = []
    results = archive_fleet(
        spark,
        endpoints,
        topics,
        concurrency=2,
        deadline=time.monotonic() + 600,
        run=Run("formats-light", lease_ttl=timedelta(minutes=15)),
        pseudonym_key=keyring(endpoints),
        say=lines.append,
    )
    by_topic = {r.kafka_topic: r for r in results}
    for topic in topics:
        result = by_topic[topic.kafka_topic]
        assert result.ok, result.error
        assert [s.shared_job for s in result.plans] == [len(topics)]
        assert read_back(spark, endpoints, topic).count() == good_records(counts[topic.kafka_topic])
        assert audit_problems(endpoints, topic) == []


def test_protobuf_and_json_schema_topics_kept_as_iceberg_tables_land_exactly(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    for name in ("order-placed", "ticket-opened"):
        topic = iceberg_topic(endpoints, name)
        counts = produce(endpoints, topic, 400)
        summary = archive_topic(spark, endpoints, topic, keys=keyring(endpoints))
        assert summary.read == 400 and summary.balanced(), name
        rows = table_rows(spark, endpoints, topic)
        assert rows.count() == good_records(counts), name
        assert rows.groupBy("_kafka_partition", "_kafka_offset").count().filter("count > 1").count() == 0, name
        assert audit_problems(endpoints, topic) == [], name
