"""Framed Kafka keys (``key_format``) on the local stack: real broker, real registry (Apicurio), moto S3 through S3A,
local Spark. Each key is decoded by its version under the ``<topic>-key`` subject into the table's ``_key`` struct
(the newest version's fields, null where an older version lacks one), a key that cannot be decoded sends its record
to quarantine with a ``key_`` reason and its raw bytes, and a record without a key lands with a null ``_key``: by a
plan alone (Spark's Kafka source) and in a light pass of its own (the task reader)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kafkalake.endpoints import Endpoints
from kafkalake.protobuf_schema import ProtoSchema, compile_files, index_bytes
from kafkalake.registered_formats import PROTOBUF, ROOT_NAME
from kafkalake.registry import RegistryClient, key_subject, value_subject
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import StoredAs, ValueFormat
from kafkalake.wire import encode, frame
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import Planned, ensure_topic, plan_workload
from spark_jobs.archiver.job import archive_fleet
from spark_jobs.common import Run
from tests.integration.archive_helpers import (
    START,
    archive_topic,
    audit_problems,
    fresh,
    keyring,
    keys,
    read_back,
)

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-key-format-tests"
KEY_V1 = {"type": "record", "name": "CardKey", "namespace": "test", "fields": [{"name": "card_id", "type": "string"}]}
REGION = {"name": "region", "type": ["null", "string"], "default": None, "pii": "hmac"}  # tagged in the registry
KEY_V2 = {**KEY_V1, "fields": [*KEY_V1["fields"], REGION]}
PROTO_KEY = """syntax = "proto3";
package test;
message ShipmentKey {
  string shipment_id = 1;
  int32 shard = 2;
}
"""


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, BUCKET)


def keyed(name: str, key_format: ValueFormat) -> Topic:
    """A fresh catalog topic whose keys are framed in ``key_format`` and kept decoded."""
    topic = fresh(name)
    archive = topic.spec.archive.model_copy(update={"key": StoredAs.CLEAR})
    spec = topic.spec.model_copy(update={"key_format": key_format, "archive": archive})
    return dataclasses.replace(topic, spec=spec)


def produce_keyed(
    endpoints: Endpoints, topic: Topic, records: int, key: Callable[[Planned], bytes | None]
) -> list[Planned]:
    """The workload of ``topic`` (Avro values, every catalog version), each record's key made by ``key``."""
    registry = RegistryClient(endpoints.schema_registry_url)
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic.kafka_topic, 3)
    ids = [registry.register(value_subject(topic.kafka_topic), s) for s in topic.schemas]
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
    planned = plan_workload(topic, records, start=START, hours=5)
    for item in planned:
        value = None if item.kind == "tombstone" else b"\x07not a framed value"
        if item.kind == "good":
            value = encode(ids[item.version], topic.schemas[item.version], item.record)
        producer.produce(topic.kafka_topic, key=key(item), value=value)
    assert producer.flush(30) == 0
    return planned


