"""The archiver's writer against in-process S3: one pass routes a plan's rows to data objects per (version, Kafka
partition, hour), the delete log and quarantine, cuts objects at the record bound, counts every row, writes the
same keys and bytes however the rows were batched, counts the S3 retries of each task, names an object S3
refused, and keeps quarantined personal data only under the restricted prefix with its key (or not at all)."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto import mock_aws

from kafkalake.endpoints import Endpoints
from kafkalake.layout import TablePrefix
from kafkalake.personal import QuarantineMode
from kafkalake.undeclared import UNDECLARED_VERSION
from spark_jobs.archiver.uploads import ObjectNotWritten
from spark_jobs.archiver.writer import (
    COUNT,
    DATA,
    QUARANTINE,
    RETRIED,
    WAITED,
    WROTE,
    PlanLayout,
    PlanWriter,
)
from spark_jobs.common import worker_s3_client, worker_s3_retries
from tests.faults import s3_answers

ENDPOINTS = Endpoints("kafka:9092", "http://registry:8081", "eu-west-1", "lake")
PREFIX = TablePrefix("payments", "test", "test", "orders")
T9 = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
V1 = pa.struct([pa.field("id", pa.string()), pa.field("n", pa.int64())])
V2 = pa.struct([pa.field("id", pa.string())])


@pytest.fixture(autouse=True)
def s3() -> Iterator[Any]:
    with mock_aws():
        worker_s3_client.cache_clear()
        worker_s3_retries.cache_clear()
        client = boto3.client("s3", region_name="eu-west-1")
        client.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        yield client
        worker_s3_client.cache_clear()
        worker_s3_retries.cache_clear()


def row(offset: int, kind: str, hour: int = 9, partition: int = 0) -> dict[str, Any]:
    """A plan row as ``transform.plan_rows`` gives it: kind v1, v2, tombstone, or an error."""
    at = T9.replace(hour=hour) + timedelta(seconds=offset)
    error = None if kind in ("v1", "v2") else kind
    return {
        "_member": 0,
        "_kafka_partition": partition,
        "_kafka_offset": offset,
        "_kafka_timestamp": at,
        "_key": f"k{offset}".encode(),
        "_tombstone_key": f"k{offset}".encode() if kind == "tombstone" else None,
        "_raw_value": b"\x42raw" if error not in (None, "tombstone") else None,
        "_schema_id": {"v1": 11, "v2": 12}.get(kind),
        "_error": error,
        "_schema_version": {"v1": 1, "v2": 2}.get(kind),
        "_value_v1": {"id": f"a{offset}", "n": offset} if kind == "v1" else None,
        "_value_v2": {"id": f"b{offset}"} if kind == "v2" else None,
        "_business_time": at,
        "_time_source": "kafka_timestamp",
    }


SCHEMA = pa.schema(
    [
        ("_member", pa.int32()),
        ("_kafka_partition", pa.int32()),
        ("_kafka_offset", pa.int64()),
        ("_kafka_timestamp", pa.timestamp("us", tz="UTC")),
        ("_key", pa.binary()),
        ("_tombstone_key", pa.binary()),
        ("_raw_value", pa.binary()),
        ("_schema_id", pa.int64()),
        ("_error", pa.string()),
        ("_schema_version", pa.int32()),
        ("_value_v1", V1),
        ("_value_v2", V2),
        ("_business_time", pa.timestamp("us", tz="UTC")),
        pa.field("_time_source", pa.string(), nullable=False),  # as Spark gives it for a plan alone
    ]
)


def layout(max_records: int = 100, keep: bool = False, extra: tuple[str, ...] = ()) -> PlanLayout:
    return PlanLayout(ENDPOINTS, PREFIX, ((1, "_value_v1"), (2, "_value_v2")), extra, keep, max_records)


def write(rows: list[dict[str, Any]], plan: PlanLayout, batch: int = 4) -> list[dict[str, Any]]:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    outcome = list(PlanWriter([plan])(iter(table.to_batches(max_chunksize=batch))))
    found: list[dict[str, Any]] = pa.Table.from_batches(outcome).to_pylist()
    return found


def read(s3: Any, key: str) -> pa.Table:
    return pq.read_table(io.BytesIO(s3.get_object(Bucket="lake", Key=key)["Body"].read()))


PLAN = [
    row(0, "v1"),
    row(1, "v1", hour=10),
    row(2, "tombstone"),
    row(3, "v2"),
    row(4, "bad_magic_byte"),
    row(5, "v1"),
    row(6, "corrupt_avro", hour=10),
    row(7, "v1", hour=10),
]


def test_one_pass_routes_data_by_version_and_hour_and_quarantines_errors(s3: Any) -> None:
    outcome = write(PLAN, layout())
    objects = {r["key"]: r for r in outcome if r["kind"] in (DATA, QUARANTINE)}
    data = {k: r for k, r in objects.items() if r["kind"] == DATA}
    assert sorted((k.split("/")[-4:-1], r["first_offset"], r["last_offset"], r["rows"]) for k, r in data.items()) == [
        (["schema_version=1", "dt=2026-11-20", "hour=09"], 0, 5, 2),
        (["schema_version=1", "dt=2026-11-20", "hour=10"], 1, 7, 2),
        (["schema_version=2", "dt=2026-11-20", "hour=09"], 3, 3, 1),
    ]
    hour9 = read(s3, next(k for k in data if "schema_version=1" in k and "hour=09" in k))
    assert hour9.column_names == [
        "id",
        "n",
        "_kafka_partition",
        "_kafka_offset",
        "_kafka_timestamp",
        "_business_time",
        "_time_source",
    ]
    assert hour9.column("_kafka_offset").to_pylist() == [0, 5] and hour9.column("id").to_pylist() == ["a0", "a5"]
    assert all(hour9.schema.field(name).nullable for name in ("id", "n"))
    (quarantine,) = [k for k, r in objects.items() if r["kind"] == QUARANTINE]
    assert quarantine.startswith(PREFIX.quarantine_prefix())
    quarantined = read(s3, quarantine)
    assert quarantined.column("_error").to_pylist() == ["bad_magic_byte", "corrupt_avro"]
    assert quarantined.column("_raw_value").to_pylist() == [b"\x42raw", b"\x42raw"]
    counts = {r["error"]: r["rows"] for r in outcome if r["kind"] == COUNT}
    assert counts == {None: 5, "tombstone": 1, "bad_magic_byte": 1, "corrupt_avro": 1}
    assert {r["kind"] for r in outcome if r["seconds"] is not None} == {WAITED, WROTE}


def test_kept_tombstones_join_the_newest_version_as_delete_log_rows(s3: Any) -> None:
    outcome = write(PLAN, layout(keep=True))
    (newest,) = [r["key"] for r in outcome if r["kind"] == DATA and "schema_version=2" in r["key"]]
    table = read(s3, newest)
    assert table.column_names[-2:] == ["_tombstone", "_key"]  # _key added for the log, as the topic omits keys
    assert table.select(["_kafka_offset", "_tombstone", "id", "_key"]).to_pylist() == [
        {"_kafka_offset": 2, "_tombstone": True, "id": None, "_key": b"k2"},
        {"_kafka_offset": 3, "_tombstone": False, "id": "b3", "_key": b"k3"},
    ]


def test_objects_are_cut_at_the_record_bound_and_do_not_depend_on_batching(s3: Any) -> None:
    rows = [row(i, "v1") for i in range(7)] + [row(i, "v1", partition=1) for i in range(3)]
    first = write(rows, layout(max_records=3), batch=2)
    data = sorted((r["kafka_partition"], r["first_offset"], r["last_offset"]) for r in first if r["kind"] == DATA)
    assert data == [(0, 0, 2), (0, 3, 5), (0, 6, 6), (1, 0, 2)]
    bodies = {r["key"]: s3.get_object(Bucket="lake", Key=r["key"])["Body"].read() for r in first if r["key"]}
    second = write(rows, layout(max_records=3), batch=5)
    assert {r["key"] for r in second if r["key"]} == set(bodies)
    assert all(s3.get_object(Bucket="lake", Key=k)["Body"].read() == body for k, body in bodies.items())


def test_a_task_of_many_plans_writes_each_with_its_own_layout_the_objects_each_writes_alone(s3: Any) -> None:
    """A pass's task holds rows of two plans (two topics, one after the other as coalesced Kafka partitions are, and
    mixed in one batch): each plan's objects go under its own prefix, with the keys and bytes its plan alone gives,
    and every outcome row names its plan's place in the pass."""
    other = dataclasses.replace(layout(max_records=3), prefix=TablePrefix("payments", "test", "test", "refunds"))
    mine = [row(i, "v1") for i in range(5)]
    theirs = [{**row(i, "v1", hour=10), "_member": 1} for i in range(4)] + [{**row(4, "bad_magic_byte"), "_member": 1}]
    alone = {
        r["key"]: s3.get_object(Bucket="lake", Key=r["key"])["Body"].read()
        for rows, plan in ((mine, layout(max_records=3)), ([{**r, "_member": 0} for r in theirs], other))
        for r in write(rows, plan)
        if r["key"]
    }
    for key in alone:
        s3.delete_object(Bucket="lake", Key=key)
    table = pa.Table.from_pylist([*mine[:3], theirs[0], *mine[3:], *theirs[1:]], schema=SCHEMA)
    outcome = pa.Table.from_batches(list(PlanWriter([layout(max_records=3), other])(iter(table.to_batches(3)))))
    written = {r["key"]: r["member"] for r in outcome.to_pylist() if r["key"]}
    assert set(written) == set(alone)
    assert {k: s3.get_object(Bucket="lake", Key=k)["Body"].read() for k in written} == alone
    assert all(key.startswith(PREFIX.data_prefix()) == (member == 0) for key, member in written.items())
    counts = {(r["member"], r["error"]): r["rows"] for r in outcome.to_pylist() if r["kind"] == COUNT}
    assert counts == {(0, None): 5, (1, None): 4, (1, "bad_magic_byte"): 1}


