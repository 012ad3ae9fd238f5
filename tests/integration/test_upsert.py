"""Upsert tables (``mode: upsert``) on the local stack: a Debezium-shaped change stream of a ``customers`` table
(Avro values and keys in the real registry, three Kafka partitions) with snapshot reads, inserts, updates, deletes and
tombstones, archived plan by plan into an Iceberg table that Spark SQL and pyiceberg read as exactly the state the
stream produces; a redo after the commit applies nothing twice; a ``version_field`` drops a replayed older change
against the row the table holds."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import RequestStore, new_request
from kafkalake.iceberg import PLAN_PROPERTY, table_catalog
from kafkalake.jobspec import ICEBERG_CATALOG
from kafkalake.personal import UPSERT_KEY_COLUMN
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TopicSpec
from kafkalake_dev.local.provision import ensure_pseudonym_key
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.trino import ICEBERG_CATALOG as TRINO_ICEBERG
from kafkalake_dev.local.trino import TrinoClient, trino_service
from spark_jobs.archiver import topic_run
from spark_jobs.archiver.summary import Summary
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.table_maintenance import TableCompaction
from spark_jobs.compaction.work import Action, Knobs
from spark_jobs.erasure.job import Eraser
from tests.crashes import InjectedCrash, crash
from tests.integration.archive_helpers import (
    archive_topic,
    audit_problems,
    committed_and_end,
    iceberg_topic,
    keyring,
    table_rows,
)
from tests.integration.debezium_stream import ENVELOPE, ENVELOPE_V2, ChangeStream, customer
from tests.integration.lake_files import traces
from tests.integration.test_erasure import RUN, local_key

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-upsert-tests"


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, BUCKET)


def customers_topic(endpoints: Endpoints, schemas: tuple[str, ...] = (json.dumps(ENVELOPE),), **spec: Any) -> Topic:
    """A fresh Iceberg topic of Debezium change events of a ``customers`` table, kept as its current state, its
    emails hashed wherever they appear (``before`` and ``after``)."""
    topic = iceberg_topic(endpoints, "customer-updated", max_records_per_run=70)
    settings = topic.spec.model_dump(exclude_unset=True) | {
        "value_format": "avro",
        "key_format": "avro",
        "archive": {**topic.spec.archive.model_dump(), "key": "clear", "max_records_per_run": 70},
        "time_fields": (),
        "pii": {"after.email": "hmac", "before.email": "hmac"},
        "subject_fields": (),
        "erasure": "none",
        "mode": "upsert",
        "envelope": "debezium",
        "key_fields": ("id",),
    }
    for told in ("include_key", "table_inference", "crawler_name"):
        settings.pop(told, None)
    settings["archive"].pop("include_key", None)
    return dataclasses.replace(topic, spec=TopicSpec.model_validate(settings | spec), schemas=schemas)


def archive_all(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> list[Summary]:
    """Plans until the topic is caught up."""
    plans = []
    while (summary := archive_topic(spark, endpoints, topic, keys=keyring(endpoints))).read:
        plans.append(summary)
    return plans


def table_state(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> tuple[dict[int, Any], dict[int, Any]]:
    """The table's rows (id → (name, tier)) as Spark SQL and pyiceberg read them; each fails on a duplicate key."""
    by_spark: dict[int, Any] = {}
    for row in table_rows(spark, endpoints, topic).collect():
        assert row["id"] not in by_spark, f"key {row['id']} twice"
        by_spark[row["id"]] = (row["name"], row["tier"])
    by_pyiceberg: dict[int, Any] = {}
    scanned = table_catalog(endpoints).load_table((topic.database, topic.table)).scan().to_arrow()
    for row in scanned.select(["id", "name", "tier"]).to_pylist():
        assert row["id"] not in by_pyiceberg, f"key {row['id']} twice"
        by_pyiceberg[row["id"]] = (row["name"], row["tier"])
    return by_spark, by_pyiceberg


