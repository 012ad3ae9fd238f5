"""Erasure on the local stack: a by_key topic's tombstones and an explicit subject request across two tables, one
table compacted (its replaced raw files still waiting for their clean-up) and one raw; afterwards no version of
any object in the bucket holds an erased row, every other row is still read through Glue, and each request has
its receipt, with no identifier in clear anywhere under ``erasure/``; a request whose identifier is nowhere gets a
receipt of 0 rows and rewrites nothing; a late object with a row the tombstone precedes is erased by the next run;
a run that crashes after a swap is finished by the next; `kafkalake erase run` killed with SIGKILL at random
moments, then run once more, ends in the same state as one uninterrupted run; a by_key table whose archive hashes
its key holds its digest only, which its tombstone erases by, also the rows hashed under the key a rotation
replaced. Past 400 lines: the scenarios share the catalog, the
producer and the checks of every object version above."""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from infra.repo import catalog_dir
from kafkalake.aws import list_objects, make_client, read_json
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import ErasureRequest, RequestStore, new_request, receipt_token
from kafkalake.glue import table_partitions
from kafkalake.layout import DataKey, Partition, erasure_prefix, parse_data_key
from kafkalake.personal import PseudonymKey, load_keys
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake.topic_spec import TableFormat
from kafkalake.wire import encode
from kafkalake_dev.local.provision import ensure_pseudonym_key
from kafkalake_dev.local.sandbox import environment_file, register_complete_partitions, with_bucket
from kafkalake_dev.local.workload import ensure_topic
from spark_jobs.common import Run
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.manifest import ManifestState
from spark_jobs.compaction.work import Knobs
from spark_jobs.erasure.job import Eraser
from spark_jobs.erasure.purge import versions
from tests.crashes import crash_after_saving, kill_on_progress, random_kills
from tests.integration.archive_helpers import archive_topic, rotating_secret
from tests.integration.lake_files import version_tables

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-erasure-tests"
SUBJECT = "subject-erase-me-7"
"""The explicit request's identifier: in both tables' ``customer_id``."""
GONE = "key-tombstoned-3"
"""The by_key table's tombstoned key: its rows before the tombstone go, the one after it stays."""
START = datetime(2026, 11, 20, 6, tzinfo=UTC)
LEASE_TTL_SECONDS = 3
RUN = Run("erasure-test", timedelta(seconds=LEASE_TTL_SECONDS))
KILL_STEPS = range(1, 12)
"""Where kills land, in durable steps (see the SIGKILL test) into their own run, up to a second later: one
uninterrupted run of the scenario made 50 (its lease taken, renewed every second and updated with the batch's
progress, the two tables' compaction leases, four partitions' manifests through their states, two receipts), and a
resumed run has only what the killed ones left, so three kills this early each fall within the run they interrupt
(drawn up to 25 steps, only one kill of three landed in one run of five)."""


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    """The test bucket (versioned, as every local lake bucket: ``with_bucket``); the local stack's pseudonym key,
    which ``kafkalake erase run`` reads too."""
    found = with_bucket(local_stack, BUCKET)
    ensure_pseudonym_key(make_client(found, "secretsmanager"))
    return found


def write_catalog(
    folder: Path, env: str, archive: dict[str, str] | None = None, table_format: TableFormat = TableFormat.HIVE
) -> list[Topic]:
    """A catalog folder of the environment's two tables, each the demo's ``customer-updated`` (its schema, its
    hashed ``email``, its key stored; or the archive policy ``archive``) under a name, Kafka topic and database of
    its own, kept as ``table_format``: ``customers_a`` erased by key and by ``customer_id``, its tombstones kept as
    a delete log, ``customers_b`` by ``customer_id`` only; the tables as the jobs load them."""
    source = catalog_dir() / "globex" / "crm" / "staging"
    spec = yaml.safe_load((source / "customer-updated.yaml").read_text())
    tables = {"customers_a": {"erasure": "by_key", "tombstones": "keep"}, "customers_b": {"erasure": "none"}}
    topics = folder / "globex" / "crm" / env
    topics.mkdir(parents=True)
    shutil.copy(catalog_dir() / "defaults.yaml", folder / "defaults.yaml")
    for table, erasure in tables.items():
        name = table.replace("_", "-")
        own = {
            "kafka_topic": f"test.erasure.{table}.{env}",
            "database": f"erase_{env}",
            "table": table,
            "table_format": str(table_format),
        }
        policy = {"archive": archive} if archive else {}
        (topics / f"{name}.yaml").write_text(yaml.safe_dump({**spec, **own, **erasure, **policy}))
        shutil.copy(source / "customer-updated.v1.avsc", topics / f"{name}.v1.avsc")
    loaded = load_topic_catalog(folder).for_env(env)
    return [next(t for t in loaded if t.table == table) for table in tables]


