"""Erasure on the local stack: a by_key topic's tombstones and an explicit subject request across two tables, one
table compacted (its replaced raw files still waiting for their clean-up) and one raw; afterwards no version of
any object in the bucket holds an erased row, every other row is still read through Glue, and each request has
its receipt, with no identifier in clear anywhere under ``erasure/``; a request whose identifier is nowhere gets a
receipt of 0 rows and rewrites nothing; a late object with a row the tombstone precedes is erased by the next run;
a run that crashes after a swap is finished by the next."""

from __future__ import annotations

import dataclasses
import io
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from infra.repo import catalog_dir
from kafkalake.aws import list_objects, make_client, read_json
from kafkalake.catalog import Topic, load_catalog
from kafkalake.erasure import ErasureRequest, RequestStore, new_request
from kafkalake.glue import table_partitions
from kafkalake.layout import DataKey, Partition, erasure_prefix, parse_data_key, parse_s3_uri
from kafkalake.personal import MIN_KEY_BYTES, PseudonymKey
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.settings import Endpoints
from kafkalake.wire import encode
from kafkalake_dev.sandbox import register_complete_partitions, with_bucket
from kafkalake_dev.workload import ensure_topic
from spark_jobs.archiver.topic_run import archive_topic
from spark_jobs.common import Run
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.manifest import ManifestState
from spark_jobs.compaction.work import Knobs
from spark_jobs.erasure.job import Eraser
from spark_jobs.erasure.purge import versions
from tests.crashes import crash_after_saving

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-erasure-tests"
CATALOG = load_catalog(catalog_dir())
SUBJECT = "subject-erase-me-7"
"""The explicit request's identifier: in both tables' ``customer_id``."""
GONE = "key-tombstoned-3"
"""The by_key table's tombstoned key: its rows before the tombstone go, the one after it stays."""
START = datetime(2026, 11, 20, 6, tzinfo=UTC)
RUN = Run("erasure-test", timedelta(seconds=3))


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    """The test bucket (versioned, as the stack's is) and a pseudonym key of its own."""
    found = with_bucket(local_stack, BUCKET)
    s3 = make_client(found, "s3")
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    name = f"kafkalake/erasure-tests/{uuid.uuid4().hex[:8]}"
    secret = PseudonymKey.secret_string("test-1", uuid.uuid4().bytes * (MIN_KEY_BYTES // 16))
    make_client(found, "secretsmanager").create_secret(Name=name, SecretString=secret)
    return dataclasses.replace(found, pseudonym_secret_arn=name)


def copy(env: str, table: str, **spec: Any) -> Topic:
    template = CATALOG.get("customer-updated", "staging")
    update = {"kafka_topic": f"test.erasure.{table}.{env}", "database": f"erase_{env}", "table": table, **spec}
    derived = template.spec.model_copy(update=update)
    return dataclasses.replace(template, name=table.replace("_", "-"), env=env, spec=derived)


def produce(endpoints: Endpoints, topic: Topic, records: list[tuple[str, str | None, int]]) -> None:
    """(key, customer_id or None for a tombstone, hour after START); key ``poison`` values are not Avro."""
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic.kafka_topic, 2)
    schema = topic.schemas[0]
    schema_id = RegistryClient(endpoints.schema_registry_url).register(value_subject(topic.kafka_topic), schema)
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "enable.idempotence": True})
    for index, (key, customer, hour) in enumerate(records):
        at = (START + timedelta(hours=hour, seconds=index)).isoformat()
        record = {"id": f"{topic.table}-{index}", "customer_id": customer, "email": None, "updated_at": at}
        value = None if customer is None else encode(schema_id, schema, record)
        partition = index % 2 if key != GONE else 0
        producer.produce(topic.kafka_topic, key=key.encode(), value=value, partition=partition)
    assert producer.flush(30) == 0


def poison(endpoints: Endpoints, topic: Topic) -> None:
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
    producer.produce(topic.kafka_topic, key=GONE.encode(), value=b"\x07not avro", partition=0)
    assert producer.flush(30) == 0


