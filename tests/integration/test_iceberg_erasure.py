"""Erasure from Iceberg tables (``table_format: iceberg``) on the local stack: a by_key table (tombstones kept as a
delete log) archived in two plans, so two snapshots, and a table erased by subject field; a tombstone request and an
explicit one. After the erasure no version of any object under either table's location (data files, manifests,
manifest lists, metadata files) holds an erased identifier or its digest, the receipts are right, and every other
row reads the same through Spark's Iceberg catalog and pyiceberg's scan alike."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.erasure import RequestStore, new_request, receipt_token
from kafkalake.iceberg import table_catalog
from kafkalake.jobspec import ICEBERG_CATALOG
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.local.provision import ensure_pseudonym_key
from kafkalake_dev.local.sandbox import with_bucket
from spark_jobs.archiver import topic_run
from spark_jobs.compaction.work import Knobs
from spark_jobs.erasure.job import Eraser
from spark_jobs.iceberg_maintenance import remove_orphans
from tests.crashes import InjectedCrash, crash
from tests.integration.lake_files import object_versions, traces
from tests.integration.test_erasure import GONE, RUN, SUBJECT, archive, local_key, poison, produce, write_catalog

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-iceberg-erasure-tests"
ERASED = {"customers_a": {SUBJECT, "person-x", "person-y"}, "customers_b": {SUBJECT}}
"""Per table, the customers whose rows go: the subject, and (by_key) the two records keyed GONE before its tombstone."""


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    found = with_bucket(local_stack, BUCKET)
    ensure_pseudonym_key(make_client(found, "secretsmanager"))
    return found


def rows(spark: SparkSession, topic: Topic) -> dict[tuple[int, int], str]:
    """Every row of the table's current snapshot through Spark's Iceberg catalog, by (Kafka partition, offset)."""
    name = f"{ICEBERG_CATALOG}.{topic.database}.{topic.table}"
    spark.sql(f"REFRESH TABLE {name}")
    found, read = {}, spark.table(name).collect()
    for row in read:
        values = row.asDict(recursive=True)
        found[(values["_kafka_partition"], values["_kafka_offset"])] = json.dumps(values, default=str, sort_keys=True)
    assert len(found) == len(read), f"{topic.table}: a (Kafka partition, offset) read twice"
    return found


def scanned(endpoints: Endpoints, topic: Topic) -> dict[tuple[int, int], tuple[str | None, str]]:
    """(customer, id) of every row pyiceberg's scan reads, by (Kafka partition, offset)."""
    table = table_catalog(endpoints).load_table((topic.database, topic.table)).scan().to_arrow()
    return {
        (r["_kafka_partition"], r["_kafka_offset"]): (r["customer_id"], r["id"])
        for r in table.select(["_kafka_partition", "_kafka_offset", "customer_id", "id"]).to_pylist()
    }


