"""Physical deletion, by version id (the bucket is versioned: ``DeleteObject`` without one only adds a delete marker
and keeps the data as a noncurrent version).

A rewritten partition, once the grace period after its swap has passed: every version of the objects the rewrite
replaced, and every noncurrent version and delete marker under the partition's raw folder and its compaction
output folder (earlier raw files and outputs live on as such versions). Current objects other than the replaced
ones (the rewrite's output, files that landed since) are never touched.

A quarantine object is rewritten in place without the erased records (no reader holds it open, no grace), and
without its raw bytes when asked (an offsets-only object: a table whose subjects are found by field, as the raw bytes
of a record that failed to decode cannot be searched), then every other version of its key is deleted; an object
left empty is deleted with all its versions.

An Iceberg table, once its snapshots expired (``spark_jobs.erasure.table_delete``): every noncurrent version and
delete marker under its location, data and metadata alike. The environment's requests, once the finished ones were
replaced by what remains of them (``kafkalake.erasure.ErasureRequest.remains``): every noncurrent version and delete
marker under their prefix, the digests the earlier versions held.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kafkalake.layout import Partition, restricted_encryption
from kafkalake.topic_catalog import Topic
from spark_jobs.archiver.transform import RAW_COLUMNS
from spark_jobs.compaction.merging import key_arrays, read_object


def versions(s3: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """Every version and delete marker under ``prefix``: Key, VersionId, IsLatest, and Marker (a delete marker)."""
    found = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        found += [{**v, "Marker": False} for v in page.get("Versions", [])]
        found += [{**m, "Marker": True} for m in page.get("DeleteMarkers", [])]
    return found


def _delete(s3: Any, bucket: str, doomed: Iterable[dict[str, Any]]) -> int:
    count = 0
    for version in doomed:
        s3.delete_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])
        count += 1
    return count


def purge_partition(s3: Any, bucket: str, topic: Topic, partition: Partition, replaced: set[str]) -> tuple[int, int]:
    """Delete every version of ``replaced`` and every noncurrent version under the partition's folders; (objects
    whose current version went, versions deleted)."""
    found = [v for prefix in topic.prefix.partition_prefixes(partition) for v in versions(s3, bucket, prefix)]
    doomed = [v for v in found if v["Key"] in replaced or v["Marker"] or not v["IsLatest"]]
    current = {v["Key"] for v in doomed if v["IsLatest"] and not v["Marker"]}
    return len(current), _delete(s3, bucket, doomed)


def purge_noncurrent(s3: Any, bucket: str, prefix: str) -> tuple[set[str], int]:
    """Delete every noncurrent version and delete marker under ``prefix`` (what was overwritten or deleted there lives
    on as such versions: an Iceberg table's expired files, a request's digests); the keys still current, and versions
    deleted. The markers go last: a marker deleted before its object's versions would make the object current again."""
    found = versions(s3, bucket, prefix)
    doomed = sorted((v for v in found if v["Marker"] or not v["IsLatest"]), key=lambda v: bool(v["Marker"]))
    current = {v["Key"] for v in found if v["IsLatest"] and not v["Marker"]}
    return current, _delete(s3, bucket, doomed)


def purge_quarantine(
    s3: Any, bucket: str, key: str, erase: list[list[int]], restricted_key_arn: str | None, *, drop_raw: bool = False
) -> int:
    """Rewrite the quarantine object ``key`` without the ``erase`` rows, and without its raw bytes if ``drop_raw`` (a
    restricted one with the restricted key), and delete its other versions; versions deleted. Carried out again
    after a crash, it finds the rows and bytes already gone and only deletes versions."""
    listed = [v for v in versions(s3, bucket, key) if v["Key"] == key]
    keep_version = None
    if any(v["IsLatest"] and not v["Marker"] for v in listed):
        table = read_object(s3, bucket, key)
        partitions, offsets = key_arrays(table)
        doomed = np.array(erase, dtype=np.int64).reshape(-1, 2)
        mask = np.isin(partitions.astype(np.int64) * (1 << 40) + offsets, doomed[:, 0] * (1 << 40) + doomed[:, 1])
        raw = [c for c in RAW_COLUMNS if drop_raw and c in table.column_names]
        if (mask.any() or raw) and not mask.all():
            body = io.BytesIO()
            pq.write_table(table.filter(pa.array(~mask)).drop_columns(raw), body)
            encryption = restricted_encryption(key, restricted_key_arn)
            keep_version = s3.put_object(Bucket=bucket, Key=key, Body=body.getvalue(), **encryption)["VersionId"]
        elif not mask.any():
            keep_version = next(v["VersionId"] for v in listed if v["IsLatest"])
    listed = [v for v in versions(s3, bucket, key) if v["Key"] == key]
    return _delete(s3, bucket, [v for v in listed if v["VersionId"] != keep_version])
