"""Shared by the archiver's integration tests: fresh topics (Iceberg ones too), producing, one plan of a topic
(``archive_topic``), reading back, offsets."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined] # public there, re-exported without __all__
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from infra.repo import catalog_dir
from kafkalake.aws import list_objects, make_client, read_json
from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import ICEBERG_CATALOG
from kafkalake.kafka import watermarks
from kafkalake.naming import consumer_group
from kafkalake.personal import Keyring, PseudonymKey, load_key
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.s3_location import S3Location
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.checks.audit import audit, committed_offsets, read_lake
from kafkalake_dev.checks.iceberg_audit import audit_topic
from kafkalake_dev.local.endpoints import KAFKA_USER
from kafkalake_dev.local.provision import ensure_pseudonym_key
from kafkalake_dev.local.workload import ensure_topic, produce_topic
from spark_jobs.archiver.summary import Summary
from spark_jobs.archiver.topic_run import TopicArchiver
from spark_jobs.common import Run

CATALOG = load_topic_catalog(catalog_dir())
START = datetime(2026, 11, 20, 6, tzinfo=UTC)


def fresh(name: str, env: str = "staging", **archive: Any) -> Topic:
    """A catalog topic under a unique Kafka topic and S3 prefix, so tests never share state; kept as a Hive table
    (``iceberg_topic`` keeps one as an Iceberg table, with the Glue database its environment then needs)."""
    topic = CATALOG.get(name, env)
    suffix = uuid.uuid4().hex[:8]
    update = {"kafka_topic": f"test.{name}.{suffix}", "archive": topic.spec.archive.model_copy(update=archive)}
    spec = topic.spec.model_copy(update={**update, "table_format": TableFormat.HIVE})
    return dataclasses.replace(topic, env=f"test{suffix}", spec=spec)


def produce(endpoints: Endpoints, topic: Topic, records: int) -> Counter[str]:
    registry = RegistryClient(endpoints.schema_registry_url)
    return produce_topic(topic, endpoints.kafka_bootstrap, registry, records, start=START, hours=5).counts


def good_records(counts: Counter[str]) -> int:
    """The records of ``produce``'s counts that decode into data rows (every schema version's; not poison, not
    tombstones)."""
    return sum(v for k, v in counts.items() if "version" in k)


def keyring(endpoints: Endpoints) -> Keyring:
    """The local environment's pseudonym key (made when missing), as the archiver's job reads it for topics that hash
    a field."""
    secrets = make_client(endpoints, "secretsmanager")
    ensure_pseudonym_key(secrets)
    return Keyring(load_key(secrets, endpoints.pseudonym_secret_arn))


def through_kafka_secret(endpoints: Endpoints, port: int, **secret: str) -> Endpoints:
    """``endpoints`` reaching Kafka on the local broker's listener at ``port`` with a Kafka secret of their own in the
    local Secrets Manager (``kafkalake.kafka_access``): ``secret``, with ``KAFKA_USER``'s username and password unless
    it is mutual TLS's (``security_protocol`` SSL)."""
    login = {} if secret.get("security_protocol") == "SSL" else {"username": KAFKA_USER[0], "password": KAFKA_USER[1]}
    value = {**login, **secret}
    secrets = make_client(endpoints, "secretsmanager")
    arn = secrets.create_secret(Name=f"kafkalake/test/{uuid.uuid4().hex[:8]}", SecretString=json.dumps(value))["ARN"]
    return dataclasses.replace(endpoints, kafka_bootstrap=f"127.0.0.1:{port}", kafka_secret_arn=arn)


def acl(
    kind: ResourceType, name: str, operation: AclOperation, permission: AclPermissionType = AclPermissionType.ALLOW
) -> AclBinding:
    """One literal ACL for ``KAFKA_USER`` from any host."""
    return AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{KAFKA_USER[0]}", "*", operation, permission)


@contextmanager
def kafka_acls(endpoints: Endpoints) -> Iterator[Callable[[list[AclBinding]], None]]:
    """A ``grant`` that sets ACLs on the local broker through its plaintext listener (whose user is a super user);
    every ACL it set is deleted when the block ends."""
    admin, granted = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), []

    def grant(acls: list[AclBinding]) -> None:
        granted.extend(acls)
        for future in admin.create_acls(acls).values():
            future.result(30)

    try:
        yield grant
    finally:
        revoke(admin, granted)


