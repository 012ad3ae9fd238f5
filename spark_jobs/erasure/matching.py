"""Which rows a batch's requests erase, table by table: one Spark scan per schema version of the table's files (and
one of its quarantine objects), reading only the columns that identify a subject and the row keys.

A row matches an explicit request when one of its subject fields, or (``erasure: by_key``) its Kafka key, hashes to
one of the request's digests: a field the catalog pseudonymises with ``hmac``, and a key the archive hashes
(``archive.key: hmac``), already hold the digest, under the key their row's ``_pseudonym_key_id`` names, and are
compared as they are with the subject's digest under that key id;
any other field is hashed in the scan (``spark_jobs.keyed_hash``, no per-row Python) under the key of each digest.
So a rotation loses nothing: rows hashed before it match the digest under the earlier key, which the request holds
too (``kafkalake.erasure.Subject.earlier_keys``), and a request digested before it hashes clear fields under its
own key. What cannot be matched fails the table, naming the key id (``KeyUnavailable``), never a silent 0 rows.
A row matches a tombstone when its key hashes to one of the tombstone's digests (a hashed key: holds it, under the
same key id; the archiver digests a tombstone's key under every key the secret keeps, so rows hashed before a
rotation match too) in the same Kafka partition at a lower offset (a broadcast join of the batch's tombstones).
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

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kafkalake.erasure import ErasureRequest, Source
from kafkalake.layout import PARTITION_PATH_RE, Partition
from kafkalake.personal import Keyring, KeyUnavailable, QuarantineMode
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TableFormat, TableMode
from spark_jobs.erasure.batch import PartitionErasure, QuarantineErasure, TableBatch, TableDelete
from spark_jobs.erasure.index import Hits
from spark_jobs.erasure.subjects import (
    SubjectColumns,
    by_schema_version,
    data_objects,
    read_objects,
    subject_columns,
    union,
)
from spark_jobs.iceberg_maintenance import catalog_name


@dataclass
class Scope:
    """The requests that reach one table: explicit digests, and tombstones (digest, Kafka partition, offset), each
    under the key id it was taken with."""

    explicit: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    """(Key id, digest) → the requests naming it (a subject has a digest under each key the secret kept)."""
    tombstones: dict[tuple[str, str, int, int], list[str]] = field(default_factory=lambda: defaultdict(list))
    """(Key id, digest, Kafka partition, offset) → the requests naming it."""
    subjects: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    """(Request, the key ids it has a digest under) of every explicit subject."""
    tombstoned: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    """(Request, the key ids it has a digest under) of every tombstone."""

    def __bool__(self) -> bool:
        return bool(self.explicit or self.tombstones)

    def digests(self) -> set[str]:
        return {digest for _, digest in self.explicit} | {digest for _, digest, _, _ in self.tombstones}

    def key_ids(self) -> set[str]:
        return {key_id for key_id, _ in self.explicit} | {key_id for key_id, _, _, _ in self.tombstones}

    def common_key_ids(self) -> frozenset[str] | None:
        """The key ids every explicit subject has a digest under (None without one): a stored pseudonym of any
        other key id could be a subject's that no digest matches."""
        sets = [key_ids for _, key_ids in self.subjects]
        return frozenset.intersection(*sets) if sets else None

    def requests(self, row: Any) -> set[str]:
        """The requests a matched row answers."""
        if row["before"] is None:
            return set(self.explicit.get((row["key_id"], row["subject"]), []))
        point = (row["key_id"], row["subject"], int(row["_kafka_partition"]), int(row["before"]))
        return set(self.tombstones.get(point, []))


def scope(topic: Topic, requests: Iterable[ErasureRequest]) -> Scope:
    table = f"{topic.database}.{topic.table}"
    found = Scope()
    for request in requests:
        if request.tables and table not in request.tables:
            continue
        for subject in request.subjects:
            digests = subject.digests(request.key_id)
            if request.source == Source.TOMBSTONES and subject.kafka_partition is not None:
                for key_id, digest in digests.items():
                    point = (key_id, digest, subject.kafka_partition, subject.before_offset or 0)
                    found.tombstones[point].append(request.request_id)
                found.tombstoned.append((request.request_id, frozenset(digests)))
            else:
                for key_id, digest in digests.items():
                    found.explicit[(key_id, digest)].append(request.request_id)
                found.subjects.append((request.request_id, frozenset(digests)))
    return found