def test_rows_spark_sends_without_what_the_writer_can_tell_give_the_same_objects(s3: Any) -> None:
    """A pass of one plan sends no ``_member``, and rows whose business time is their Kafka time come without
    ``_business_time`` and ``_time_source`` (``transform.plan_rows``): the writer gives the same keys and bytes as
    from rows that carry them."""
    given = {
        r["key"]: s3.get_object(Bucket="lake", Key=r["key"])["Body"].read()
        for r in write(PLAN, layout(keep=True))
        if r["key"]
    }
    for key in given:
        s3.delete_object(Bucket="lake", Key=key)
    slim = pa.Table.from_pylist(PLAN, schema=SCHEMA).drop_columns(["_member", "_business_time", "_time_source"])
    outcome = pa.Table.from_batches(list(PlanWriter([layout(keep=True)])(iter(slim.to_batches(3))))).to_pylist()
    assert {r["key"]: s3.get_object(Bucket="lake", Key=r["key"])["Body"].read() for r in outcome if r["key"]} == given
    assert {r["member"] for r in outcome if r["key"]} == {0}
    hour10 = read(s3, next(k for k in given if "schema_version=1" in k and "hour=10" in k))
    assert set(hour10.column("_time_source").to_pylist()) == {"kafka_timestamp"}
    assert hour10.column("_business_time").equals(hour10.column("_kafka_timestamp"))