def produce(
    endpoints: Endpoints,
    topic: Topic,
    records: list[tuple[str, str | None, int]],
    headers: list[tuple[str, str | bytes | None]] | None = None,
) -> None:
    """(key, customer_id or None for a tombstone, hour after START), each with ``headers``."""
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic.kafka_topic, 2)
    schema = topic.schemas[0]
    schema_id = RegistryClient(endpoints.schema_registry_url).register(value_subject(topic.kafka_topic), schema)
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "enable.idempotence": True})
    for index, (key, customer, hour) in enumerate(records):
        at = (START + timedelta(hours=hour, seconds=index)).isoformat()
        record = {"id": f"{topic.table}-{index}", "customer_id": customer, "email": None, "updated_at": at}
        value = None if customer is None else encode(schema_id, schema, record)
        partition = index % 2 if key != GONE else 0
        producer.produce(topic.kafka_topic, key=key.encode(), value=value, partition=partition, headers=headers)
    assert producer.flush(30) == 0


def poison(endpoints: Endpoints, topic: Topic, value: bytes = b"\x07not avro") -> None:
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
    producer.produce(topic.kafka_topic, key=GONE.encode(), value=value, partition=0)
    assert producer.flush(30) == 0


def archive(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> None:
    """One plan of the topic, with the pseudonym keys the archiver job reads (the secret's current and previous) for
    its hashed fields and tombstones."""
    keys = load_keys(make_client(endpoints, "secretsmanager"), endpoints.pseudonym_secret_arn)
    archive_topic(spark, endpoints, topic, run=RUN, keys=keys)


def register(endpoints: Endpoints, topic: Topic) -> None:
    s3, glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
    keys = list_objects(s3, endpoints.bucket, topic.prefix.data_prefix(), ".parquet")
    partitions = sorted({parse_data_key(k).partition for k in keys})
    schema = pq.read_schema(io.BytesIO(s3.get_object(Bucket=endpoints.bucket, Key=min(keys))["Body"].read()))
    register_complete_partitions(glue, topic, endpoints.bucket, schema, partitions)


def every_version(endpoints: Endpoints, prefix: str) -> Iterator[dict[str, Any]]:
    """Every row of every version of every object under ``prefix``."""
    for _, table in version_tables(make_client(endpoints, "s3"), endpoints.bucket, prefix):
        yield from table.to_pylist()


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


def scenario(spark: SparkSession, endpoints: Endpoints, folder: Path) -> Scenario:
    """Two tables (their catalog written into ``folder``): a by_key one (tombstoned key, a quarantined record of
    it) compacted with its replaced raw files not yet cleaned up, one by subject field only, raw; the archiver's
    tombstone request and an explicit one."""
    env = f"e{uuid.uuid4().hex[:8]}"
    keyed, fields = write_catalog(folder, env)
    people = [f"person-{i}" for i in range(6)]
    records = [(p, p, hour) for hour in (0, 1) for p in people]
    produce(endpoints, keyed, [*records, (GONE, "person-x", 0), (SUBJECT, SUBJECT, 1), (GONE, "person-y", 1)])
    poison(endpoints, keyed)  # quarantined, keyed GONE: erased too
    produce(endpoints, keyed, [(GONE, None, 1), (GONE, "person-z", 1)])  # the tombstone, then a later record
    produce(endpoints, fields, [*records, ("any", SUBJECT, 0), ("other", SUBJECT, 1)])
    poison(endpoints, fields, b"\x07" + SUBJECT.encode())  # undecodable: its subject cannot be read, only seen
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
    rows = list(every_version(endpoints, case.keyed.prefix.data_prefix()))
    assert [r for r in rows if r["_tombstone"]], "the delete log is kept"
    keyed = {r["customer_id"] for r in rows if r["_key"] == GONE.encode()}
    assert keyed == {"person-z"}, "only the record after the tombstone keeps the key; the delete log's row does not"
    quarantined = list(every_version(endpoints, case.keyed.quarantine_prefix()))
    assert [r for r in quarantined if r["_key"] == GONE.encode()] == []
    assert case.fields.quarantine_prefix().startswith("restricted/")
    by_field = list(every_version(endpoints, case.fields.quarantine_prefix()))
    [row] = by_field  # one version left, its offsets and error kept, no raw bytes
    assert row["_error"] == "bad_magic_byte" and not {"_key", "_raw_value"} & set(row)
    receipts = case.store.receipts()
    by_request = {r: {t: v["rows_removed"] for t, v in receipts[r]["tables"].items()} for r in receipts}
    table_a, table_b = f"{case.keyed.database}.customers_a", f"{case.fields.database}.customers_b"
    assert by_request[case.explicit.request_id] == {table_a: 1, table_b: 2}
    assert by_request[case.tombstones.request_id] == {table_a: 2}
    assert receipts[case.tombstones.request_id]["tables"][table_a]["quarantine_rows_removed"] == 1
    assert receipts[case.explicit.request_id]["tables"][table_b]["quarantine_objects_without_raw"] == 1
    assert receipts[case.explicit.request_id]["versions_deleted"] > 0
    digest = local_key(endpoints).digest(SUBJECT)  # the subject's pseudonym: a receipt names it by a token
    assert receipts[case.explicit.request_id]["subjects"] == [receipt_token(digest)] != [digest]
    s3 = make_client(endpoints, "s3")
    for name in list_objects(s3, endpoints.bucket, erasure_prefix(case.env)):
        body = s3.get_object(Bucket=endpoints.bucket, Key=name)["Body"].read()  # JSON, and the index's Parquet
        assert SUBJECT.encode() not in body and GONE.encode() not in body, name


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
    spark: SparkSession, endpoints: Endpoints, tmp_path: Path
) -> None:
    case = scenario(spark, endpoints, tmp_path / "catalog")
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