def revoke(admin: AdminClient, acls: list[AclBinding]) -> None:
    """Delete exactly ``acls``."""
    fields = ("restype", "name", "resource_pattern_type", "principal", "host", "operation", "permission_type")
    filters = [AclBindingFilter(*(getattr(a, f) for f in fields)) for a in acls]
    for future in admin.delete_acls(filters).values() if filters else []:
        future.result(30)


def topic_with_schema(endpoints: Endpoints, topic: Topic, schema: str) -> int:
    """The topic's Kafka topic (3 partitions) and ``schema`` registered under its value subject; the schema id."""
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic.kafka_topic, 3)
    return RegistryClient(endpoints.schema_registry_url).register(value_subject(topic.kafka_topic), schema)


def read_back(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> DataFrame:
    base = S3Location(endpoints.bucket, topic.prefix.data_prefix()).uri()
    return spark.read.option("mergeSchema", "true").option("basePath", base).parquet(base)


def table_rows(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> DataFrame:
    """The topic's rows as a reader finds them: a Hive table's objects (``read_back``), an Iceberg table's current
    snapshot through the Iceberg catalog."""
    if topic.spec.table_format != TableFormat.ICEBERG:
        return read_back(spark, endpoints, topic)
    name = f"{ICEBERG_CATALOG}.{topic.database}.{topic.table}"
    spark.sql(f"REFRESH TABLE {name}")
    return spark.table(name)


def contents(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> DataFrame:
    """Every archived row as (partition, offset, the row as JSON), without what depends on when the records were
    produced: Kafka's timestamp, and the business time (with its dt and hour) of rows where it fell back to it."""
    rows = table_rows(spark, endpoints, topic).drop("_kafka_timestamp")
    by_kafka_time = F.col("_time_source") == "kafka_timestamp"
    timed = [c for c in ("_business_time", "dt", "hour") if c in rows.columns]
    rows = rows.withColumns({c: F.when(~by_kafka_time, F.col(c)) for c in timed})
    return rows.select("_kafka_partition", "_kafka_offset", F.to_json(F.struct(*sorted(rows.columns))).alias("row"))


def differing_rows(one: DataFrame, other: DataFrame) -> int:
    """Rows of either that the other lacks (or holds a different number of times)."""
    return one.exceptAll(other).count() + other.exceptAll(one).count()


def state_beyond_receipts(endpoints: Endpoints, topic: Topic) -> set[str]:
    """The topic's state objects other than receipts: just its lease, released and holding no plan, once a run
    finished every plan it stored (anything else is left over)."""
    lease = topic.prefix.archive_lease_key()
    left = keys(endpoints, topic.prefix.state_prefix()) - keys(endpoints, topic.prefix.receipts_prefix())
    document = read_json(make_client(endpoints, "s3"), endpoints.bucket, lease)
    if document is not None and document["run_id"] is None and document["work"]["plan"] is None:
        left.discard(lease)
    return left


def keys(endpoints: Endpoints, prefix: str) -> set[str]:
    return set(list_objects(make_client(endpoints, "s3"), endpoints.bucket, prefix))


def committed_and_end(endpoints: Endpoints, topic: Topic, partitions: int = 3) -> tuple[dict[int, int], dict[int, int]]:
    consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": consumer_group(topic.kafka_topic)})
    try:
        parts = [TopicPartition(topic.kafka_topic, p) for p in range(partitions)]
        committed = {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=10)}
        ends = {tp.partition: watermarks(consumer, tp)[1] for tp in parts}
        return committed, ends
    finally:
        consumer.close()


def audit_problems(endpoints: Endpoints, topic: Topic) -> list[str]:
    """What the offset audit (``kafkalake audit``) finds wrong with the topic's archive, one line per problem; an
    Iceberg topic's from its table's snapshot summaries."""
    if topic.spec.table_format == TableFormat.ICEBERG:
        committed = committed_offsets(endpoints.kafka_bootstrap, topic.kafka_topic)
        return [f"{p.kafka_partition} {p.start}-{p.end} {p.kind}" for p in audit_topic(endpoints, topic, committed)]
    lake = read_lake(make_client(endpoints, "s3"), endpoints.bucket, topic)
    found = audit(lake, committed_offsets(endpoints.kafka_bootstrap, topic.kafka_topic))
    return [f"{p.kafka_partition} {p.start}-{p.end} {p.kind}" for r in found for p in r.problems]


def archive_topic(
    spark: SparkSession,
    endpoints: Endpoints,
    topic: Topic,
    *,
    run: Run | None = None,
    keys: Keyring | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    say: Callable[[str], None] = print,
) -> Summary:
    """Carry out one plan of ``topic`` (``Held`` when another run holds it)."""
    archiver = TopicArchiver(spark, endpoints, topic, keys=keys, now=now, say=say)
    try:
        with archiver.holding(run or Run.new(spark)):
            return archiver.run_plan()
    finally:
        archiver.close()


@dataclasses.dataclass(frozen=True)
class RotatingSecret:
    """A pseudonym secret of a test's own, which ``endpoints`` name: it holds ``old`` (key id k1) until ``rotate``
    puts ``new`` (k2), and Secrets Manager keeps ``old`` as the previous version, as a rotation does in AWS."""

    endpoints: Endpoints
    old: PseudonymKey
    new: PseudonymKey

    def rotate(self) -> None:
        value = PseudonymKey.secret_string(self.new.key_id, self.new.secret)
        secrets = make_client(self.endpoints, "secretsmanager")
        secrets.put_secret_value(SecretId=self.endpoints.pseudonym_secret_arn, SecretString=value)


def rotating_secret(endpoints: Endpoints, suffix: str) -> RotatingSecret:
    secret = f"kafkalake/local/pseudonym-rotation-{suffix}"
    own = dataclasses.replace(endpoints, pseudonym_secret_arn=secret)
    old, new = PseudonymKey("k1", uuid.uuid4().bytes * 2), PseudonymKey("k2", uuid.uuid4().bytes * 2)
    value = PseudonymKey.secret_string(old.key_id, old.secret)
    make_client(own, "secretsmanager").create_secret(Name=secret, SecretString=value)
    return RotatingSecret(own, old, new)


ICEBERG_COMPANIES: list[str] = sorted(
    {t.company for t in CATALOG.for_env("staging") if t.spec.table_format == TableFormat.ICEBERG}
)
"""The companies whose staging databases hold Iceberg tables: the only databases the deployed archiver may create
and look up tables in (``infra/stack.py``, ``_lake_writers``), which the permission check holds the tests to."""


def iceberg_topic(endpoints: Endpoints, name: str, **archive: Any) -> Topic:
    """A fresh catalog topic kept as an Iceberg table, with its Glue database (the stack deploys the databases); a
    topic of a company with no Iceberg table in staging is kept in such a company's database, where a deployed
    archiver could create it."""
    topic = fresh(name, **archive)
    update: dict[str, Any] = {"table_format": TableFormat.ICEBERG}
    if topic.company not in ICEBERG_COMPANIES:
        update["database"] = f"{ICEBERG_COMPANIES[0]}_{topic.env}"
    topic = dataclasses.replace(topic, spec=topic.spec.model_copy(update=update))
    make_client(endpoints, "glue").create_database(DatabaseInput={"Name": topic.database})
    return topic


def expected_rows(topic: Topic, counts: Counter[str]) -> int:
    """The rows an archive of the produced ``counts`` holds: the good records, and tombstones when kept."""
    good = sum(v for k, v in counts.items() if k.startswith("schema_version"))
    return good + (counts["tombstones"] if topic.spec.tombstones == "keep" else 0)


OFFSET_COLUMNS = ("_kafka_partition", "_kafka_offset")


def jvm_consumers(spark: SparkSession, group: str, kind: str) -> set[str]:
    """The JVM's Kafka consumer MBeans of ``kind`` (``app-info``: one per consumer whatever its reporters;
    ``consumer-metrics``: only with the JMX reporter) whose client reads for consumer group ``group``."""
    gateway, jvm = spark.sparkContext._gateway, spark.sparkContext._jvm
    assert gateway is not None and jvm is not None
    # through the MBeanServer interface: Py4J cannot reach the platform server's own class (a JDK-internal module)
    interface = jvm.java.lang.Class.forName("javax.management.MBeanServer")
    parameters = gateway.new_array(jvm.java.lang.Class, 2)
    parameters[0] = jvm.java.lang.Class.forName("javax.management.ObjectName")
    parameters[1] = jvm.java.lang.Class.forName("javax.management.QueryExp")
    arguments = gateway.new_array(jvm.java.lang.Object, 2)
    arguments[0] = jvm.javax.management.ObjectName(f"kafka.consumer:type={kind},*")
    server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
    names = interface.getMethod("queryNames", parameters).invoke(server, arguments)
    return {str(n) for n in names if f"consumer-{group}-" in str(n)}