def test_a_pass_whose_spark_gives_a_nullable_time_source_writes_the_bytes_of_the_plan_alone(s3: Any) -> None:
    """In a pass of topics with and without a time field Spark gives ``_time_source`` as nullable (its CASE over the
    members has no ELSE), where a plan alone gets it non-null; every data row has one, so the writer writes it
    non-null whatever Spark says, and a member's objects have the same bytes in any pass (before, each of a mixed
    pass's data objects differed from the plan alone's in that flag)."""
    alone = {
        r["key"]: s3.get_object(Bucket="lake", Key=r["key"])["Body"].read() for r in write(PLAN, layout()) if r["key"]
    }
    for key in alone:
        s3.delete_object(Bucket="lake", Key=key)
    loose = SCHEMA.set(SCHEMA.get_field_index("_time_source"), pa.field("_time_source", pa.string()))
    table = pa.Table.from_pylist(PLAN, schema=loose)
    outcome = pa.Table.from_batches(list(PlanWriter([layout()])(iter(table.to_batches(4))))).to_pylist()
    assert {r["key"]: s3.get_object(Bucket="lake", Key=r["key"])["Body"].read() for r in outcome if r["key"]} == alone
    data = next(k for k in alone if k.startswith(PREFIX.data_prefix()))
    assert not read(s3, data).schema.field("_time_source").nullable


def test_data_is_partitioned_by_its_business_time_and_quarantine_by_its_kafka_time(s3: Any) -> None:
    late = T9 + timedelta(days=1, hours=2)  # the business time, a day and two hours after the Kafka time
    rows = [{**row(0, "v1"), "_business_time": late}, {**row(1, "bad_magic_byte"), "_business_time": late}]
    keys = [r["key"] for r in write(rows, layout()) if r["key"]]
    assert [k.split("/")[-4:-1] for k in keys if k.startswith(PREFIX.data_prefix())] == [
        ["schema_version=1", "dt=2026-11-21", "hour=11"]
    ]
    assert [k for k in keys if k.startswith(PREFIX.quarantine_prefix())] == [
        PREFIX.quarantine_key(T9.date(), 0, 1, 1, restricted=False)
    ]


