"""Physical deletion on a versioned bucket (in-process S3): a rewritten partition's replaced objects and every
noncurrent version under it go, current objects stay; a quarantine object is rewritten without the erased rows and
its other versions go."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import date
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto import mock_aws

from infra.repo import catalog_dir
from kafkalake.layout import Partition
from kafkalake.topic_catalog import load_topic_catalog
from spark_jobs.erasure.purge import purge_noncurrent, purge_partition, purge_quarantine, versions

TOPIC = load_topic_catalog(catalog_dir()).get("customer-updated", "staging")
PARTITION = Partition(1, date(2026, 11, 20), 7)


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="eu-west-1")
        client.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        client.put_bucket_versioning(Bucket="lake", VersioningConfiguration={"Status": "Enabled"})
        yield client


def parquet(offsets: list[int]) -> bytes:
    table = pa.table(
        {
            "_kafka_partition": pa.array([0] * len(offsets), pa.int32()),
            "_kafka_offset": offsets,
            "_key": [b"key"] * len(offsets),
            "_raw_value": [b"raw bytes"] * len(offsets),
        }
    )
    body = io.BytesIO()
    pq.write_table(table, body)
    return body.getvalue()


def test_replaced_objects_and_noncurrent_versions_go_current_ones_stay(s3: Any) -> None:
    raw = TOPIC.prefix.data_prefix() + PARTITION.path()
    output = TOPIC.prefix.compaction_output_prefix(PARTITION, "r2") + "part-00000.parquet"
    old_output = TOPIC.prefix.compaction_output_prefix(PARTITION, "r1") + "part-00000.parquet"
    s3.put_object(Bucket="lake", Key=raw + "a.parquet", Body=b"v1")
    s3.put_object(Bucket="lake", Key=raw + "a.parquet", Body=b"v2")  # a redo: two versions
    s3.put_object(Bucket="lake", Key=raw + "late.parquet", Body=b"late")  # landed since: stays
    s3.put_object(Bucket="lake", Key=old_output, Body=b"old")
    s3.delete_object(Bucket="lake", Key=old_output)  # cleaned by an earlier run: a noncurrent version + marker
    s3.put_object(Bucket="lake", Key=output, Body=b"new")
    other = TOPIC.prefix.data_prefix() + PARTITION.previous().path() + "b.parquet"
    s3.put_object(Bucket="lake", Key=other, Body=b"other")
    s3.put_object(Bucket="lake", Key=other, Body=b"other2")  # another partition: untouched

    objects, deleted = purge_partition(s3, "lake", TOPIC, PARTITION, {raw + "a.parquet"})

    assert (objects, deleted) == (1, 4)
    left = {(v["Key"], v["Marker"]) for v in versions(s3, "lake", "data/")}
    assert left == {(raw + "late.parquet", False), (output, False), (other, False)}
    assert len(versions(s3, "lake", other)) == 2


def test_a_quarantine_object_is_rewritten_without_the_rows_and_its_other_versions_go(s3: Any) -> None:
    key = TOPIC.prefix.quarantine_key(date(2026, 11, 20), 0, 3, 9)
    s3.put_object(Bucket="lake", Key=key, Body=parquet([3, 5, 9]))
    s3.put_object(Bucket="lake", Key=key, Body=parquet([3, 5, 9]))
    assert purge_quarantine(s3, "lake", key, [[0, 5]], None) == 2
    [left] = versions(s3, "lake", key)
    body = s3.get_object(Bucket="lake", Key=key, VersionId=left["VersionId"])["Body"].read()
    assert pq.read_table(io.BytesIO(body)).column("_kafka_offset").to_pylist() == [3, 9]
    assert purge_quarantine(s3, "lake", key, [[0, 5]], None) == 0  # carried out again: nothing more
    assert purge_quarantine(s3, "lake", key, [[0, 3], [0, 9]], None) == 1  # every row erased: the object goes
    assert versions(s3, "lake", key) == []


def test_a_restricted_quarantine_object_is_rewritten_with_the_restricted_key(s3: Any) -> None:
    restricted = boto3.client("kms", region_name="eu-west-1").create_key()["KeyMetadata"]["Arn"]
    assert TOPIC.quarantine_prefix().startswith("restricted/quarantine/")  # the topic has personal fields
    key = TOPIC.prefix.quarantine_key(date(2026, 11, 20), 0, 3, 9, restricted=True)
    s3.put_object(
        Bucket="lake", Key=key, Body=parquet([3, 5, 9]), ServerSideEncryption="aws:kms", SSEKMSKeyId=restricted
    )
    assert purge_quarantine(s3, "lake", key, [[0, 5]], restricted) == 1
    [left] = versions(s3, "lake", key)
    head = s3.head_object(Bucket="lake", Key=key, VersionId=left["VersionId"])
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", restricted)
    body = s3.get_object(Bucket="lake", Key=key)["Body"].read()
    assert pq.read_table(io.BytesIO(body)).column("_kafka_offset").to_pylist() == [3, 9]


def test_a_quarantine_object_of_a_table_erased_by_subject_field_keeps_only_its_offsets(s3: Any) -> None:
    """Its records failed to decode, so no scan can tell whose they are: their raw bytes go, the offsets stay."""
    key = TOPIC.prefix.quarantine_key(date(2026, 11, 20), 0, 3, 9)
    s3.put_object(Bucket="lake", Key=key, Body=parquet([3, 5, 9]))
    s3.put_object(Bucket="lake", Key=key, Body=parquet([3, 5, 9]))
    assert purge_quarantine(s3, "lake", key, [], None, drop_raw=True) == 2
    [left] = versions(s3, "lake", key)
    body = s3.get_object(Bucket="lake", Key=key, VersionId=left["VersionId"])["Body"].read()
    table = pq.read_table(io.BytesIO(body))
    assert table.column("_kafka_offset").to_pylist() == [3, 5, 9]
    assert not {"_key", "_raw_value"} & set(table.column_names)
    assert purge_quarantine(s3, "lake", key, [], None, drop_raw=True) == 0  # carried out again: nothing more


def test_an_iceberg_tables_noncurrent_versions_and_markers_go_its_current_objects_stay(s3: Any) -> None:
    location = TOPIC.prefix.data_prefix()
    live, gone, metadata = location + "a.parquet", location + "data/b.parquet", location + "metadata/m1.avro"
    s3.put_object(Bucket="lake", Key=live, Body=b"v1")
    s3.put_object(Bucket="lake", Key=live, Body=b"v2")  # a redo of its plan: the first is noncurrent
    for key in (gone, metadata):
        s3.put_object(Bucket="lake", Key=key, Body=b"expired")
        s3.delete_object(Bucket="lake", Key=key)  # what the expiry deleted: a noncurrent version and a marker
    elsewhere = TOPIC.prefix.quarantine_prefix() + "q.parquet"
    s3.put_object(Bucket="lake", Key=elsewhere, Body=b"q1")
    s3.put_object(Bucket="lake", Key=elsewhere, Body=b"q2")
    current, deleted = purge_noncurrent(s3, "lake", location)
    assert (current, deleted) == ({live}, 5)
    left = versions(s3, "lake", location)
    assert [(v["Key"], v["IsLatest"], v["Marker"]) for v in left] == [(live, True, False)]
    assert len(versions(s3, "lake", elsewhere)) == 2, "nothing outside the table's location"