def test_avro_keys_of_two_versions_are_decoded_into_the_newest_struct_and_bad_keys_are_quarantined(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = keyed("card-authorized", ValueFormat.AVRO)
    registry = RegistryClient(endpoints.schema_registry_url)
    subject = key_subject(topic.kafka_topic)
    v1, v2 = (registry.register(subject, json.dumps(s)) for s in (KEY_V1, KEY_V2))
    bad = {3: b"\x07not framed", 5: frame(987654, b"\x02x"), 7: frame(v1, b"\xff")}

    def key(item: Planned) -> bytes | None:
        if item.index in bad:
            return bad[item.index]
        if item.index == 9:
            return None
        card = f"card-{item.index if item.key_index is None else item.key_index}"
        if item.index % 2:
            return encode(v2, json.dumps(KEY_V2), {"card_id": card, "region": f"region-{item.index}"})
        return encode(v1, json.dumps(KEY_V1), {"card_id": card})

    planned = produce_keyed(endpoints, topic, 400, key)
    ring = keyring(endpoints)
    summary = archive_topic(spark, endpoints, topic, keys=ring)
    assert summary.read == 400 and summary.balanced()
    good = [p for p in planned if p.kind == "good" and p.index not in bad]
    # a bad key sends its record to quarantine, a tombstone's too; a value's own reason comes first
    reasons = {3: "key_bad_magic_byte", 5: "key_unknown_schema_id", 7: "key_corrupt_avro"}
    by_key = {reasons[i]: 1 for i in bad if planned[i].kind != "poison"}
    poison = sum(1 for p in planned if p.kind == "poison")
    assert summary.quarantine_by_reason == {**({"bad_magic_byte": poison} if poison else {}), **by_key}
    rows = read_back(spark, endpoints, topic)
    assert rows.schema["_key"].dataType.simpleString() == "struct<card_id:string,region:string>"
    assert rows.count() == len(good)
    found = {(r["_key"]["card_id"], r["_key"]["region"]) if r["_key"] else None for r in rows.select("_key").collect()}
    expected = {
        None if p.index == 9 else (f"card-{p.index}", ring.current.digest(f"region-{p.index}") if p.index % 2 else None)
        for p in good
    }
    assert found == expected  # v1's keys have a null region, v2's their region hashed; the keyless record no _key
    held = spark.read.parquet(*[f"s3a://{endpoints.bucket}/{k}" for k in keys(endpoints, topic.quarantine_prefix())])
    raw = {r["_error"]: bytes(r["_key"]) for r in held.filter(F.col("_error").startswith("key_")).collect()}
    assert raw == {reasons[i]: bad[i] for i in bad if planned[i].kind != "poison"}
    assert audit_problems(endpoints, topic) == []


def test_a_protobuf_key_is_decoded_in_a_light_pass_of_its_own_beside_a_bytes_key_topic(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = keyed("card-authorized", ValueFormat.PROTOBUF)
    other = fresh("card-authorized")
    registry = RegistryClient(endpoints.schema_registry_url)
    schema_id = registry.register(key_subject(topic.kafka_topic), PROTO_KEY, PROTOBUF)
    schema = ProtoSchema(compile_files({ROOT_NAME: PROTO_KEY}, ROOT_NAME), ROOT_NAME)
    message = schema.message_class("test.ShipmentKey")
    index = index_bytes(schema.messages["test.ShipmentKey"])

    def key(item: Planned) -> bytes:
        number = item.index if item.key_index is None else item.key_index
        return frame(schema_id, message(shipment_id=f"s-{number}", shard=number % 4).SerializeToString(), index)

    planned = produce_keyed(endpoints, topic, 150, key)
    others = produce_keyed(endpoints, other, 150, lambda item: f"k{item.index}".encode())
    results = archive_fleet(
        spark,
        endpoints,
        [topic, other],
        concurrency=2,
        deadline=time.monotonic() + 600,
        run=Run("key-format-light", lease_ttl=timedelta(minutes=15)),
        pseudonym_key=keyring(endpoints),
        say=lambda _: None,
    )
    by_topic = {r.kafka_topic: r for r in results}
    assert all(r.ok for r in results), [r.error for r in results]
    assert [s.shared_job for s in by_topic[topic.kafka_topic].plans] == [1]  # light, in a pass of its own
    rows = read_back(spark, endpoints, topic)
    good = [p for p in planned if p.kind == "good"]
    assert rows.schema["_key"].dataType.simpleString() == "struct<shipment_id:string,shard:int>"
    found = {(r["_key"]["shipment_id"], r["_key"]["shard"]) for r in rows.select("_key").collect()}
    assert found == {(f"s-{p.index}", p.index % 4) for p in good}
    assert read_back(spark, endpoints, other).count() == sum(1 for p in others if p.kind == "good")
    assert audit_problems(endpoints, topic) == [] and audit_problems(endpoints, other) == []