def archive(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> None:
    """One plan of the topic, with the pseudonym key the archiver job reads for its hashed fields and tombstones."""
    archive_topic(spark, endpoints, topic, run=RUN, key=local_key(endpoints))


def register(endpoints: Endpoints, topic: Topic) -> None:
    s3, glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
    keys = list_objects(s3, endpoints.bucket, topic.prefix.data_prefix(), ".parquet")
    partitions = sorted({parse_data_key(k).partition for k in keys})
    schema = pq.read_schema(io.BytesIO(s3.get_object(Bucket=endpoints.bucket, Key=min(keys))["Body"].read()))
    register_complete_partitions(glue, topic, endpoints.bucket, schema, partitions)


def every_version(endpoints: Endpoints, prefix: str) -> Iterator[dict[str, Any]]:
    """Every row of every version of every object under ``prefix``."""
    s3 = make_client(endpoints, "s3")
    for version in versions(s3, endpoints.bucket, prefix):
        if version["Marker"]:
            continue
        body = s3.get_object(Bucket=endpoints.bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"]
        yield from pq.read_table(io.BytesIO(body.read())).to_pylist()


def through_glue(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> dict[tuple[int, int], str]:
    """What a reader sees: every row at the locations Glue holds, by (Kafka partition, offset)."""
    rows: dict[tuple[int, int], str] = {}
    for partition in table_partitions(make_client(endpoints, "glue"), topic.database, topic.table) or []:
        location = partition["StorageDescriptor"]["Location"].replace("s3://", "s3a://")
        for row in spark.read.parquet(location).collect():
            found = row.asDict(recursive=True)
            rows[(found["_kafka_partition"], found["_kafka_offset"])] = json.dumps(found, default=str, sort_keys=True)
    return rows


ERASED = {"customers_a": {SUBJECT, "person-x", "person-y"}, "customers_b": {SUBJECT}}
"""Per table, the customers whose rows go: the subject, and (by_key) the two records keyed GONE before its tombstone."""


@dataclass(frozen=True)
class Scenario:
    env: str
    keyed: Topic
    fields: Topic
    store: RequestStore
    tombstones: ErasureRequest
    explicit: ErasureRequest
    before: dict[str, dict[tuple[int, int], str]]

    def eraser(self, spark: SparkSession, endpoints: Endpoints) -> Eraser:
        return Eraser(spark, endpoints, self.env, [self.keyed, self.fields], Knobs(grace_period=timedelta(0)), run=RUN)


def scenario(spark: SparkSession, endpoints: Endpoints) -> Scenario:
    """Two tables: a by_key one (tombstoned key, a quarantined record of it) compacted with its replaced raw files
    not yet cleaned up, one by subject field only, raw; the archiver's tombstone request and an explicit one."""
    env = f"e{uuid.uuid4().hex[:8]}"
    keyed = copy(env, "customers_a", erasure="by_key", subject_fields=("customer_id",))
    fields = copy(env, "customers_b", subject_fields=("customer_id",))
    people = [f"person-{i}" for i in range(6)]
    records = [(p, p, hour) for hour in (0, 1) for p in people]
    produce(endpoints, keyed, [*records, (GONE, "person-x", 0), (SUBJECT, SUBJECT, 1), (GONE, "person-y", 1)])
    poison(endpoints, keyed)  # quarantined, keyed GONE: erased too
    produce(endpoints, keyed, [(GONE, None, 1), (GONE, "person-z", 1)])  # the tombstone, then a later record
    produce(endpoints, fields, [*records, ("any", SUBJECT, 0), ("other", SUBJECT, 1)])
    for topic in (keyed, fields):
        archive(spark, endpoints, topic)
        register(endpoints, topic)
    store = RequestStore(make_client(endpoints, "s3"), endpoints.bucket, env)
    [tombstones], _ = store.requests()  # recorded by the archiver: one per plan
    assert [(s.kafka_partition, s.before_offset is not None) for s in tombstones.subjects] == [(0, True)]
    compacted = Compactor(spark, endpoints, [keyed], Knobs(min_input_files=1, grace_period=timedelta(0)), run=RUN)
    assert all(r.action != "failed" for r in compacted.run())
    before = {t.table: through_glue(spark, endpoints, t) for t in (keyed, fields)}
    key = local_key(endpoints)
    explicit = new_request([key.digest(SUBJECT)], [], 1, key.key_id, datetime.now(UTC))
    store.put(explicit)
    return Scenario(env, keyed, fields, store, tombstones, explicit, before)


def local_key(endpoints: Endpoints) -> PseudonymKey:
    """The local stack's pseudonym key, as the jobs read it."""
    secret = make_client(endpoints, "secretsmanager").get_secret_value(SecretId=endpoints.pseudonym_secret_arn)
    return PseudonymKey.from_secret(secret["SecretString"], "test")


def glue_locations(endpoints: Endpoints, topic: Topic) -> list[str]:
    partitions = table_partitions(make_client(endpoints, "glue"), topic.database, topic.table) or []
    return sorted(p["StorageDescriptor"]["Location"] for p in partitions)


def assert_erased(spark: SparkSession, endpoints: Endpoints, case: Scenario) -> None:
    """No version of any object holds an erased row, every other row reads as before, the receipts are right and
    nothing under erasure/ holds an identifier in clear."""
    for topic in (case.keyed, case.fields):
        gone = ERASED[topic.table]
        left = [r for r in every_version(endpoints, topic.prefix.data_prefix()) if r.get("customer_id") in gone]
        assert left == [], f"{topic.table}: erased rows still in some object version"
        before = case.before[topic.table]
        expected = {k: v for k, v in before.items() if json.loads(v)["customer_id"] not in gone}
        assert len(expected) == len(before) - {"customers_a": 3, "customers_b": 2}[topic.table]
        assert through_glue(spark, endpoints, topic) == expected
    quarantined = list(every_version(endpoints, case.keyed.prefix.quarantine_prefix()))
    assert [r for r in quarantined if r["_key"] == GONE.encode()] == []
    receipts = case.store.receipts()
    by_request = {r: {t: v["rows_removed"] for t, v in receipts[r]["tables"].items()} for r in receipts}
    table_a, table_b = f"{case.keyed.database}.customers_a", f"{case.fields.database}.customers_b"
    assert by_request[case.explicit.request_id] == {table_a: 1, table_b: 2}
    assert by_request[case.tombstones.request_id] == {table_a: 2}
    assert receipts[case.tombstones.request_id]["tables"][table_a]["quarantine_rows_removed"] == 1
    assert receipts[case.explicit.request_id]["versions_deleted"] > 0
    s3 = make_client(endpoints, "s3")
    for name in list_objects(s3, endpoints.bucket, erasure_prefix(case.env)):
        text = s3.get_object(Bucket=endpoints.bucket, Key=name)["Body"].read().decode()
        assert SUBJECT not in text and GONE not in text, name


def late_object(endpoints: Endpoints, case: Scenario) -> None:
    """A raw object landing after the erasure (as a redone archiver plan's would): a row keyed GONE at the offset of
    an erased one, before the tombstone, in the compacted table's first hour."""
    s3, glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
    partition = Partition(1, START.date(), START.hour)
    location = glue.get_partition(
        DatabaseName=case.keyed.database, TableName=case.keyed.table, PartitionValues=partition.values()
    )["Partition"]["StorageDescriptor"]["Location"]
    [output] = list_objects(s3, endpoints.bucket, parse_s3_uri(location).key, ".parquet")
    table = pq.read_table(io.BytesIO(s3.get_object(Bucket=endpoints.bucket, Key=output)["Body"].read()))
    row = table.filter(pc.equal(table["customer_id"], "person-0"))
    [offset] = [o for (p, o), v in case.before["customers_a"].items() if p == 0 and '"person-x"' in v]
    for name, value in (("customer_id", pa.array(["person-late"])), ("_key", pa.array([GONE.encode()]))):
        row = row.set_column(row.schema.get_field_index(name), name, value)
    row = row.set_column(row.schema.get_field_index("_kafka_offset"), "_kafka_offset", pa.array([offset], pa.int64()))
    body = io.BytesIO()
    pq.write_table(row, body)
    s3.put_object(
        Bucket=endpoints.bucket,
        Key=DataKey(case.keyed.prefix, partition, 0, offset, offset).key(),
        Body=body.getvalue(),
    )


def test_tombstones_and_a_subject_request_erase_every_copy_and_nothing_else(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    case = scenario(spark, endpoints)
    outcome = case.eraser(spark, endpoints).run()
    assert outcome.failed == {}
    assert sorted(outcome.receipts) == sorted([case.tombstones.request_id, case.explicit.request_id])
    assert_erased(spark, endpoints, case)
    again = case.eraser(spark, endpoints).run()
    assert (again.receipts, again.failed, again.pending) == ([], {}, 0)
    lease = read_json(make_client(endpoints, "s3"), endpoints.bucket, f"{erasure_prefix(case.env)}lease.json")
    assert (lease or {})["work"] is None
    key = local_key(endpoints)
    absent = new_request([key.digest("nobody-at-all")], [], 1, key.key_id, datetime.now(UTC))
    case.store.put(absent)
    locations = {t.table: glue_locations(endpoints, t) for t in (case.keyed, case.fields)}
    nobody = case.eraser(spark, endpoints).run()
    assert (nobody.receipts, nobody.failed) == ([absent.request_id], {})
    receipt = case.store.receipts()[absent.request_id]
    assert sum(t["rows_removed"] + t["quarantine_rows_removed"] for t in receipt["tables"].values()) == 0
    assert [p for t in receipt["tables"].values() for p in t["partitions"]] == []
    assert (receipt["objects_deleted"], receipt["versions_deleted"]) == ([], 0)
    assert {t.table: glue_locations(endpoints, t) for t in (case.keyed, case.fields)} == locations, "nothing rewritten"
    late_object(endpoints, case)
    reopened = case.eraser(spark, endpoints).run()
    assert (reopened.receipts, reopened.failed) == ([case.tombstones.request_id], {})
    rows = list(every_version(endpoints, case.keyed.prefix.data_prefix()))
    assert [r for r in rows if r["customer_id"] == "person-late"] == []
    assert {r["customer_id"] for r in rows} >= {"person-z", "person-0"}, "rows not requested stay"
    receipt = case.store.receipts()[case.tombstones.request_id]["tables"][f"{case.keyed.database}.customers_a"]
    assert receipt["rows_removed"] == 3, "the receipt adds the late row"


def test_a_run_that_crashes_after_a_swap_is_finished_by_the_next(
    spark: SparkSession, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = scenario(spark, endpoints)
    with monkeypatch.context() as patch:
        crash_after_saving(patch, ManifestState.SWAPPED)
        crashed = case.eraser(spark, endpoints).run()
    assert crashed.receipts == []
    assert set(crashed.failed) == {f"{case.keyed.database}.customers_a", f"{case.fields.database}.customers_b"}
    finished = case.eraser(spark, endpoints).run()
    assert finished.failed == {}
    assert sorted(finished.receipts) == sorted([case.tombstones.request_id, case.explicit.request_id])
    assert_erased(spark, endpoints, case)
