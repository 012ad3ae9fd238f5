"""Which rows a batch's requests erase, table by table: one Spark scan per schema version of the table's files (and
one of its quarantine objects), reading only the columns that identify a subject and the row keys.

A row matches an explicit request when one of its subject fields, or (``erasure: by_key``) its Kafka key, hashes to
the request's digest: a field the catalog pseudonymises with ``hmac`` already holds the digest and is compared as
it is, so Spark's Parquet reader skips row groups by their min/max statistics; any other field is hashed in the
scan (``spark_jobs.keyed_hash``, no per-row Python). A row matches a tombstone when its key hashes to the
tombstone's digest in the same Kafka partition at a lower offset (a broadcast join of the batch's tombstones).
Quarantined records hold raw bytes only: they match by their key (``by_key`` tables). With the table's subject index
(``spark_jobs.erasure.index``), only the partitions it names for the batch's digests, and objects it does not cover,
are read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafkalake.erasure import ErasureRequest, Source
from kafkalake.layout import PARTITION_PATH_RE, Partition
from kafkalake.personal import PseudonymKey, QuarantineMode
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import Topic
from spark_jobs.erasure.batch import PartitionErasure, QuarantineErasure, TableBatch
from spark_jobs.erasure.index import Hits
from spark_jobs.erasure.subjects import (
    by_schema_version,
    data_objects,
    read_objects,
    subject_columns,
    union,
)


@dataclass
class Scope:
    """The requests that reach one table: explicit digests, and tombstones (digest, Kafka partition, offset)."""

    explicit: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Digest → the requests naming it."""
    tombstones: dict[tuple[str, int, int], list[str]] = field(default_factory=lambda: defaultdict(list))

    def __bool__(self) -> bool:
        return bool(self.explicit or self.tombstones)

    def digests(self) -> set[str]:
        return set(self.explicit) | {digest for digest, _, _ in self.tombstones}


def scope(topic: Topic, requests: Iterable[ErasureRequest]) -> Scope:
    table = f"{topic.database}.{topic.table}"
    found = Scope()
    for request in requests:
        if request.tables and table not in request.tables:
            continue
        for subject in request.subjects:
            if request.source == Source.TOMBSTONES and subject.kafka_partition is not None:
                point = (subject.digest, subject.kafka_partition, subject.before_offset or 0)
                found.tombstones[point].append(request.request_id)
            else:
                found.explicit[subject.digest].append(request.request_id)
    return found


def in_scope(topic: Topic, request: ErasureRequest) -> bool:
    return topic.erasable and (not request.tables or f"{topic.database}.{topic.table}" in request.tables)


def find(
    spark: SparkSession,
    s3: Any,
    bucket: str,
    topic: Topic,
    *,
    key: PseudonymKey,
    wanted: Scope,
    since: datetime | None = None,
    hits: Hits | None = None,
) -> TableBatch:
    """The table's rows to erase, by partition and quarantine object, with the rows each request accounts for; only
    in objects written since ``since`` when given (late objects of requests already done), only in objects ``hits``
    wants when given (the subject index's answer for ``wanted``)."""
    found = TableBatch()
    if not wanted:
        return found
    objects = [n for n in _objects(s3, bucket, topic.prefix.data_prefix(), since) if hits is None or hits.wants(n)]
    seen: set[tuple[Any, ...]] = set()
    for group in by_schema_version(objects):
        for row in _collect(_scan(spark, bucket, group, topic, key=key, wanted=wanted, fields=True)):
            path = PARTITION_PATH_RE.search(_key_of(row))
            # a row's copies (a raw file and the compaction output that replaced it) count once
            point = (
                path and path.group(1),
                row["_kafka_partition"],
                row["_kafka_offset"],
                row["subject"],
                row["before"],
            )
            if path is None or point in seen:
                continue
            seen.add(point)
            values = Partition.from_path(path.group(1)).values()
            entry = found.partitions.setdefault(path.group(1), PartitionErasure(values, [], {}))
            _add(entry.keys, entry.rows_by_request, row, wanted)
    if topic.spec.erasure == "by_key" and topic.quarantine != QuarantineMode.OFFSETS_ONLY:  # else no key is kept
        names = _objects(s3, bucket, topic.quarantine_prefix(), since)
        for row in _collect(_scan(spark, bucket, names, topic, key=key, wanted=wanted, fields=False)):
            quarantined = found.quarantine.setdefault(_key_of(row), QuarantineErasure([], {}))
            _add(quarantined.keys, quarantined.rows_by_request, row, wanted)
    if wanted.explicit and topic.spec.subject_fields and topic.quarantine != QuarantineMode.OFFSETS_ONLY:
        # a quarantined record failed to decode, so its subject fields cannot be read: its raw bytes go instead
        for name in _objects(s3, bucket, topic.quarantine_prefix(), since):
            found.quarantine.setdefault(name, QuarantineErasure([], {})).drop_raw = True
    return found


