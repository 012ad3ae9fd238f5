"""The subject index: which partitions of a table hold which hashed subjects, so that an erasure batch reads only the
partitions its requests can touch instead of every file of the table.

Parquet statistics cannot prune identifiers (a row group's min and max of random ids or digests span nearly all of
them), so the erasure job keeps an index of its own, per erasable table, at ``TablePrefix.subject_index_prefix``:

- segments of Parquet, three columns: ``digest``, the first 60 bits of a subject's keyed hash (``subjects``) as a
  long, ``partition``, the partition path holding a row of that subject, and ``key_id``, the key of a stored
  pseudonym (``_pseudonym_key_id``; null for a clear field or key, hashed under every key the job holds, so a
  request digested under the key a rotation replaced finds them too); distinct and sorted by digest;
- a record (``index.json``): the segments, the digests' signature (keys and columns; another one rebuilds the
  index) and every data object the segments cover.

Every run brings the index up to date before it looks anything up (``refresh``): objects it does not cover are
scanned once into a new segment; objects a compaction run wrote from objects the index already covered are covered
as they are, unscanned (their rows are a subset of their inputs', in the same partition); objects gone are dropped.
Past ``MAX_SEGMENTS`` the segments are merged into one (entries of partitions with no object left are dropped). The
record is written with ``If-Match`` (``If-None-Match: *`` for the first), so of two overlapping runs only one
commits its view; a run that loses the race, or whose refresh fails, scans the table whole, as without an index.

When a batch is done, the partitions it rewrote are forgotten (``refresh(forget=...)``): their entries dropped,
their objects read again, every segment merged into one and every version of the old ones deleted, so no entry of
an erased subject outlives its rows.

A lookup (``Index.hits``) gives the partitions whose entries carry a wanted digest (or stored pseudonyms of a key
id some request has no digest under), and the batch's scan
(``matching.find``) reads those and any partition with an object the index does not cover (written since the
refresh): a 60-bit prefix can only add partitions to read, never hide one.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafkalake.layout import PARTITION_PATH_RE, Partition, is_compaction_output
from kafkalake.lease import lost_race
from kafkalake.personal import Keyring
from kafkalake.s3_location import s3_uri
from kafkalake.topic_catalog import Topic
from spark_jobs.compaction.manifest import ManifestStore
from spark_jobs.erasure.purge import versions
from spark_jobs.erasure.subjects import (
    by_schema_version,
    data_objects,
    partition_of,
    read_objects,
    signature,
    subject_columns,
    union,
)

DIGEST_HEX = 15
"""Hex characters of a digest the index keeps: 60 bits, a positive long."""
MAX_SEGMENTS = 8
ORPHAN_AGE = timedelta(days=1)
"""A segment no record names is deleted this long after it was written (a run writing one commits within hours)."""
OBJECTS_PER_FILE = 2000
"""Data objects a segment file covers (an hourly partition's compacted files: about a quarter of a year)."""


def index_digest(digest: str) -> int:
    """The index's form of a 64-hex-character digest."""
    return int(digest[:DIGEST_HEX], 16)


@dataclass
class IndexRecord:
    signature: str
    segments: list[str] = field(default_factory=list)
    """Segment folder keys, each complete."""
    covered: list[str] = field(default_factory=list)
    """Data object keys whose subjects the segments hold."""
    updated_at: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()


@dataclass
class Refresh:
    """What one refresh did: new data objects scanned, covered from their compaction inputs, dropped as gone; objects
    of forgotten partitions read again."""

    scanned: int = 0
    derived: int = 0
    dropped: int = 0
    merged: bool = False
    reread: int = 0


@dataclass(frozen=True)
class Index:
    """A table's index as a run committed it, and what its refresh did."""

    bucket: str
    segments: tuple[str, ...]
    covered: frozenset[str]
    refreshed: Refresh = field(default_factory=Refresh)

    def hits(self, spark: SparkSession, digests: Iterable[str], key_ids: Collection[str] | None = None) -> Hits:
        """The partitions that may hold one of ``digests``; with ``key_ids``, also those holding stored pseudonyms
        of any other key id (no digest of the batch can match those rows: the scan reads them to say so)."""
        wanted = sorted({index_digest(d) for d in digests})
        found: set[str] = set()
        if (wanted or key_ids is not None) and self.segments:
            frame = spark.read.parquet(*(s3_uri(self.bucket, s) for s in self.segments))
            partitions = partitions_holding(spark, frame, wanted)
            if key_ids is not None:
                other = F.col("key_id").isNotNull() & ~F.col("key_id").isin(sorted(key_ids))
                partitions = partitions.unionByName(frame.where(other).select("partition"))
            rows = partitions.distinct().collect()
            found = {row["partition"] for row in rows}
        return Hits(frozenset(found), self.covered)


def partitions_holding(spark: SparkSession, entries: DataFrame, digests: list[int]) -> DataFrame:
    """The partitions of the index's ``entries`` that carry one of ``digests``. Joined with them, never filtered by
    them: a plan shows a filter's literal values, and the job's plans are kept in its event log and Spark UI."""
    asked = spark.createDataFrame([(d,) for d in digests], "digest long")
    return entries.join(F.broadcast(asked), "digest").select("partition")


@dataclass(frozen=True)
class Hits:
    """Where a batch's rows can be: partitions the index names, and any object it does not cover."""

    partitions: frozenset[str]
    covered: frozenset[str]

    def wants(self, name: str) -> bool:
        match = PARTITION_PATH_RE.search(name)
        return name not in self.covered or (match is not None and match.group(1) in self.partitions)


def refresh(
    spark: SparkSession,
    s3: Any,
    bucket: str,
    topic: Topic,
    keys: Keyring,
    *,
    forget: Collection[str] = (),
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    say: Callable[[str], None] = print,
) -> Index | None:
    """The table's index, brought up to date and committed; None when another run committed first. The entries of
    the ``forget`` partitions (an erasure rewrote them) are dropped and their objects read again, all segments
    merged into one, and the old segments' every version deleted: no entry of an erased subject is left."""
    record_key = topic.prefix.subject_index_key()
    stored, etag = _load(s3, bucket, record_key)
    wanted = signature(topic, keys)
    record = stored if stored is not None and stored.signature == wanted else IndexRecord(wanted)
    previous = set(record.covered)
    current = {n for prefix in topic.prefix.data_object_prefixes() for n in data_objects(s3, bucket, prefix)}
    new = current - previous
    derived = _derived(s3, bucket, topic, new, previous)
    reread = {n for n in current if (m := PARTITION_PATH_RE.search(n)) and m.group(1) in forget}
    todo = sorted((new - derived) | reread)
    done = Refresh(len((new - derived) - reread), len(derived - reread), len(previous - current), reread=len(reread))
    segments = list(record.segments)
    entries = _entries(spark, bucket, topic, keys, todo) if todo else None
    if segments and (forget or (entries is not None and len(segments) + 1 > MAX_SEGMENTS)):
        kept = {m.group(1) for m in map(PARTITION_PATH_RE.search, current) if m} - set(forget)
        old = spark.read.parquet(*(s3_uri(bucket, s) for s in segments)).where(F.col("partition").isin(sorted(kept)))
        entries = old if entries is None else entries.unionByName(old)
        segments, done.merged = [], True
    if entries is not None:
        segment_id = f"{now().strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}"
        segment = topic.prefix.subject_index_segment_prefix(segment_id)
        _write(entries, s3_uri(bucket, segment), len(current) if done.merged else len(todo))
        segments.append(segment)
    covered = sorted((previous & current) | new)
    if stored is not None and stored.signature == wanted and covered == stored.covered and segments == stored.segments:
        return Index(bucket, tuple(segments), frozenset(covered), done)
    committed = IndexRecord(wanted, segments, covered, now().isoformat())
    condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
    try:
        s3.put_object(Bucket=bucket, Key=record_key, Body=committed.to_json(), **condition)
    except ClientError as exc:
        if not lost_race(exc):
            raise
        say(f"subject index of {topic.database}.{topic.table}: another run updated it first; this run scans whole")
        return None
    _delete_segments(s3, bucket, topic, named=segments, dropped=set(stored.segments if stored else ()), now=now())
    say(
        f"subject index of {topic.database}.{topic.table}: {done.scanned} objects scanned, {done.derived} covered "
        f"from their compaction inputs, {done.dropped} gone, {done.reread} read again (rows erased); "
        f"{len(covered)} objects in {len(segments)} segments" + (" (merged)" if done.merged else "")
    )
    return Index(bucket, tuple(segments), frozenset(covered), done)


def _load(s3: Any, bucket: str, key: str) -> tuple[IndexRecord | None, str | None]:
    try:
        got = s3.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("NoSuchKey", "404"):
            return None, None
        raise
    return IndexRecord(**json.loads(got["Body"].read())), got["ETag"]


def _derived(s3: Any, bucket: str, topic: Topic, new: set[str], covered: set[str]) -> set[str]:
    """The new objects a compaction run wrote from objects the index covers, or from new raw objects this refresh
    scans (its partition's manifest says so)."""
    outputs_by_partition: dict[str, list[str]] = {}
    for name in new:
        match = PARTITION_PATH_RE.search(name)
        if match and is_compaction_output(name):
            outputs_by_partition.setdefault(match.group(1), []).append(name)
    base = covered | {n for n in new if not is_compaction_output(n)}
    store = ManifestStore(s3, bucket)
    found: set[str] = set()
    for path, names in outputs_by_partition.items():
        manifest = store.load(topic.prefix.compaction_manifest_key(Partition.from_path(path)))
        if manifest is not None and manifest.inputs and set(manifest.inputs) <= base:
            found |= {n for n in names if n in manifest.outputs}
    return found


def _entries(spark: SparkSession, bucket: str, topic: Topic, keys: Keyring, names: list[str]) -> DataFrame | None:
    """(digest, partition, key id) of every subject of every row of ``names``: a clear field or key hashed under
    each of ``keys`` (key id null), a stored pseudonym as it is, with its row's key id; None when their files hold
    no subject."""
    frames = []
    for group in by_schema_version(names):
        frame = read_objects(spark, bucket, group)
        subjects = subject_columns(frame, topic)
        file = partition_of(F.input_file_name()).alias("partition")
        hashed = [h for key in keys.keys for h in [*subjects.hashed(key), subjects.key_hash(key)] if h is not None]
        null = F.lit(None).cast("string")
        for columns, key_id in ((hashed, null), (subjects.stored, subjects.key_id)):
            if columns:
                rows = frame.select(file, F.explode(F.array(*columns)).alias("subject"), key_id.alias("key_id"))
                frames.append(
                    rows.where(F.col("subject").isNotNull()).select(
                        F.conv(F.substring("subject", 1, DIGEST_HEX), 16, 10).cast("long").alias("digest"),
                        "partition",
                        "key_id",
                    )
                )
    return union(frames)


def _write(entries: DataFrame, uri: str, objects: int) -> None:
    """The segment's files, each holding one range of digests, sorted (they compress well, and a merge's output is
    the same whatever the order of its inputs); one file per ``OBJECTS_PER_FILE`` data objects it covers. A lookup
    joins them with the wanted digests and reads them whole: a filter of literal digests would let the lookup skip
    row groups by their statistics, but it would print each erased subject's digest in the job's plan, and so in
    its event log and Spark UI."""
    files = max(1, math.ceil(objects / OBJECTS_PER_FILE))
    (
        entries.distinct()
        .repartitionByRange(files, "digest")
        .sortWithinPartitions("digest", "partition")
        .write.mode("errorifexists")
        .parquet(uri)
    )


def _delete_segments(s3: Any, bucket: str, topic: Topic, *, named: list[str], dropped: set[str], now: datetime) -> None:
    """Every version of the segments the committed record no longer names (merged, or of an old signature), and of
    those a run left unnamed for ``ORPHAN_AGE`` (it died, or lost the race), and the noncurrent versions under the
    named ones (Spark's temporary files); never a new segment another run may still be about to name. By version
    id: the bucket is versioned, and a plain delete would keep their entries as noncurrent versions."""

    def doomed(version: dict[str, Any]) -> bool:
        if any(version["Key"].startswith(s) for s in named):
            return version["Marker"] or not version["IsLatest"]
        return any(version["Key"].startswith(s) for s in dropped) or version["LastModified"] < now - ORPHAN_AGE

    gone = [
        {"Key": v["Key"], "VersionId": v["VersionId"]}
        for v in versions(s3, bucket, f"{topic.prefix.subject_index_prefix()}segments/")
        if doomed(v)
    ]
    for start in range(0, len(gone), 1000):
        s3.delete_objects(Bucket=bucket, Delete={"Objects": gone[start : start + 1000], "Quiet": True})