def test_throttling_and_5xx_are_retried_and_each_task_reports_its_retries(s3: Any) -> None:
    events = worker_s3_client(ENDPOINTS).meta.events
    events.register_first("before-send.s3.PutObject", s3_answers((503, "SlowDown"), (500, "InternalError")))
    outcome = write(PLAN, layout())
    assert [r["rows"] for r in outcome if r["kind"] == RETRIED] == [2]
    written = {r["key"] for r in outcome if r["kind"] in (DATA, QUARANTINE)}
    assert len(written) == 4 and written <= {o["Key"] for o in s3.list_objects_v2(Bucket="lake")["Contents"]}
    assert [r["rows"] for r in write(PLAN, layout()) if r["kind"] == RETRIED] == [0]  # the next task: its own


def test_an_object_s3_refuses_is_named_in_the_tasks_error(s3: Any) -> None:
    events = worker_s3_client(ENDPOINTS).meta.events
    events.register_first("before-send.s3.PutObject", s3_answers((403, "AccessDenied")))
    with pytest.raises(ObjectNotWritten, match=r"^cannot write s3://lake/data/payments/test/test/orders/.+\.parquet: "):
        write(PLAN, layout())


def test_restricted_quarantine_goes_under_its_prefix_with_its_own_key(s3: Any) -> None:
    kms = boto3.client("kms", region_name="eu-west-1")
    key_arn = kms.create_key()["KeyMetadata"]["Arn"]
    endpoints = dataclasses.replace(ENDPOINTS, restricted_key_arn=key_arn)
    plan = dataclasses.replace(layout(), endpoints=endpoints, quarantine=QuarantineMode.RESTRICTED)
    outcome = write(PLAN, plan)
    (quarantine,) = [r["key"] for r in outcome if r["kind"] == QUARANTINE]
    assert quarantine.startswith(PREFIX.quarantine_prefix(restricted=True)) and quarantine.startswith("restricted/")
    head = s3.head_object(Bucket="lake", Key=quarantine)
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", key_arn)
    assert read(s3, quarantine).column("_raw_value").to_pylist() == [b"\x42raw", b"\x42raw"]
    data = [r["key"] for r in outcome if r["kind"] == DATA]
    assert all("SSEKMSKeyId" not in s3.head_object(Bucket="lake", Key=k) for k in data)


def test_offsets_only_quarantine_keeps_no_bytes_of_the_record(s3: Any) -> None:
    outcome = write(PLAN, dataclasses.replace(layout(), quarantine=QuarantineMode.OFFSETS_ONLY))
    (quarantine,) = [r["key"] for r in outcome if r["kind"] == QUARANTINE]
    assert quarantine.startswith(PREFIX.quarantine_prefix())
    assert read(s3, quarantine).column_names == [
        "_kafka_partition",
        "_kafka_offset",
        "_kafka_timestamp",
        "_schema_id",
        "_error",
    ]


def test_held_records_keep_their_bytes_under_the_restricted_prefix_whatever_the_topics_mode(s3: Any) -> None:
    """Records of a schema version the catalog lacks (``kafkalake.undeclared``) of an offsets-only topic: its other
    quarantined records keep no bytes, the held ones keep theirs, under the restricted prefix with its key."""
    kms = boto3.client("kms", region_name="eu-west-1")
    key_arn = kms.create_key()["KeyMetadata"]["Arn"]
    endpoints = dataclasses.replace(ENDPOINTS, restricted_key_arn=key_arn)
    plan = dataclasses.replace(layout(), endpoints=endpoints, quarantine=QuarantineMode.OFFSETS_ONLY)
    outcome = write([*PLAN, row(8, UNDECLARED_VERSION), row(9, UNDECLARED_VERSION, partition=1)], plan)
    quarantine = sorted(r["key"] for r in outcome if r["kind"] == QUARANTINE)
    held = [k for k in quarantine if k.startswith(PREFIX.quarantine_prefix(restricted=True))]
    (offsets_only,) = [k for k in quarantine if k.startswith(PREFIX.quarantine_prefix())]
    assert len(held) == 2 and len(quarantine) == 3
    assert "_raw_value" not in read(s3, offsets_only).column_names
    for key in held:
        assert read(s3, key).select(["_raw_value", "_error"]).to_pylist() == [
            {"_raw_value": b"\x42raw", "_error": UNDECLARED_VERSION}
        ]
        head = s3.head_object(Bucket="lake", Key=key)
        assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", key_arn)
    counted = {(r["kafka_partition"], r["error"]): r["rows"] for r in outcome if r["kind"] == COUNT}
    assert counted[(0, UNDECLARED_VERSION)] == counted[(1, UNDECLARED_VERSION)] == 1