def _objects(s3: Any, bucket: str, prefix: str, since: datetime | None) -> list[str]:
    """The Parquet objects under ``prefix`` (written since ``since``, when given)."""
    return [k for k, at in data_objects(s3, bucket, prefix).items() if since is None or at >= since]


def _key_of(row: Any) -> str:
    """The object key of a scanned row's file (Spark gives its URI, percent-encoded)."""
    return unquote(parse_s3_uri(row["file"]).key)


def _collect(frame: DataFrame | None) -> list[Any]:
    return [] if frame is None else frame.distinct().collect()


def _add(keys: list[list[int]], counts: dict[str, int], row: Any, wanted: Scope) -> None:
    """One matched row: its key (once), and one row for each request it answers."""
    point = [int(row["_kafka_partition"]), int(row["_kafka_offset"])]
    if point not in keys:
        keys.append(point)
    if row["before"] is None:
        requests = wanted.explicit.get(row["subject"], [])
    else:
        requests = wanted.tombstones.get((row["subject"], point[0], int(row["before"])), [])
    for request_id in requests:
        counts[request_id] = counts.get(request_id, 0) + 1


def _scan(
    spark: SparkSession,
    bucket: str,
    names: Sequence[str],
    topic: Topic,
    *,
    key: PseudonymKey,
    wanted: Scope,
    fields: bool,
) -> DataFrame | None:
    """(file, Kafka partition, offset, subject digest, tombstone offset or null) of every matching row of ``names``."""
    if not names:
        return None
    frame = read_objects(spark, bucket, names)
    subjects = subject_columns(frame, topic, key, fields=fields)
    hashes, by_key = subjects.fields, subjects.key is not None
    key_hash = subjects.key if subjects.key is not None else F.lit(None).cast("string")
    base = frame.select(
        F.input_file_name().alias("file"),
        "_kafka_partition",
        "_kafka_offset",
        key_hash.alias("_key_hash"),
        *(h.alias(f"_hash{i}") for i, h in enumerate(hashes)),
    )
    parts: list[DataFrame] = []
    candidates = [F.col(f"_hash{i}") for i in range(len(hashes))] + ([F.col("_key_hash")] if by_key else [])
    if wanted.explicit and candidates:
        digests = sorted(wanted.explicit)
        subject = F.coalesce(*(F.when(c.isin(digests), c) for c in candidates))
        matched = base.where(subject.isNotNull()).select(
            "file",
            "_kafka_partition",
            "_kafka_offset",
            subject.alias("subject"),
            F.lit(None).cast("long").alias("before"),
        )
        parts.append(matched)
    if wanted.tombstones and by_key:
        points = spark.createDataFrame(sorted(wanted.tombstones), "digest string, point_partition int, before long")
        joined = base.join(
            F.broadcast(points),
            (F.col("_key_hash") == F.col("digest"))
            & (F.col("_kafka_partition") == F.col("point_partition"))
            & (F.col("_kafka_offset") < F.col("before")),
        )
        parts.append(
            joined.select("file", "_kafka_partition", "_kafka_offset", F.col("digest").alias("subject"), "before")
        )
    return union(parts)