def in_scope(topic: Topic, request: ErasureRequest) -> bool:
    return topic.erasable and (not request.tables or f"{topic.database}.{topic.table}" in request.tables)


def find(
    spark: SparkSession,
    s3: Any,
    bucket: str,
    topic: Topic,
    *,
    keys: Keyring,
    wanted: Scope,
    since: datetime | None = None,
    hits: Hits | None = None,
) -> TableBatch:
    """The table's rows to erase, by partition and quarantine object, with the rows each request accounts for; only
    in objects written since ``since`` when given (late objects of requests already done), only in objects ``hits``
    wants when given (the subject index's answer for ``wanted``). Raises ``KeyUnavailable`` (the key id named, no
    key material) when a request's digests are all under keys the secret no longer keeps and the table hashes in
    the scan, or when rows hold stored pseudonyms of a key id some request has no digest under."""
    found = TableBatch()
    if not wanted:
        return found
    if topic.spec.table_format == TableFormat.ICEBERG:
        found.iceberg = _snapshot_rows(spark, topic, keys=keys, wanted=wanted)
    else:
        found.partitions = _partition_rows(spark, s3, bucket, topic, keys=keys, wanted=wanted, since=since, hits=hits)
    raw = [n for prefix in raw_quarantine_prefixes(topic) for n in _objects(s3, bucket, prefix, since)]
    if topic.spec.erasure == "by_key" and raw:
        held: dict[tuple[str, int, int], set[str]] = defaultdict(set)
        for row in _collect(_scan(spark, bucket, raw, topic, keys=keys, wanted=wanted, fields=False), topic):
            held[(_key_of(row), int(row["_kafka_partition"]), int(row["_kafka_offset"]))] |= wanted.requests(row)
        for (name, *point), requests in sorted(held.items()):
            quarantined = found.quarantine.setdefault(name, QuarantineErasure([], {}))
            _add(quarantined.keys, quarantined.rows_by_request, point, requests)
    if wanted.explicit and topic.spec.subject_fields:
        # a quarantined record failed to decode, so its subject fields cannot be read: its raw bytes go instead
        for name in raw:
            found.quarantine.setdefault(name, QuarantineErasure([], {})).drop_raw = True
    return found


def _partition_rows(
    spark: SparkSession,
    s3: Any,
    bucket: str,
    topic: Topic,
    *,
    keys: Keyring,
    wanted: Scope,
    since: datetime | None,
    hits: Hits | None,
) -> dict[str, PartitionErasure]:
    """A Hive table's rows to erase, by partition path: its objects' (written since ``since``, wanted by ``hits``)."""
    listed = [n for prefix in topic.prefix.data_object_prefixes() for n in _objects(s3, bucket, prefix, since)]
    objects = [n for n in listed if hits is None or hits.wants(n)]
    rows: dict[tuple[str, int, int], set[str]] = defaultdict(set)
    for group in by_schema_version(objects):
        for row in _collect(_scan(spark, bucket, group, topic, keys=keys, wanted=wanted, fields=True), topic):
            path = PARTITION_PATH_RE.search(_key_of(row))
            if path is not None:  # a row's copies (a raw file and the compaction output that replaced it) count once
                rows[(path.group(1), int(row["_kafka_partition"]), int(row["_kafka_offset"]))] |= wanted.requests(row)
    found: dict[str, PartitionErasure] = {}
    for (folder, *point), requests in sorted(rows.items()):
        entry = found.setdefault(folder, PartitionErasure(Partition.from_path(folder).values(), [], {}))
        _add(entry.keys, entry.rows_by_request, point, requests)
    return found