def test_a_hashed_key_is_stored_as_its_digest_and_its_tombstone_erases_its_rows(
    spark: SparkSession, endpoints: Endpoints, tmp_path: Path
) -> None:
    """``archive: {key: hmac, headers: hmac}`` on a by_key table: no object holds the clear key, its rows and its
    quarantined record hold its digest under the local key (with the key id), each header its value's digest; the
    tombstone's request asks for that same digest, and the erasure removes the key's earlier rows and quarantined
    record, keeping the record after the tombstone."""
    env = f"h{uuid.uuid4().hex[:8]}"
    keyed, _ = write_catalog(tmp_path / "catalog", env, archive={"key": "hmac", "headers": "hmac"})
    key = local_key(endpoints)
    digest = key.digest(GONE)
    records = [(p, p, 0) for p in ("person-0", "person-1")]
    origin: list[tuple[str, str | bytes | None]] = [("origin", b"crm-eu")]
    produce(endpoints, keyed, [*records, (GONE, "person-x", 0), (GONE, "person-y", 1)], origin)
    poison(endpoints, keyed)  # quarantined, keyed GONE
    produce(endpoints, keyed, [(GONE, None, 1), (GONE, "person-z", 1)], origin)  # the tombstone, then a later record
    archive(spark, endpoints, keyed)
    register(endpoints, keyed)
    s3 = make_client(endpoints, "s3")
    prefixes = (keyed.prefix.data_prefix(), keyed.quarantine_prefix())
    for version in (v for prefix in prefixes for v in versions(s3, endpoints.bucket, prefix) if not v["Marker"]):
        body = s3.get_object(Bucket=endpoints.bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"]
        assert GONE.encode() not in body.read(), version["Key"]
    rows = list(every_version(endpoints, keyed.prefix.data_prefix()))
    assert {r["_key"] for r in rows if r["customer_id"] in ERASED["customers_a"] | {"person-z"}} == {digest}
    assert {r["_key"] for r in rows if r["customer_id"] == "person-0"} == {key.digest("person-0")}
    assert {r["_pseudonym_key_id"] for r in rows} == {key.key_id}
    assert [h for r in rows if not r["_tombstone"] for h in r["_headers"]] == [
        {"key": "origin", "value": key.digest("crm-eu")}
    ] * 5
    assert [r["_key"] for r in every_version(endpoints, keyed.quarantine_prefix())] == [digest]
    store = RequestStore(s3, endpoints.bucket, env)
    [tombstones], _ = store.requests()
    assert [s.digest for s in tombstones.subjects] == [digest], "the request asks for the digest the rows hold"
    eraser = Eraser(spark, endpoints, env, [keyed], Knobs(grace_period=timedelta(0)), run=RUN)
    outcome = eraser.run()
    assert (outcome.receipts, outcome.failed) == ([tombstones.request_id], {})
    left = list(every_version(endpoints, keyed.prefix.data_prefix()))
    assert {r["customer_id"] for r in left if not r["_tombstone"]} == {"person-0", "person-1", "person-z"}
    assert [r for r in every_version(endpoints, keyed.quarantine_prefix()) if r["_key"] == digest] == []
    receipt = store.receipts()[tombstones.request_id]["tables"][f"{keyed.database}.{keyed.table}"]
    assert (receipt["rows_removed"], receipt["quarantine_rows_removed"]) == (2, 1)


def test_after_a_key_rotation_a_hashed_keys_tombstone_erases_its_rows_hashed_under_the_earlier_key(
    spark: SparkSession, endpoints: Endpoints, tmp_path: Path
) -> None:
    """``archive: {key: hmac}`` on a by_key table whose own secret is rotated between two plans: the rows of the first
    hold their key's digest under k1; the tombstone, archived under k2, asks for its key's digest under k2 and
    (``earlier_keys``) under k1, from the clear key, which no object, request or receipt holds; the erasure removes
    the k1 rows and quarantined record before it and keeps the record after it (k2)."""
    suffix = uuid.uuid4().hex[:8]
    rotating = rotating_secret(endpoints, suffix)
    own, old, new = rotating.endpoints, rotating.old, rotating.new
    env = f"t{suffix}"
    keyed, _ = write_catalog(tmp_path / "catalog", env, archive={"key": "hmac"})
    produce(endpoints, keyed, [("person-0", "person-0", 0), (GONE, "person-x", 0), (GONE, "person-y", 1)])
    poison(endpoints, keyed)  # quarantined, keyed GONE, under k1
    archive(spark, own, keyed)
    rotating.rotate()
    produce(endpoints, keyed, [(GONE, None, 1), (GONE, "person-z", 1)])  # the tombstone, then a later record
    archive(spark, own, keyed)
    register(endpoints, keyed)
    rows = list(every_version(endpoints, keyed.prefix.data_prefix()))
    assert len(rows) == 5 and {(r["customer_id"], r["_key"], r["_pseudonym_key_id"]) for r in rows} == {
        (None, None, new.key_id),  # the delete log's row: no key, clear or hashed
        ("person-0", old.digest("person-0"), old.key_id),
        ("person-x", old.digest(GONE), old.key_id),
        ("person-y", old.digest(GONE), old.key_id),
        ("person-z", new.digest(GONE), new.key_id),
    }
    s3 = make_client(endpoints, "s3")
    store = RequestStore(s3, endpoints.bucket, env)
    [tombstones], _ = store.requests()
    assert tombstones.key_id == new.key_id
    assert [(s.digest, s.earlier_keys) for s in tombstones.subjects] == [(new.digest(GONE), {"k1": old.digest(GONE)})]
    outcome = Eraser(spark, own, env, [keyed], Knobs(grace_period=timedelta(0)), run=RUN).run()
    assert (outcome.receipts, outcome.failed) == ([tombstones.request_id], {})
    left = list(every_version(endpoints, keyed.prefix.data_prefix()))
    assert {r["customer_id"] for r in left if not r["_tombstone"]} == {"person-0", "person-z"}
    assert [r for r in every_version(endpoints, keyed.quarantine_prefix()) if r["_key"] == old.digest(GONE)] == []
    receipt = store.receipts()[tombstones.request_id]
    table = receipt["tables"][f"{keyed.database}.{keyed.table}"]
    assert (table["rows_removed"], table["quarantine_rows_removed"]) == (2, 1)
    assert receipt["subjects"] == [receipt_token(new.digest(GONE))]
    prefixes = (keyed.prefix.data_prefix(), keyed.quarantine_prefix(), erasure_prefix(env))
    for version in (v for prefix in prefixes for v in versions(s3, endpoints.bucket, prefix) if not v["Marker"]):
        body = s3.get_object(Bucket=endpoints.bucket, Key=version["Key"], VersionId=version["VersionId"])["Body"]
        assert GONE.encode() not in body.read(), version["Key"]


def test_a_run_that_crashes_after_a_swap_is_finished_by_the_next(
    spark: SparkSession, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    case = scenario(spark, endpoints, tmp_path / "catalog")
    with monkeypatch.context() as patch:
        crash_after_saving(patch, ManifestState.SWAPPED)
        crashed = case.eraser(spark, endpoints).run()
    assert crashed.receipts == []
    assert set(crashed.failed) == {f"{case.keyed.database}.customers_a", f"{case.fields.database}.customers_b"}
    finished = case.eraser(spark, endpoints).run()
    assert finished.failed == {}
    assert sorted(finished.receipts) == sorted([case.tombstones.request_id, case.explicit.request_id])
    assert_erased(spark, endpoints, case)


def test_sigkill_at_random_moments_then_a_clean_run(spark: SparkSession, endpoints: Endpoints, tmp_path: Path) -> None:
    """`kafkalake erase run` over the scenario is killed with SIGKILL (its whole process group) up to three times (until
    a run ends by itself, having done all that was left), each at a random point of its own progress, then left to
    finish: the same end state as one uninterrupted run. Replaced objects go as soon as a run allows (--grace-minutes
    0), so kills land while batching, rewriting, verifying, swapping, purging versions, rewriting quarantine and writing
    receipts."""
    case = scenario(spark, endpoints, tmp_path / "catalog")
    _, environments = environment_file(tmp_path, case.env, bucket=endpoints.bucket)
    kafkalake = str(Path(sys.executable).parent / "kafkalake")
    command = [kafkalake, "erase", "run", "--env", case.env, "--catalog", str(tmp_path / "catalog")]
    command += ["--grace-minutes", "0", "--lease-ttl-seconds", str(LEASE_TTL_SECONDS)]
    environ = {**os.environ, "KAFKALAKE_ENVIRONMENTS": str(environments)}
    s3 = make_client(endpoints, "s3")
    prefixes = [erasure_prefix(case.env), *(t.prefix.state_prefix() for t in (case.keyed, case.fields))]
    # a step is one durable write of a run's own state (a lease taken, renewed or updated, a partition's manifest
    # moving on, a receipt): every write is a new object version in the versioned bucket
    # (the subject indexes' segments are Spark's many files, not steps of the run's own state: left out)
    indexes = tuple(t.prefix.subject_index_prefix() for t in (case.keyed, case.fields))
    steps = lambda: sum(  # noqa: E731
        1 for p in prefixes for v in versions(s3, endpoints.bucket, p) if not v["Key"].startswith(indexes)
    )
    seed = random.randrange(1_000_000)
    kills = random_kills(seed, KILL_STEPS, most_delay=1.0)
    killed = kill_on_progress(command, environ, steps, kills, lease_ttl=LEASE_TTL_SECONDS)
    assert killed >= 1, f"seed {seed}: none of the kills {kills} found the erasure job still running"
    final = subprocess.run(command, check=False, env=environ, capture_output=True, text=True)
    assert final.returncode == 0, f"seed {seed}, kills {kills}: {final.stdout[-3000:]}{final.stderr[-3000:]}"
    assert sorted(case.store.receipts()) == sorted([case.tombstones.request_id, case.explicit.request_id]), seed
    assert_erased(spark, endpoints, case)
    lease = read_json(s3, endpoints.bucket, f"{erasure_prefix(case.env)}lease.json")
    assert (lease or {})["work"] is None, f"seed {seed}, kills {kills}: the batch was never finished: {lease}"
