"""Each component of the local stack is real and reachable over the network, as the code reaches it in AWS."""

import json
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from infra.lifecycle import lake_lifecycle
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.registry import RegistryClient
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.wire import encode, split_header
from kafkalake_dev.local.endpoints import LOCAL_RESTRICTED_KEY_ALIAS
from kafkalake_dev.local.provision import PROVISIONED_SERVICES, provision
from kafkalake_dev.local.sandbox import isolated_env
from kafkalake_dev.local.workload import ensure_topic
from tests.integration.registry_helpers import schema_by_id

pytestmark = pytest.mark.stack


def create_topic(endpoints: Endpoints, name: str, partitions: int = 1) -> None:
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), name, partitions)


def test_kafka_produce_and_consume(local_stack: Endpoints) -> None:
    topic = f"test-roundtrip-{uuid.uuid4().hex[:8]}"
    create_topic(local_stack, topic)
    producer = Producer({"bootstrap.servers": local_stack.kafka_bootstrap})
    producer.produce(topic, key=b"k", value=b"hello kafkalake")
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": local_stack.kafka_bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1.0)
        assert message is not None and message.error() is None
        assert (message.key(), message.value(), message.offset()) == (b"k", b"hello kafkalake", 0)
    finally:
        consumer.close()


def test_schema_registered_and_fetched_by_id(local_stack: Endpoints) -> None:
    registry = RegistryClient(local_stack.schema_registry_url)
    subject = f"test-{uuid.uuid4().hex[:8]}-value"
    v1 = json.dumps({"type": "record", "name": "T", "fields": [{"name": "id", "type": "string"}]})
    v2 = json.dumps(
        {
            "type": "record",
            "name": "T",
            "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": ["null", "long"], "default": None}],
        }
    )
    first, second = registry.register(subject, v1), registry.register(subject, v2)
    assert registry.register(subject, v1) == first
    assert json.loads(schema_by_id(registry, first)) == json.loads(v1)
    assert json.loads(schema_by_id(registry, second)) == json.loads(v2)
    assert [(s.version, s.schema_id) for s in registry.versions(subject)] == [(1, first), (2, second)]
    assert registry.versions(f"missing-{subject}") == []
    framed = encode(second, v2, {"id": "a", "n": 3})
    assert split_header(framed)[0] == second


def test_s3_put_notifies_sqs(local_stack: Endpoints) -> None:
    s3, sqs = make_client(local_stack, "s3"), make_client(local_stack, "sqs")
    bucket = f"notify-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": local_stack.region})
    queue_url = sqs.create_queue(QueueName=bucket)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={"QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}]},
    )
    s3.put_object(Bucket=bucket, Key="data/x/y.parquet", Body=b"123")
    bodies = [
        json.loads(m["Body"])
        for m in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=2).get("Messages", [])
    ]
    records = [r for body in bodies for r in body.get("Records", [])]
    assert [r["s3"]["object"]["key"] for r in records] == ["data%2Fx%2Fy.parquet"]
    assert records[0]["eventName"] == "ObjectCreated:Put"


def test_spark_reads_kafka_and_writes_parquet_to_s3(local_stack: Endpoints, spark) -> None:  # type: ignore[no-untyped-def]
    topic = f"test-spark-{uuid.uuid4().hex[:8]}"
    create_topic(local_stack, topic, partitions=3)
    producer = Producer({"bootstrap.servers": local_stack.kafka_bootstrap})
    for i in range(30):
        producer.produce(topic, value=str(i).encode(), partition=i % 3)
    assert producer.flush(30) == 0
    s3 = make_client(local_stack, "s3")
    bucket = f"spark-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": local_stack.region})

    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", local_stack.kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
    )
    frame.write.parquet(f"s3a://{bucket}/out/")

    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="out/")["Contents"]]
    assert any(k.endswith(".parquet") for k in keys)
    back = spark.read.parquet(f"s3a://{bucket}/out/")
    assert sorted(int(r.value) for r in back.collect()) == list(range(30))
    assert {r.partition for r in back.select("partition").distinct().collect()} == {0, 1, 2}


def test_the_provisioned_lake_bucket_is_the_templates_where_moto_honours_it(
    local_stack: Endpoints, tmp_path: Path
) -> None:
    """Versioned, the lifecycle rules the template deploys (``infra.lifecycle``; tests/unit/test_infra_storage.py
    compares them with the template's), and the restricted key made in moto's KMS."""
    env, catalog, _ = isolated_env(tmp_path)
    topics = load_topic_catalog(catalog).for_env(env.name)
    clients = {s: make_client(local_stack, s) for s in PROVISIONED_SERVICES}
    provisioned = provision(clients, local_stack.region, env, load_topic_catalog(catalog))
    s3, kms = clients["s3"], clients["kms"]
    assert s3.get_bucket_versioning(Bucket=env.bucket)["Status"] == "Enabled"
    rules = s3.get_bucket_lifecycle_configuration(Bucket=env.bucket)["Rules"]
    assert rules == [r.s3_rule() for r in lake_lifecycle(env, topics)]
    assert any(r["ID"].startswith("retain-data-") for r in rules), "the topics' retention rules are there"
    restricted = kms.describe_key(KeyId=LOCAL_RESTRICTED_KEY_ALIAS)["KeyMetadata"]
    assert provisioned.restricted_key_arn == restricted["Arn"] and restricted["Enabled"]
    first = s3.put_object(Bucket=env.bucket, Key="state/x", Body=b"1")["VersionId"]
    s3.delete_object(Bucket=env.bucket, Key="state/x")
    kept = s3.list_object_versions(Bucket=env.bucket, Prefix="state/x")
    assert [v["VersionId"] for v in kept["Versions"]] == [first] and len(kept["DeleteMarkers"]) == 1