@pytest.fixture(scope="module")
def trino(endpoints: Endpoints) -> Iterator[TrinoClient]:
    """Trino (the interop reader, ``make interop``) for the module's tests, its Iceberg catalog on the local Glue."""
    server = trino_service(endpoints)
    server.start()
    try:
        yield TrinoClient()
    finally:
        server.stop()


def trino_state(trino: TrinoClient, topic: Topic) -> dict[int, Any]:
    """The table's rows (id → (name, tier)) as Trino reads them through its Iceberg catalog; fails on a key twice."""
    table = f"{TRINO_ICEBERG}.{topic.database}.{topic.table}"
    trino.count(f"SELECT count(*) FROM {table}")  # waits while the server registers its worker
    found: dict[int, Any] = {}
    for key, name, tier in trino.rows(f"SELECT id, name, tier FROM {table}"):
        assert key not in found, f"key {key} twice"
        found[key] = (name, tier)
    return found


def expected(stream: ChangeStream) -> dict[int, Any]:
    return {k: (r["name"], r["tier"]) for k, r in stream.state.items()}


def plan_snapshots(endpoints: Endpoints, topic: Topic) -> list[str]:
    table = table_catalog(endpoints).load_table((topic.database, topic.table))
    summaries = [s.summary.additional_properties for s in table.snapshots() if s.summary]
    return [s[PLAN_PROPERTY] for s in summaries if PLAN_PROPERTY in s]


def erase_subject(spark: SparkSession, endpoints: Endpoints, topic: Topic, subject: str) -> dict[str, Any]:
    """Record a request for ``subject`` (hashed under the local key), run the erasure job with no grace period, and
    return the request's receipt; the run must fail no table."""
    pseudonyms = local_key(endpoints)
    store = RequestStore(make_client(endpoints, "s3"), endpoints.bucket, topic.env)
    request = new_request([pseudonyms.digest(subject)], [], 1, pseudonyms.key_id, datetime.now(UTC))
    store.put(request)
    outcome = Eraser(spark, endpoints, topic.env, [topic], Knobs(grace_period=timedelta(0)), run=RUN).run()
    assert (outcome.failed, outcome.receipts) == ({}, [request.request_id])
    return store.receipts()[request.request_id]