def _snapshot_rows(spark: SparkSession, topic: Topic, *, keys: Keyring, wanted: Scope) -> TableDelete | None:
    """An Iceberg table's rows to erase (None for none, or no table yet): its current snapshot's, read through the
    catalog (only the columns matching takes). Rows of earlier batches are in no snapshot's live files, so a late
    request's rows are whatever matches now, with no ``since`` to look at. An upsert table gets a delete of no row
    rather than None: the subject's earlier rows, which a later change or a tombstone took from the current
    snapshot, are still in its earlier snapshots and change objects, and the delete's clean removes those."""
    name = catalog_name(f"{topic.database}.{topic.table}")
    if not spark.catalog.tableExists(name):
        return None  # the archiver makes the table with its first plan
    spark.sql(f"REFRESH TABLE {name}")
    base = spark.table(name).select("*", F.col("_file").alias("file"))
    rows: dict[tuple[int, int], set[str]] = defaultdict(set)
    for row in _collect(matching_rows(spark, base, topic, keys=keys, wanted=wanted, fields=True), topic):
        rows[(int(row["_kafka_partition"]), int(row["_kafka_offset"]))] |= wanted.requests(row)
    if not rows:
        return TableDelete([], {}) if topic.spec.mode == TableMode.UPSERT else None
    found = TableDelete([], {})
    for point, requests in sorted(rows.items()):
        _add(found.keys, found.rows_by_request, list(point), requests)
    return found


def raw_quarantine_prefixes(topic: Topic) -> list[str]:
    """The prefixes whose quarantine objects keep raw bytes (and the key): the topic's own unless it is offsets-only,
    and the restricted one, where the records of schema versions the catalog lacks are held whatever the mode."""
    offsets_only = topic.quarantine == QuarantineMode.OFFSETS_ONLY
    return [p for p in topic.quarantine_prefixes() if not (offsets_only and p == topic.quarantine_prefix())]


def _objects(s3: Any, bucket: str, prefix: str, since: datetime | None) -> list[str]:
    """The Parquet objects under ``prefix`` (written since ``since``, when given)."""
    return [k for k, at in data_objects(s3, bucket, prefix).items() if since is None or at >= since]


def _key_of(row: Any) -> str:
    """The object key of a scanned row's file (Spark gives its URI, percent-encoded)."""
    return unquote(parse_s3_uri(row["file"]).key)


def _collect(frame: DataFrame | None, topic: Topic) -> list[Any]:
    """The matched rows; ``KeyUnavailable`` when some row's stored pseudonyms are of a key id no digest of some
    request is under (the scan's rows without a subject)."""
    rows = [] if frame is None else frame.distinct().collect()
    strays = sorted({row["key_id"] for row in rows if row["subject"] is None})
    if strays:
        raise KeyUnavailable(
            f"{topic.database}.{topic.table}: rows hold pseudonyms under key id {', '.join(strays)}, and a pending "
            "request has no digest under it (made before that key, or after the secret stopped keeping it): the "
            "request would miss them; make it again with `kafkalake erase --subject` while the secret keeps the key"
        )
    return rows


def _add(keys: list[list[int]], counts: dict[str, int], point: list[int], requests: Iterable[str]) -> None:
    """One matched row: its key (once), and one row for each request it answers."""
    if point not in keys:
        keys.append(point)
    for request_id in requests:
        counts[request_id] = counts.get(request_id, 0) + 1


def _unusable(topic: Topic, keys: Keyring, wanted: Scope, subjects: SubjectColumns) -> None:
    """``KeyUnavailable`` when the scan must hash under a key the secret no longer keeps: a request's subject, or a
    tombstone of a clear key, without a digest under any key the job holds (one such key finds every row)."""
    held = set(keys.key_ids)
    missing = {r for r, key_ids in wanted.subjects if subjects.needs_key and not key_ids & held}
    if subjects.kafka_key is not None:
        missing |= {r for r, key_ids in wanted.tombstoned if not key_ids & held}
    if missing:
        asked = sorted({k for k in wanted.key_ids() if k not in held})
        raise KeyUnavailable(
            f"{topic.database}.{topic.table}: requests {', '.join(sorted(missing))} are digested under key id "
            f"{', '.join(asked)}, which the pseudonym secret no longer keeps (it keeps {', '.join(keys.key_ids)}); "
            "make them again with `kafkalake erase --subject`"
        )


