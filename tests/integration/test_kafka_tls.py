"""The archiver through the local broker's SASL_SSL listener with SCRAM-SHA-512 (the Kafka secret's defaults and
Amazon MSK's SCRAM listener) and the registry's HTTPS port, both with a certificate the stack's own CA signed, which
the secret's ``ca_pem`` names. A plan alone (Spark's Kafka source, Java's client) and a light pass (the task reader,
librdkafka) each archive exactly through them; without the CA the driver, the task reader and the registry's client
each fail at once, saying the certificate is the cause."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import timedelta

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined] # public there, re-exported without __all__
    AclOperation,
    AclPermissionType,
    ResourceType,
)
from pyspark.sql import SparkSession

from kafkalake.endpoints import Endpoints
from kafkalake.kafka_access import Credentials, KafkaAccess
from kafkalake.naming import SHARED_READ_GROUP, consumer_group
from kafkalake.registry import RegistryClient, RegistryError, value_subject
from kafkalake_dev.local.endpoints import KAFKA_MTLS_PORT, KAFKA_TLS_PORT, KAFKA_USER, REGISTRY_TLS_PORT
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.stack import local_tls
from spark_jobs.archiver.job import archive_fleet
from spark_jobs.archiver.offsets import KafkaAccessDenied
from spark_jobs.archiver.plan import Plan
from spark_jobs.archiver.records import light_read_config, read_kafka
from spark_jobs.archiver.task_reader import read_ranges
from spark_jobs.common import Run
from tests.integration.archive_helpers import (
    acl,
    archive_topic,
    committed_and_end,
    fresh,
    good_records,
    kafka_acls,
    produce,
    read_back,
    through_kafka_secret,
)
from tests.plans import plan_renderings

pytestmark = pytest.mark.stack
RECORDS = 120
REGISTRY = f"https://127.0.0.1:{REGISTRY_TLS_PORT}/apis/ccompat/v7"


def test_a_plan_alone_and_a_light_pass_archive_exactly_over_scram_and_tls_with_a_private_ca(
    local_stack: Endpoints, spark: SparkSession
) -> None:
    endpoints = with_bucket(local_stack, "kafkalake-tls-tests")
    tls = dataclasses.replace(
        through_kafka_secret(endpoints, KAFKA_TLS_PORT, ca_pem=local_tls().ca_pem()), schema_registry_url=REGISTRY
    )
    alone, *light = [fresh("card-authorized") for _ in range(3)]
    produced = {t.kafka_topic: produce(endpoints, t, RECORDS) for t in [alone, *light]}

    summary = archive_topic(spark, tls, alone)  # Spark's Kafka source: Java's client and its PEM truststore

    assert summary.written == good_records(produced[alone.kafka_topic]) > 0
    assert read_back(spark, endpoints, alone).count() == summary.written
    run = Run("tls", lease_ttl=timedelta(minutes=15))
    results = archive_fleet(spark, tls, light, concurrency=2, deadline=time.monotonic() + 600, run=run, say=print)
    for result, topic in zip(results, light, strict=True):  # one pass, read by librdkafka with the CA
        assert result.ok, result.error
        assert [s.shared_job for s in result.plans] == [len(light)]
        assert read_back(spark, endpoints, topic).count() == good_records(produced[topic.kafka_topic]) > 0
        committed, ends = committed_and_end(endpoints, topic)
        assert committed == ends


def test_without_the_private_ca_the_driver_the_task_reader_and_the_registry_client_say_the_certificate_failed(
    local_stack: Endpoints, spark: SparkSession
) -> None:
    endpoints = with_bucket(local_stack, "kafkalake-tls-tests")
    untrusted = through_kafka_secret(endpoints, KAFKA_TLS_PORT)
    topic = fresh("card-authorized")
    produce(endpoints, topic, 10)

    with pytest.raises(RuntimeError) as failed:
        archive_topic(spark, untrusted, topic)

    assert f"topic {topic.kafka_topic}: cannot reach Kafka at 127.0.0.1:{KAFKA_TLS_PORT}" in str(failed.value)
    assert "certificate verify failed" in str(failed.value) and "the secret's ca_pem" in str(failed.value)
    credentials = Credentials(*KAFKA_USER)  # SCRAM-SHA-512 over SASL_SSL, trusting the system's CAs
    reader = light_read_config(KafkaAccess(f"127.0.0.1:{KAFKA_TLS_PORT}", endpoints.schema_registry_url, credentials))
    with pytest.raises(Exception) as unread:
        read_ranges(spark, reader, [Plan(topic.kafka_topic, "2026-11-28T00:00:00+00:00", {0: (0, 1)})], False).collect()
    message = str(unread.value)
    assert "KafkaReadFailed: the TLS handshake with Kafka failed while reading" in message
    assert "certificate verify failed" in message and KAFKA_USER[1] not in message
    untrusting, trusting = (
        KafkaAccess("", REGISTRY, credentials),
        KafkaAccess("", REGISTRY, Credentials(*KAFKA_USER, ca_pem=local_tls().ca_pem())),
    )
    with pytest.raises(RegistryError, match=r"did not answer \(ConnectError: .*CERTIFICATE_VERIFY_FAILED.*ca_pem"):
        untrusting.registry().versions(value_subject(topic.kafka_topic))
    over_http = RegistryClient(endpoints.schema_registry_url).versions(value_subject(topic.kafka_topic))
    assert trusting.registry().versions(value_subject(topic.kafka_topic)) == over_http != []


def test_the_kafka_acls_the_docs_list_are_enough_and_without_group_read_nothing_is_committed(
    local_stack: Endpoints, spark: SparkSession
) -> None:
    endpoints = with_bucket(local_stack, "kafkalake-tls-tests")
    tls = through_kafka_secret(endpoints, KAFKA_TLS_PORT, ca_pem=local_tls().ca_pem())
    alone, light, unread = (
        fresh("card-authorized"),
        [fresh("card-authorized") for _ in range(2)],
        fresh("card-authorized"),
    )
    topics = [alone, *light, unread]
    produced = {t.kafka_topic: produce(endpoints, t, RECORDS) for t in topics}
    describe, read, group = AclOperation.DESCRIBE, AclOperation.READ, ResourceType.GROUP
    documented = [  # docs/deploying.md's list: a resource with an ACL denies whatever its ACLs do not allow
        *(acl(ResourceType.TOPIC, t.kafka_topic, o) for t in topics for o in (describe, read)),
        *(acl(group, consumer_group(t.kafka_topic), o) for t in [alone, *light] for o in (describe, read)),
        acl(group, consumer_group(unread.kafka_topic), describe),  # no Read: it cannot commit
        # the run's shared group needs nothing: every use of it is assigned partitions, never the group
        acl(group, SHARED_READ_GROUP, AclOperation.ALL, AclPermissionType.DENY),
    ]

    with kafka_acls(endpoints) as grant:
        grant(documented)
        summary = archive_topic(spark, tls, alone)
        run = Run("acls", lease_ttl=timedelta(minutes=15))
        results = archive_fleet(spark, tls, light, concurrency=2, deadline=time.monotonic() + 600, run=run, say=print)
        with pytest.raises(KafkaAccessDenied) as refused:
            archive_topic(spark, tls, unread)
        nothing = committed_and_end(endpoints, unread)[0]
        grant([acl(group, consumer_group(unread.kafka_topic), read)])
        redone = archive_topic(spark, tls, unread)

    assert summary.written == good_records(produced[alone.kafka_topic]) > 0
    assert [r.ok for r in results] == [True, True], [r.error for r in results]
    for topic in [alone, *light]:
        assert read_back(spark, endpoints, topic).count() == good_records(produced[topic.kafka_topic])
        committed, ends = committed_and_end(endpoints, topic)
        assert committed == ends
    assert str(refused.value).startswith(
        f"topic {unread.kafka_topic}: Kafka refused to commit the offsets of group "
        f"{consumer_group(unread.kafka_topic)} (GROUP_AUTHORIZATION_FAILED: Broker: Group authorization failed). "
        "Grant the archiver's Kafka user Read on the group"
    )
    assert all(offset < 0 for offset in nothing.values())
    assert redone.redone_plan and redone.written == good_records(produced[unread.kafka_topic])
    assert read_back(spark, endpoints, unread).count() == redone.written


def test_a_plan_alone_and_a_light_pass_archive_exactly_over_mutual_tls_and_no_plan_shows_the_key(
    local_stack: Endpoints, spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoints = with_bucket(local_stack, "kafkalake-tls-tests")
    tls = local_tls()
    client = {"certificate_pem": tls.client_chain.read_text(), "key_pem": tls.client_key.read_text()}
    mine = {"security_protocol": "SSL", "ca_pem": tls.ca_pem()}
    mutual = through_kafka_secret(endpoints, KAFKA_MTLS_PORT, **mine, **client)
    alone, *light = [fresh("card-authorized") for _ in range(3)]
    produced = {t.kafka_topic: produce(endpoints, t, RECORDS) for t in [alone, *light]}

    summary = archive_topic(spark, mutual, alone)  # Java's client with its PEM keystore
    run = Run("mtls", lease_ttl=timedelta(minutes=15))
    results = archive_fleet(spark, mutual, light, concurrency=2, deadline=time.monotonic() + 600, run=run, say=print)

    assert summary.written == good_records(produced[alone.kafka_topic]) > 0
    assert [s.shared_job for r in results for s in r.plans] == [len(light)] * len(light), [r.error for r in results]
    for topic in [alone, *light]:
        assert read_back(spark, endpoints, topic).count() == good_records(produced[topic.kafka_topic])
        committed, ends = committed_and_end(endpoints, topic)
        assert committed == ends
    access = KafkaAccess(mutual.kafka_bootstrap, REGISTRY, Credentials.from_secret(json.dumps(client | mine), "test"))
    key = client["key_pem"].splitlines()[1]  # the key's first line of base64
    read = Plan(alone.kafka_topic, "2026-11-28T00:00:00+00:00", {0: (0, 1)})
    for frame in (read_kafka(spark, access, read, True), read_ranges(spark, light_read_config(access), [read], True)):
        assert frame.count() == 1
        assert [name for name, text in plan_renderings(frame, capsys).items() if key in text] == []
