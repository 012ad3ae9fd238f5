"""Which requests reach a table, and the batch as its lease stores it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from infra.repo import catalog_dir
from kafkalake.erasure import new_request, tombstone_request
from kafkalake.personal import PseudonymKey
from kafkalake.topic_catalog import load_topic_catalog
from spark_jobs.erasure.batch import Batch, PartitionErasure, QuarantineErasure, TableBatch, TableDelete
from spark_jobs.erasure.matching import in_scope, scope

KEY = PseudonymKey("k1", bytes(range(32)))
NOW = datetime(2026, 11, 23, 12, tzinfo=UTC)
TEMPLATE = load_topic_catalog(catalog_dir()).get("customer-updated", "staging")
TOPIC = dataclasses.replace(TEMPLATE, spec=TEMPLATE.spec.model_copy(update={"subject_fields": ("customer_id",)}))
UNDECLARED = dataclasses.replace(
    TEMPLATE, spec=TEMPLATE.spec.model_copy(update={"subject_fields": (), "erasure": "none"})
)
TABLE = f"{TOPIC.database}.{TOPIC.table}"


def test_explicit_requests_reach_every_erasable_table_or_those_named_and_tombstones_their_own() -> None:
    everywhere = new_request([KEY.digest("a")], [], 1, "k1", NOW)
    elsewhere = new_request([KEY.digest("b")], ["other_db.other"], 1, "k1", NOW)
    tombstones = tombstone_request(TABLE, "p1", NOW.isoformat(), [(KEY.digest("c"), 2, 40)], within_days=1, key_id="k1")
    found = scope(TOPIC, [everywhere, elsewhere, tombstones])
    assert dict(found.explicit) == {("k1", KEY.digest("a")): [everywhere.request_id]}
    assert dict(found.tombstones) == {("k1", KEY.digest("c"), 2, 40): [tombstones.request_id]}
    assert in_scope(TOPIC, everywhere) and not in_scope(TOPIC, elsewhere)
    assert not in_scope(UNDECLARED, everywhere), "a table that declares no erasure is never in scope"


def test_the_batch_round_trips_through_the_lease() -> None:
    batch = Batch("b1", NOW.isoformat(), ["r1"])
    batch.tables[TABLE] = TableBatch(
        {"schema_version=1/dt=2026-11-20/hour=07/": PartitionErasure(["1", "2026-11-20", "07"], [[0, 4]], {"r1": 1})},
        {"quarantine/x.parquet": QuarantineErasure([[0, 2]], {"r1": 1})},
    )
    assert Batch.from_work(batch.to_work()) == batch
    assert not batch.done
    batch.tables[TABLE].partitions["schema_version=1/dt=2026-11-20/hour=07/"].purged = True
    batch.tables[TABLE].quarantine["quarantine/x.parquet"].done = True
    assert batch.done


def test_an_iceberg_tables_delete_round_trips_and_is_done_once_cleaned() -> None:
    batch = Batch("b1", NOW.isoformat(), ["r1", "r2"])
    deleted = TableDelete([[0, 4], [1, 7]], {"r1": 2}, 11, NOW.isoformat(), ["s3://lake/data/t/a.parquet"])
    batch.tables[TABLE] = TableBatch(iceberg=deleted)
    assert Batch.from_work(batch.to_work()) == batch
    assert batch.tables[TABLE].requests() == {"r1"}
    assert not batch.done, "deleted, not cleaned: its old snapshots still hold the rows"
    late = TableBatch(iceberg=TableDelete([[1, 7], [2, 9]], {"r2": 2}))
    batch.tables[TABLE].add(late)
    deleting = batch.tables[TABLE].iceberg
    assert deleting is not None
    assert (deleting.keys, deleting.rows_by_request) == ([[0, 4], [1, 7], [2, 9]], {"r1": 2, "r2": 2})
    deleting.purged = True
    assert batch.done
    hive = Batch.from_work({**batch.to_work(), "tables": {TABLE: {"partitions": {}, "quarantine": {}}}})
    assert hive.tables[TABLE].iceberg is None and hive.done, "a batch stored before Iceberg tables reads as before"


def test_a_subject_is_looked_for_under_every_key_it_was_digested_with() -> None:
    earlier = PseudonymKey("k0", bytes(range(1, 33)))
    both = new_request([{"k1": KEY.digest("a"), "k0": earlier.digest("a")}], [], 1, "k1", NOW)
    [subject] = both.subjects
    assert (subject.digest, subject.earlier_keys) == (KEY.digest("a"), {"k0": earlier.digest("a")})
    before_rotation = new_request([earlier.digest("b")], [], 1, "k0", NOW)
    found = scope(TOPIC, [both, before_rotation])
    assert dict(found.explicit) == {
        ("k1", KEY.digest("a")): [both.request_id],
        ("k0", earlier.digest("a")): [both.request_id],
        ("k0", earlier.digest("b")): [before_rotation.request_id],
    }
    assert found.key_ids() == {"k0", "k1"}
    assert found.common_key_ids() == frozenset({"k0"}), (
        "pseudonyms stored under k1 could be the second subject's, unmatched"
    )
    assert scope(TOPIC, [both]).common_key_ids() == frozenset({"k0", "k1"})
    tombstones = tombstone_request(TABLE, "p1", NOW.isoformat(), [(KEY.digest("c"), 2, 40)], within_days=1, key_id="k1")
    assert scope(TOPIC, [tombstones]).common_key_ids() is None, "a tombstone matches the key, hashed in the scan"