def subject_matches(spark: SparkSession, rows: DataFrame, candidates: list[Column], digests: list[str]) -> DataFrame:
    """(file, Kafka partition, offset, subject) of each of ``rows`` one of whose ``candidates`` is among ``digests``
    (a row matching two subjects, once for each). Joined with them, never filtered by them: a plan shows a filter's
    literal values, and the job's plans are kept in its event log and shown in its Spark UI."""
    asked = spark.createDataFrame([(d,) for d in digests], "subject string")
    each = rows.select("file", "_kafka_partition", "_kafka_offset", F.explode(F.array(*candidates)).alias("subject"))
    return each.join(F.broadcast(asked), "subject")


def _scan(
    spark: SparkSession,
    bucket: str,
    names: Sequence[str],
    topic: Topic,
    *,
    keys: Keyring,
    wanted: Scope,
    fields: bool,
) -> DataFrame | None:
    """``matching_rows`` of the objects ``names``; None for no object."""
    if not names:
        return None
    base = read_objects(spark, bucket, names).withColumn("file", F.input_file_name())
    return matching_rows(spark, base, topic, keys=keys, wanted=wanted, fields=fields)


def matching_rows(
    spark: SparkSession, base: DataFrame, topic: Topic, *, keys: Keyring, wanted: Scope, fields: bool
) -> DataFrame | None:
    """(file, Kafka partition, offset, key id, subject digest, tombstone offset or null) of every matching row of
    ``base`` (a table's rows with their ``file``), per key id of the batch's digests: clear fields and the key hashed
    under that key, stored pseudonyms (a hashed key's too) of that key id (or of none) compared as they are; and (key
    id, null subject) of a row whose stored pseudonyms are of a key id some explicit subject has no digest under."""
    subjects = subject_columns(base, topic, fields=fields)
    _unusable(topic, keys, wanted, subjects)
    row_keys = ("file", "_kafka_partition", "_kafka_offset")
    parts: list[DataFrame] = []
    for key_id in sorted(wanted.key_ids()):
        key = keys.get(key_id)
        candidates = [F.when(subjects.own(key_id), c) for c in subjects.stored]
        if key is not None:
            key_hash = subjects.key_hash(key)
            candidates += subjects.hashed(key) + ([key_hash] if key_hash is not None else [])
        digests = sorted(d for k, d in wanted.explicit if k == key_id)
        if digests and candidates:
            matched = subject_matches(spark, base, candidates, digests)
            parts.append(
                matched.select(
                    *row_keys, F.lit(key_id).alias("key_id"), "subject", F.lit(None).cast("long").alias("before")
                )
            )
        points = sorted((d, p, o) for k, d, p, o in wanted.tombstones if k == key_id)
        tombstoned = subjects.tombstoned(key_id, key)
        if points and tombstoned is not None:
            parts.append(_tombstone_matches(spark, base, tombstoned, points, key_id))
    common = wanted.common_key_ids()
    if subjects.stored and common is not None:
        parts.append(_strays(base, subjects, common))
    return union(parts)


def _tombstone_matches(
    spark: SparkSession, base: DataFrame, tombstoned: Column, points: list[tuple[str, int, int]], key_id: str
) -> DataFrame:
    """The rows whose key's digest (``tombstoned``: hashed in the scan, or stored hashed) is a tombstone's in its
    Kafka partition, below its offset (a broadcast join of the tombstones, never a filter of literals)."""
    table = spark.createDataFrame(points, "digest string, point_partition int, before long")
    joined = base.join(
        F.broadcast(table),
        (tombstoned == F.col("digest"))
        & (F.col("_kafka_partition") == F.col("point_partition"))
        & (F.col("_kafka_offset") < F.col("before")),
    )
    return joined.select(
        "file",
        "_kafka_partition",
        "_kafka_offset",
        F.lit(key_id).alias("key_id"),
        F.col("digest").alias("subject"),
        "before",
    )


def _strays(base: DataFrame, subjects: SubjectColumns, common: frozenset[str]) -> DataFrame:
    """(file, key id) of every row whose stored pseudonyms are of a key id some explicit subject has no digest under."""
    strays = base.where(subjects.key_id.isNotNull() & ~subjects.key_id.isin(sorted(common)))
    null = F.lit(None)
    return strays.select(
        "file",
        null.cast("int").alias("_kafka_partition"),
        null.cast("long").alias("_kafka_offset"),
        subjects.key_id.alias("key_id"),
        null.cast("string").alias("subject"),
        null.cast("long").alias("before"),
    )