def test_a_debezium_stream_is_kept_as_exactly_its_current_state_by_every_reader(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = customers_topic(endpoints)
    stream = ChangeStream(topic, endpoints)
    for key in range(1, 11):  # the connector's snapshot
        stream.send(key, "r", customer(key, 0))
    stream.random_changes(260, seed=53)
    plans = archive_all(spark, endpoints, topic)
    assert len(plans) >= 3 and sum(p.read for p in plans) == stream.produced

    by_spark, by_pyiceberg = table_state(spark, endpoints, topic)
    assert by_spark == expected(stream)
    assert by_pyiceberg == by_spark
    assert len(plan_snapshots(endpoints, topic)) == len(plans)
    rows = table_rows(spark, endpoints, topic)
    assert {"_op", "_source_ts_ms", "_source_lsn", UPSERT_KEY_COLUMN, "_key"} <= set(rows.columns)
    assert "before" not in rows.columns and "after" not in rows.columns
    emails = [r["email"] for r in rows.select("email").collect()]
    assert emails and not any("@" in e for e in emails)  # hashed, as the catalog's after.email says
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends
    assert audit_problems(endpoints, topic) == []

    stream.random_changes(80, seed=54)  # more changes on the same keys, later runs
    archive_all(spark, endpoints, topic)
    assert table_state(spark, endpoints, topic) == (expected(stream), expected(stream))


def test_a_redo_after_the_table_commit_applies_the_plan_once(
    spark: SparkSession, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = customers_topic(endpoints)
    stream = ChangeStream(topic, endpoints)
    stream.random_changes(60, seed=7)
    with monkeypatch.context() as patch:
        patch.setattr(topic_run, "receipt", crash("after_table_commit"))
        with pytest.raises(InjectedCrash):
            archive_topic(spark, endpoints, topic, keys=keyring(endpoints))
    [plan] = plan_snapshots(endpoints, topic)
    # Newer changes of the same keys are produced before the redo: re-applying the first plan after them would
    # bring back rows the second plan changed or deleted.
    stream.random_changes(60, seed=8)
    redone = archive_topic(spark, endpoints, topic, keys=keyring(endpoints))
    assert redone.redone_plan
    archive_all(spark, endpoints, topic)
    assert plan_snapshots(endpoints, topic).count(plan) == 1
    assert table_state(spark, endpoints, topic) == (expected(stream), expected(stream))
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends


def test_a_version_field_keeps_the_newer_row_against_a_replay_in_a_later_plan_and_a_rekeyed_key(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = customers_topic(endpoints, version_field="tier")
    stream = ChangeStream(topic, endpoints)
    stream.send(1, "c", customer(1, 5))
    stream.send(2, "c", customer(2, 5))
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    stream.send(1, "u", customer(1, 3))  # a replay of an older version: the table's tier 5 stays
    stream.send(2, "u", customer(2, 6), partition=0)  # re-keyed to another partition, newer: wins
    stream.state[1] = customer(1, 5)
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    assert table_state(spark, endpoints, topic) == (expected(stream), expected(stream))


def test_compaction_and_an_erasure_by_subject_keep_the_state_and_leave_no_trace_of_the_subject(
    spark: SparkSession, endpoints: Endpoints, trino: TrinoClient
) -> None:
    """Spark SQL, pyiceberg and Trino read exactly the stream's state before and after compaction and after an
    erasure. The compactor rewrites the state table's small files in every hour (none closes) and removes the applied
    change objects; an erasure of one customer (subject field ``id``) deletes its row in one commit, then no version
    of any object under the table's location (data and change objects, manifests, metadata) holds its rows."""
    ensure_pseudonym_key(make_client(endpoints, "secretsmanager"))
    topic = customers_topic(endpoints, subject_fields=("id",))
    stream = ChangeStream(topic, endpoints)
    for key in range(1, 21):
        stream.send(key, "c", customer(key, 1))
    stream.random_changes(200, seed=11)
    stream.send(7, "u", customer(7, 2)) if 7 in stream.state else stream.send(7, "c", customer(7, 2))
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    s3 = make_client(endpoints, "s3")
    changes = [k for k in list_objects(s3, endpoints.bucket, topic.prefix.data_prefix()) if "/schema_version=" in k]
    assert changes, "the plans' change objects are under the table's location"
    files_before = data_file_count(spark, topic)
    assert files_before >= COMPACTION.min_input_files
    assert trino_state(trino, topic) == expected(stream)

    now = datetime.now(UTC) + timedelta(seconds=2)
    [result] = Compactor(spark, endpoints, [topic], COMPACTION, now=lambda: now).run()
    assert isinstance(result, TableCompaction) and result.action == Action.COMPACTED, result
    assert data_file_count(spark, topic) < files_before
    assert table_state(spark, endpoints, topic) == (expected(stream), expected(stream))
    left = set(list_objects(s3, endpoints.bucket, topic.prefix.data_prefix()))
    assert not left & set(changes), "applied change objects are orphans the compactor removes"
    assert trino_state(trino, topic) == expected(stream)

    stream.send(3, "u", customer(3, 9))  # a plan after the compaction: its change objects wait for the erasure
    stream.send(7, "u", customer(7, 9))
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    receipt = erase_subject(spark, endpoints, topic, "7")
    erased = expected(stream)
    erased.pop(7)
    assert table_state(spark, endpoints, topic) == (erased, erased)
    assert trino_state(trino, topic) == erased
    needles = [b"customer 7 tier"]  # its name, kept in clear
    assert traces(s3, endpoints.bucket, topic.prefix.data_prefix(), needles) == []
    assert receipt["tables"][f"{topic.database}.{topic.table}"]["rows_removed"] == 1


def test_an_erasure_of_a_subject_the_stream_already_deleted_leaves_no_trace_of_its_earlier_rows(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    """A customer created, updated, then deleted (``op: d`` and its tombstone) has no row in the current snapshot,
    yet its earlier rows are in earlier snapshots' files and the plans' change objects. An erasure request for it
    removes no row, and still leaves no version of any object under the table's location holding them; the others'
    state stays."""
    ensure_pseudonym_key(make_client(endpoints, "secretsmanager"))
    topic = customers_topic(endpoints, subject_fields=("id",))
    stream = ChangeStream(topic, endpoints)
    for key in range(1, 9):
        stream.send(key, "c", customer(key, 1))
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    stream.send(5, "u", customer(5, 2))
    stream.send(2, "u", customer(2, 2))
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    stream.send(5, "d")
    stream.send(5, None)
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    assert table_state(spark, endpoints, topic) == (expected(stream), expected(stream)) and 5 not in stream.state
    s3 = make_client(endpoints, "s3")
    needles = [b"customer 5 tier"]  # its names, kept in clear, as of both its changes
    assert traces(s3, endpoints.bucket, topic.prefix.data_prefix(), needles), "the earlier rows are still stored"

    receipt = erase_subject(spark, endpoints, topic, "5")
    assert traces(s3, endpoints.bucket, topic.prefix.data_prefix(), needles) == []
    assert receipt["tables"][f"{topic.database}.{topic.table}"]["rows_removed"] == 0
    assert table_state(spark, endpoints, topic) == (expected(stream), expected(stream))


def test_a_pseudonymised_key_field_is_hashed_as_everywhere_else_so_the_table_stays_joinable(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    """Keyed by ``email``, which the catalog hashes: each row's key is the email's keyed hash, the same digest as the
    table's ``email`` column and as any other table or erasure request holds for that address, so joins on it work;
    an update replaces the row of its hashed key and a delete (its key from ``before``, hashed too) removes it."""
    ensure_pseudonym_key(make_client(endpoints, "secretsmanager"))
    topic = customers_topic(endpoints, key_fields=("email",))
    stream = ChangeStream(topic, endpoints)
    rows = {k: {"id": k, "name": f"customer {k}", "email": f"c{k}@example.com", "tier": 1} for k in range(1, 6)}
    for key, row in rows.items():
        stream.send(key, "c", row)
    stream.send(2, "u", {**rows[2], "tier": 3})
    stream.send(4, "d")
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    digest = local_key(endpoints).digest
    held = table_rows(spark, endpoints, topic).select("email", UPSERT_KEY_COLUMN, "tier").collect()
    expected = {digest(f"c{k}@example.com"): 3 if k == 2 else 1 for k in (1, 2, 3, 5)}
    assert {r["email"]: r["tier"] for r in held} == expected
    assert all(r[UPSERT_KEY_COLUMN] == r["email"] for r in held), "the key is the hashed field as stored"


def test_a_new_schema_version_adds_its_column_and_rows_of_both_versions_stay_current(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = customers_topic(endpoints, schemas=(json.dumps(ENVELOPE), json.dumps(ENVELOPE_V2)))
    stream = ChangeStream(topic, endpoints)
    for key in range(1, 7):
        stream.send(key, "c", customer(key, 1))
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    stream.evolve(ENVELOPE_V2)  # the row gains phone
    for key in (2, 4, 8):
        stream.send(key, "u" if key in stream.state else "c", {**customer(key, 2), "phone": f"+4{key}"})
    stream.send(5, "d")
    assert stream.producer.flush(30) == 0
    archive_all(spark, endpoints, topic)
    rows = table_rows(spark, endpoints, topic)
    assert {r["id"]: (r["phone"], r["schema_version"]) for r in rows.collect()} == {
        1: (None, 1),
        2: ("+42", 2),
        3: (None, 1),
        4: ("+44", 2),
        6: (None, 1),
        8: ("+48", 2),
    }
    assert table_state(spark, endpoints, topic) == (expected(stream), expected(stream))


COMPACTION = Knobs(min_input_files=2, snapshot_retention=timedelta(0), orphan_age=timedelta(0))


def data_file_count(spark: SparkSession, topic: Topic) -> int:
    name = f"{ICEBERG_CATALOG}.{topic.database}.{topic.table}"
    spark.sql(f"REFRESH TABLE {name}")
    return int(spark.sql(f"SELECT count(*) FROM {name}.data_files").collect()[0][0])