def test_tombstones_and_a_subject_request_leave_no_trace_in_any_version_of_an_iceberg_table(
    spark: SparkSession, endpoints: Endpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The by_key table's second plan crashes after its table commit: the first run deletes the rows but expires no
    snapshot while that plan's redo may still look for it there; the redo appends nothing, the next run cleans, and
    the one after it erases the quarantined record the redo wrote again."""
    env = f"i{datetime.now(UTC).strftime('%H%M%S%f')}"
    keyed, fields = write_catalog(tmp_path / "catalog", env, table_format=TableFormat.ICEBERG)
    make_client(endpoints, "glue").create_database(DatabaseInput={"Name": keyed.database})
    key = local_key(endpoints)
    s3 = make_client(endpoints, "s3")
    store = RequestStore(s3, endpoints.bucket, env)
    eraser = Eraser(spark, endpoints, env, [keyed, fields], Knobs(grace_period=timedelta(0)), run=RUN)
    early = new_request([key.digest(SUBJECT)], [], 1, key.key_id, datetime.now(UTC))
    store.put(early)  # before any plan: the tables are not made yet, and hold nothing
    assert (eraser.run().receipts, store.receipts()[early.request_id]["versions_deleted"]) == ([early.request_id], 0)
    people = [f"person-{i}" for i in range(6)]
    records = [(p, p, hour) for hour in (0, 1) for p in people]
    produce(endpoints, keyed, [*records, (GONE, "person-x", 0), (SUBJECT, SUBJECT, 1)])
    archive(spark, endpoints, keyed)  # the first plan, the first snapshot
    produce(endpoints, keyed, [(GONE, "person-y", 1)])
    poison(endpoints, keyed)  # quarantined, keyed GONE: erased too
    produce(endpoints, keyed, [(GONE, None, 1), (GONE, "person-z", 1)])  # the tombstone, then a later record
    with monkeypatch.context() as patch:  # the second plan's commit made, its receipt not: a redo is due
        patch.setattr(topic_run, "receipt", crash("after_table_commit"))
        with pytest.raises(InjectedCrash):
            archive(spark, endpoints, keyed)
    produce(endpoints, fields, [*records, ("any", SUBJECT, 0), ("other", SUBJECT, 1)])
    archive(spark, endpoints, fields)
    erased = sorted({c for gone in ERASED.values() for c in gone})
    needles = [c.encode() for c in erased] + [key.digest(c).encode() for c in [*erased, GONE]]
    assert traces(s3, endpoints.bucket, keyed.prefix.data_prefix(), needles)
    assert traces(s3, endpoints.bucket, fields.prefix.data_prefix(), needles), "the rows are there at first"
    before = {t.table: rows(spark, t) for t in (keyed, fields)}
    assert len(before["customers_a"]) == 12 + 5  # the people, person-x, the subject, person-y, the delete log, -z
    [tombstones] = [r for r in store.requests()[0] if r.request_id != early.request_id]  # the second plan's
    explicit = new_request([key.digest(SUBJECT)], [], 1, key.key_id, datetime.now(UTC))
    store.put(explicit)

    held = eraser.run()
    assert (held.failed, held.receipts, held.waiting) == ({}, [], [f"{keyed.database}.customers_a"])
    assert {k for k, v in rows(spark, keyed).items() if json.loads(v)["customer_id"] in ERASED["customers_a"]} == set()
    archive(spark, endpoints, keyed)  # the redo finds its plan in the table's history: nothing appended twice
    outcome = eraser.run()
    assert outcome.failed == {}
    assert sorted(outcome.receipts) == sorted([tombstones.request_id, explicit.request_id])

    for topic in (keyed, fields):
        left = traces(s3, endpoints.bucket, topic.prefix.data_prefix(), needles)
        assert left == [], f"{topic.table}: an erased identifier is still in a version"
        kept = {k: v for k, v in before[topic.table].items() if json.loads(v)["customer_id"] not in ERASED[topic.table]}
        assert len(kept) == len(before[topic.table]) - {"customers_a": 3, "customers_b": 2}[topic.table]
        assert rows(spark, topic) == kept, "every other row reads the same"
        by_pyiceberg = scanned(endpoints, topic)
        assert by_pyiceberg.keys() == kept.keys()
        assert all(by_pyiceberg[k] == (json.loads(v)["customer_id"], json.loads(v)["id"]) for k, v in kept.items())
    after = [json.loads(v) for v in rows(spark, keyed).values()]
    assert [r for r in after if r["_tombstone"]], "the delete log is kept"
    snapshots = table_catalog(endpoints).load_table((keyed.database, keyed.table)).snapshots()
    assert len(snapshots) == 1, "no snapshot older than the erasure is left to travel back to"

    receipts = store.receipts()
    by_request = {r: {t: v["rows_removed"] for t, v in receipts[r]["tables"].items()} for r in receipts}
    table_a, table_b = f"{keyed.database}.customers_a", f"{fields.database}.customers_b"
    assert by_request[explicit.request_id] == {table_a: 1, table_b: 2}
    assert by_request[tombstones.request_id] == {table_a: 2}
    assert receipts[tombstones.request_id]["tables"][table_a]["quarantine_rows_removed"] == 1
    for request in (explicit, tombstones):
        assert receipts[request.request_id]["versions_deleted"] > 0
        deleted = receipts[request.request_id]["objects_deleted"]
        locations = (keyed.prefix.data_prefix(), fields.prefix.data_prefix())
        assert deleted and all(k.startswith(locations) and k.endswith(".parquet") for k in deleted)
    assert receipts[explicit.request_id]["subjects"] == [receipt_token(key.digest(SUBJECT))]

    late = eraser.run()  # the redo wrote its quarantine object again: a late record of the tombstone's key
    assert (late.receipts, late.failed) == ([tombstones.request_id], {})
    assert store.receipts()[tombstones.request_id]["tables"][table_a]["quarantine_rows_removed"] == 2
    again = eraser.run()
    assert (again.receipts, again.failed, again.pending) == ([], {}, 0)
    for name, body in object_versions(s3, endpoints.bucket, keyed.quarantine_prefix()):
        assert GONE.encode() not in pq.read_table(io.BytesIO(body)).column("_key").to_pylist(), name


def test_orphans_are_the_objects_the_table_does_not_reach_and_only_those_named_when_named(
    spark: SparkSession, endpoints: Endpoints, tmp_path: Path
) -> None:
    """``remove_orphans`` (the erasure's, with the files it removed named, and the compactor's sweep) deletes what
    the table does not reference, never a file it does."""
    env = f"o{datetime.now(UTC).strftime('%H%M%S%f')}"
    _, fields = write_catalog(tmp_path / "catalog", env, table_format=TableFormat.ICEBERG)
    make_client(endpoints, "glue").create_database(DatabaseInput={"Name": fields.database})
    produce(endpoints, fields, [(f"person-{i}", f"person-{i}", 0) for i in range(4)])
    archive(spark, endpoints, fields)
    table = f"{fields.database}.{fields.table}"
    [live] = [r[0] for r in spark.sql(f"SELECT file_path FROM {ICEBERG_CATALOG}.{table}.files LIMIT 1").collect()]
    s3, bucket = make_client(endpoints, "s3"), endpoints.bucket
    orphans = [f"{fields.prefix.data_prefix()}data/orphan-{n}.parquet" for n in ("a", "b")]
    for key in orphans:
        s3.put_object(Bucket=bucket, Key=key, Body=b"left by a crash")
    created = make_client(endpoints, "glue").get_table(DatabaseName=fields.database, Name=fields.table)
    since = created["Table"]["CreateTime"]
    later = datetime.now(UTC) + timedelta(seconds=1)
    named = [f"s3://{bucket}/{orphans[0]}", live]
    assert remove_orphans(spark, s3, bucket, table, later, table_created=since, only=named) == named[:1]
    assert remove_orphans(spark, s3, bucket, table, later, table_created=later) == [], "older objects are not its"
    assert remove_orphans(spark, s3, bucket, table, later, table_created=since) == [f"s3://{bucket}/{orphans[1]}"]
    assert s3.head_object(Bucket=bucket, Key=parse_s3_uri(live).key)["ContentLength"] > 0, "a live file stays"
    assert len(scanned(endpoints, fields)) == 4
