"""The S3 key layout: the one place that decides every key kafkalake writes, and parses them.

Data objects live under a deterministic, Hive-style layout::

    data/<env>/<company>/<domain>/<topic>/schema_version=<n>/dt=<YYYY-MM-DD>/hour=<HH>/
        <topic>+<kafka partition>+<first offset>-<last offset>.parquet

The formatter and the parser are both generated from ``_DATA_SEGMENTS`` so they cannot drift apart; the file is
past 400 lines because every key the system writes stays here beside that one parser.
Quarantine and the durable records live under their own top-level prefixes, which the data parser never matches.
Compaction output lives under the table's location, in a hidden tree beside the raw partitions. Per topic
(``TablePrefix``)::

    data/<topic path>/_compacted/<partition path>/run-<id>/part-<n>.parquet  a rewrite's output
    quarantine/<topic path>/dt=<YYYY-MM-DD>/<topic>+<partition>+<first>-<last>.parquet
    restricted/quarantine/<topic path>/dt=<YYYY-MM-DD>/...                   the same, for topics with personal data
    state/<topic path>/plan.json                                            the archiver's plan in progress
    state/<topic path>/receipts/<plan created>-<ranges hash>.json           a carried-out plan (the offset audit)
    state/<topic path>/compaction/<partition path>/manifest.json            a partition rewrite's commit record
    state/<topic path>/late/<partition path>/late.json                      the maintainer's late-data marker
    state/<topic path>/complete/<partition path>/event.json                 the claim on a PartitionComplete event

Erasure requests and receipts are per environment: ``erasure/<env>/requests/<id>.json``,
``erasure/<env>/receipts/<id>.json``; so is each erasable table's subject index (``TablePrefix.subject_index_prefix``):
``erasure/<env>/index/<company>/<domain>/<topic>/index.json`` and its ``segments/<id>/`` of Parquet.

Where compaction output lives, and why. A Glue partition points either at its raw directory or at one run
directory of compaction output; every reader must read exactly one of them, at every moment, with its defaults:

- Athena (engine v3), Trino's Hive connector and Spark on EMR/Glue read a partitioned table through its Glue
  partitions: they list each partition's location and only that, recursively or not (Trino's
  ``hive.recursive-directories`` is off by default; Spark lists the location's files), and skip names starting with
  ``_`` or ``.`` *below* the listed location, never the location itself (Trino's ``HiveFileIterator`` tests the
  path relative to the listed root; Spark 3.5 tests the names of the listed children; Hive and Hadoop input formats
  filter children the same way). So a run directory must not lie inside a raw partition directory (the raw
  directory would list it), and may lie inside a hidden directory.
- AWS SDK for pandas (``wr.s3.read_parquet_table``) without a ``partition_filter`` lists the *table's* location
  recursively, with no hidden-name filter (only ``_SUCCESS`` files are skipped), and takes partition values from
  every ``k=v`` path segment; with a ``partition_filter`` it lists each Glue partition's location and refuses one
  that is not under the table's location. Lake Formation, too, grants on the table's location and expects its
  partitions below it. So a run directory must lie under the table's location, its path must carry the
  partition's ``k=v`` segments and no other ``=`` (the run directory is ``run-<id>``, not ``run=<id>``).
- Crawlers, ``MSCK REPAIR TABLE`` and Spark's partition discovery walk the table's location: Hive and Spark skip
  hidden directories, and the crawler's S3 target excludes ``_compacted/**`` (``kafkalake.glue.CrawlerSpec``), so
  none of them makes the output a table or a partition. S3 events of output keys match the notification filter
  (``data/`` … ``.parquet``); the parser rejects them as compaction output (``is_compaction_output``).

Hence ``data/<topic path>/_compacted/<partition path>/run-<id>/``: under the table's location, hidden, beside and
never inside the raw partitions. No layout makes a whole-table SDK for pandas read without a filter exact between
a swap and the clean-up: it lists every file under the table's location, the replaced inputs and the run's output
alike, so it counts that partition twice until the clean-up deletes the inputs (docs/compaction.md says which reads are
exact when). Output written before this layout lies under ``compacted/<topic path>/`` (``legacy_compacted_prefix``):
partitions pointing there are still read by every engine that reads Glue's locations (not by SDK for pandas with a
filter, and not under Lake Formation), and the compactor moves them here at its next runs.

The module runs past 300 lines on purpose: every key the system writes, its parser and this reasoning stay in one
place.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

DATA_ROOT: Final = "data"
QUARANTINE_ROOT: Final = "quarantine"
COMPACTED_DIR: Final = "_compacted"
"""The hidden folder of compaction output under each table's location (see the module's docstring)."""
LEGACY_COMPACTED_ROOT: Final = "compacted"
"""Where compaction output lived before it moved under the tables' locations: read, moved, expired, never written."""
STATE_ROOT: Final = "state"
RESTRICTED_ROOT: Final = "restricted"
"""Raw records of topics with personal fields: written with their own KMS key, expired after a short retention, and
readable only by roles granted that key (``kafkalake.personal.QuarantineMode.RESTRICTED``)."""
RESTRICTED_QUARANTINE_ROOT: Final = f"{RESTRICTED_ROOT}/{QUARANTINE_ROOT}"
LATE_DATA_FILE: Final = "late.json"
LATE_DATA_MARKERS: Final = f"{STATE_ROOT}/*/late/*"
"""Every topic's late-data markers, as an IAM object pattern (see ``TablePrefix.late_data_prefix``)."""
COMPLETENESS_CLAIM_FILE: Final = "event.json"
COMPLETENESS_CLAIMS: Final = f"{STATE_ROOT}/*/complete/*"
"""Every topic's completeness-event claims, as an IAM object pattern (see ``TablePrefix.completeness_claim_key``)."""
ERASURE_ROOT: Final = "erasure"
"""Erasure requests and their receipts, per environment (``erasure_prefix``): hashed subjects only."""


def restricted_encryption(key: str, restricted_key_arn: str | None) -> dict[str, str]:
    """The PutObject arguments that write ``key`` with the restricted KMS key when it lies under the restricted root
    (the bucket refuses any other there); none elsewhere, or where no restricted key is configured (local stack)."""
    if key.startswith(f"{RESTRICTED_ROOT}/") and restricted_key_arn:
        return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": restricted_key_arn}
    return {}


NON_DATA_ROOTS: Final = (QUARANTINE_ROOT, LEGACY_COMPACTED_ROOT, STATE_ROOT, RESTRICTED_ROOT, ERASURE_ROOT)

NAME_PATTERN: Final = r"[a-z0-9][a-z0-9_-]*"
"""A path segment derived from a name (environment, company, domain, topic): lower case, no dots."""

PARTITION_KEYS: Final = ("schema_version", "dt", "hour")
"""The Hive partition columns of every data table, in key order."""

# One specification: (group name, literal prefix inside the segment, pattern).
_DATA_SEGMENTS: Final = (
    ("env", "", NAME_PATTERN),
    ("company", "", NAME_PATTERN),
    ("domain", "", NAME_PATTERN),
    ("topic", "", NAME_PATTERN),
    ("schema_version", "schema_version=", r"[1-9][0-9]{0,5}"),
    ("dt", "dt=", r"[0-9]{4}-[0-9]{2}-[0-9]{2}"),
    ("hour", "hour=", r"[0-9]{2}"),
)
_FILE_PATTERN: Final = (
    r"(?P<file_topic>" + NAME_PATTERN + r")\+(?P<kafka_partition>0|[1-9][0-9]{0,5})"
    r"\+(?P<first_offset>0|[1-9][0-9]{0,18})-(?P<last_offset>0|[1-9][0-9]{0,18})\.parquet"
)
DATA_KEY_RE: Final = re.compile(
    "^"
    + re.escape(DATA_ROOT)
    + "/"
    + "/".join(f"{re.escape(lit)}(?P<{name}>{pat})" for name, lit, pat in _DATA_SEGMENTS)
    + "/"
    + _FILE_PATTERN
    + "$"
)


COMPACTION_OUTPUT_RE: Final = re.compile(
    "^(?:"
    + re.escape(DATA_ROOT)
    + "/"
    + "/".join([NAME_PATTERN] * 4)
    + "/"
    + re.escape(COMPACTED_DIR)
    + "|"
    + re.escape(LEGACY_COMPACTED_ROOT)
    + ")/"
)
"""A key (or key prefix) of compaction output: under a table's ``_compacted/`` folder, or the legacy root."""

PARTITION_PATH_RE: Final = re.compile(
    "(" + "/".join(f"{re.escape(lit)}{pat}" for _, lit, pat in _DATA_SEGMENTS[4:]) + "/)"
)
"""A partition's path (``schema_version=…/dt=…/hour=…/``) inside a data key, raw or compaction output; group 1. Java's
regex reads it the same (the erasure job extracts it in Spark)."""

PARTITION_SEGMENT_RE: Final = {
    name: re.compile("^" + re.escape(lit) + f"(?P<value>{pat})/$") for name, lit, pat in _DATA_SEGMENTS[4:]
}
"""Each partition level of a data prefix (``schema_version=1/``, ``dt=…/``, ``hour=…/``), as listings return them."""


class LayoutError(ValueError):
    """A key that the data layout did not produce; the message says why."""


def to_segment(name: str) -> str:
    """The path segment for a name: lower case, dots and spaces become hyphens."""
    segment = re.sub(r"[^a-z0-9_-]+", "-", name.strip().lower()).strip("-")
    if not re.fullmatch(NAME_PATTERN, segment):
        raise LayoutError(f"name {name!r} gives no usable path segment; use letters, digits, '-' or '_'")
    return segment


@dataclass(frozen=True, order=True)
class TablePrefix:
    """Where one topic's data lives: ``data/<env>/<company>/<domain>/<topic>/``."""

    env: str
    company: str
    domain: str
    topic: str

    def __post_init__(self) -> None:
        for field_name in ("env", "company", "domain", "topic"):
            value = getattr(self, field_name)
            if not re.fullmatch(NAME_PATTERN, value):
                raise LayoutError(f"{field_name}={value!r} is not a layout segment (expected {NAME_PATTERN})")

    def _path(self) -> str:
        return f"{self.env}/{self.company}/{self.domain}/{self.topic}/"

    def data_prefix(self) -> str:
        return f"{DATA_ROOT}/{self._path()}"

    def quarantine_prefix(self, *, restricted: bool = False) -> str:
        """Undecodable records; under the restricted root when they hold personal data."""
        return f"{RESTRICTED_QUARANTINE_ROOT if restricted else QUARANTINE_ROOT}/{self._path()}"

    def compacted_prefix(self) -> str:
        """The table's compaction output: hidden, under the table's location, beside the raw partitions."""
        return f"{self.data_prefix()}{COMPACTED_DIR}/"

    def legacy_compacted_prefix(self) -> str:
        """Where the table's compaction output lived before it moved under the table's location."""
        return f"{LEGACY_COMPACTED_ROOT}/{self._path()}"

    def data_object_prefixes(self) -> tuple[str, str]:
        """Every prefix under which the table's data objects lie: its location (raw partitions and their
        ``_compacted/`` output) and the legacy compaction root, which a partition's Glue location may still name
        until the compactor moves it. What looks for a subject's rows (the erasure's scan and index) lists both."""
        return self.data_prefix(), self.legacy_compacted_prefix()

    def partition_prefixes(self, partition: Partition) -> tuple[str, ...]:
        """The folders of one partition's data objects: raw, compaction output, legacy compaction output."""
        return tuple(
            p + partition.path() for p in (self.data_prefix(), self.compacted_prefix(), self.legacy_compacted_prefix())
        )

    def state_prefix(self) -> str:
        return f"{STATE_ROOT}/{self._path()}"

    def archive_lease_key(self) -> str:
        """The topic's archiver lease (``kafkalake.lease``): which run holds the topic, the plan it is carrying
        out, the offsets finished plans reached. Named ``plan.json`` since it replaced the bare plan object, which
        a run adopts for a redo when it finds one."""
        return f"{self.state_prefix()}plan.json"

    def late_data_prefix(self) -> str:
        """Markers of partitions that received objects after they were compacted: the maintainer writes one, the
        compactor takes those partitions first and deletes the marker once it compacted them again."""
        return f"{self.state_prefix()}late/"

    def late_data_key(self, partition: Partition) -> str:
        return f"{self.late_data_prefix()}{partition.path()}{LATE_DATA_FILE}"

    def completeness_claim_key(self, partition: Partition) -> str:
        """The claim on ``partition``'s ``PartitionComplete`` event, beside the late-data markers: a maintainer drain
        creates it (``If-None-Match: *``) before publishing, and only the drain whose write created it publishes,
        so overlapping drains publish each partition's event once."""
        return f"{self.completeness_claims_prefix()}{partition.path()}{COMPLETENESS_CLAIM_FILE}"

    def completeness_claims_prefix(self) -> str:
        """The table's ``completeness_claim_key`` objects: one per hour (and schema version) announced complete."""
        return f"{self.state_prefix()}complete/"

    def receipts_prefix(self) -> str:
        """The archiver's receipts, one per carried-out plan: what the offset audit reads."""
        return f"{self.state_prefix()}receipts/"

    def receipt_key(self, plan_id: str) -> str:
        """A plan's receipt, named by the plan's id (``plan_id``): a redo writes the same key, and receipts sort by
        their plans' creation."""
        return f"{self.receipts_prefix()}{plan_id}.json"

    def plan_of_receipt(self, receipt_key: str) -> str:
        """The plan id a receipt key of this table names (``receipt_key``'s inverse)."""
        return receipt_key.removeprefix(self.receipts_prefix()).removesuffix(".json")

    def compaction_prefix(self) -> str:
        """The partition rewrites' manifests, beside the receipts."""
        return f"{self.state_prefix()}compaction/"

    def compaction_lease_key(self) -> str:
        """The table's rewrite lease (``kafkalake.lease``): which run may swap and clean its partitions."""
        return f"{self.compaction_prefix()}lease.json"

    def compaction_manifest_key(self, partition: Partition) -> str:
        """One partition's rewrite manifest: the record of its commit protocol."""
        return f"{self.compaction_prefix()}{partition.path()}manifest.json"

    def compaction_output_prefix(self, partition: Partition, run_id: str) -> str:
        """The run directory a rewrite of ``partition`` writes its files to, never inside a raw directory; its path
        holds the partition's ``k=v`` segments and no other ``=``."""
        return f"{self.compacted_prefix()}{partition.path()}run-{run_id}/"

    def subject_index_prefix(self) -> str:
        """The table's subject index (``spark_jobs.erasure.index``): which partitions hold which hashed subjects,
        kept by the erasure job beside the environment's requests, never under the table's location."""
        return f"{subject_indexes_prefix(self.env)}{self.company}/{self.domain}/{self.topic}/"

    def subject_index_key(self) -> str:
        """The index's record: its segments and the objects they cover (written only with ``If-Match``)."""
        return f"{self.subject_index_prefix()}index.json"

    def subject_index_segment_prefix(self, segment_id: str) -> str:
        """One segment of the index: a folder of Parquet written by one run, named in the record once complete."""
        return f"{self.subject_index_prefix()}segments/{segment_id}/"

    def quarantine_key(
        self, dt: date, kafka_partition: int, first_offset: int, last_offset: int, *, restricted: bool = False
    ) -> str:
        """Undecodable records of one Kafka partition and day; never matched by the data parser."""
        return (
            f"{self.quarantine_prefix(restricted=restricted)}dt={dt.isoformat()}/"
            f"{self.topic}+{kafka_partition}+{first_offset}-{last_offset}.parquet"
        )


@dataclass(frozen=True, order=True)
class Partition:
    """One Hive partition of a data table."""

    schema_version: int
    dt: date
    hour: int

    def __post_init__(self) -> None:
        if not 1 <= self.schema_version <= 999_999:
            raise LayoutError(f"schema_version={self.schema_version} is outside 1..999999")
        if not 0 <= self.hour <= 23:
            raise LayoutError(f"hour={self.hour} is outside 0..23")

    def values(self) -> list[str]:
        """Glue partition values, in ``PARTITION_KEYS`` order."""
        return [str(self.schema_version), self.dt.isoformat(), f"{self.hour:02d}"]

    def path(self) -> str:
        return "/".join(f"{k}={v}" for k, v in zip(PARTITION_KEYS, self.values(), strict=True)) + "/"

    @property
    def start(self) -> datetime:
        """The first instant of the partition's hour (UTC)."""
        return datetime(self.dt.year, self.dt.month, self.dt.day, self.hour, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        """The instant after the partition's hour: once it is past (plus a delay), no new data is expected."""
        return self.start + timedelta(hours=1)

    def previous(self) -> Partition:
        """The same schema version, one hour earlier."""
        earlier = self.start - timedelta(hours=1)
        return Partition(self.schema_version, earlier.date(), earlier.hour)

    @classmethod
    def from_values(cls, values: list[str]) -> Partition:
        version, dt, hour = values
        return cls(int(version), date.fromisoformat(dt), int(hour))

    @classmethod
    def from_path(cls, path: str) -> Partition:
        """The partition of a path ``schema_version=…/dt=…/hour=…/`` (``PARTITION_PATH_RE``'s group)."""
        return cls.from_values([part.split("=", 1)[1] for part in path.rstrip("/").split("/")])


@dataclass(frozen=True, order=True)
class DataKey:
    """A parsed data object key."""

    table: TablePrefix
    partition: Partition
    kafka_partition: int
    first_offset: int
    last_offset: int

    def __post_init__(self) -> None:
        if self.kafka_partition < 0 or self.first_offset < 0:
            raise LayoutError("Kafka partition and offsets must be non-negative")
        if self.last_offset < self.first_offset:
            raise LayoutError(f"offset range {self.first_offset}-{self.last_offset} is reversed")

    def partition_prefix(self) -> str:
        return self.table.data_prefix() + self.partition.path()

    def file_name(self) -> str:
        return f"{self.table.topic}+{self.kafka_partition}+{self.first_offset}-{self.last_offset}.parquet"

    def key(self) -> str:
        return self.partition_prefix() + self.file_name()


def plan_id(plan_created_at: str, ranges: Mapping[int, tuple[int, int]]) -> str:
    """An archiver plan's id, from the stored plan (a redo finds the same): its creation time, then a digest of its
    offset ranges. It names the plan's receipt (``TablePrefix.receipt_key``), its Iceberg commit and its tombstones'
    erasure request."""
    stamp = datetime.fromisoformat(plan_created_at).strftime("%Y%m%dT%H%M%S%fZ")
    digest = hashlib.sha256(json.dumps({p: [s, e] for p, (s, e) in sorted(ranges.items())}).encode())
    return f"{stamp}-{digest.hexdigest()[:8]}"


def erasure_prefix(env: str) -> str:
    """An environment's erasure records: ``requests/<id>.json`` (put by ``kafkalake erase``, by hand in AWS, or by
    the archiver for a plan's tombstones) and ``receipts/<id>.json`` (the erasure job's proof, one per request)."""
    if not re.fullmatch(NAME_PATTERN, env):
        raise LayoutError(f"env={env!r} is not a layout segment (expected {NAME_PATTERN})")
    return f"{ERASURE_ROOT}/{env}/"


def erasure_requests_prefix(env: str) -> str:
    return f"{erasure_prefix(env)}requests/"


def subject_indexes_prefix(env: str) -> str:
    """The environment's subject indexes (``TablePrefix.subject_index_prefix``), whose old segments the erasure job
    deletes by version id."""
    return f"{erasure_prefix(env)}index/"


def erasure_request_key(env: str, request_id: str) -> str:
    return f"{erasure_requests_prefix(env)}{request_id}.json"


def erasure_lease_key(env: str) -> str:
    """The erasure job's lease (``kafkalake.lease``): one run at a time; its work is the batch being carried out."""
    return f"{erasure_prefix(env)}lease.json"


def erasure_receipts_prefix(env: str) -> str:
    return f"{erasure_prefix(env)}receipts/"


def erasure_receipt_key(env: str, request_id: str) -> str:
    return f"{erasure_receipts_prefix(env)}{request_id}.json"


def partition_segment_value(name: str, segment: str) -> str:
    """The value of one partition level's folder name; raise ``LayoutError`` for a folder of another shape."""
    match = PARTITION_SEGMENT_RE[name].match(segment)
    if match is None:
        raise LayoutError(f"{segment!r} is not a {name}=… folder of the data layout")
    return match.group("value")


TABLE_PREFIX_RE: Final = re.compile(
    "^"
    + re.escape(DATA_ROOT)
    + "/"
    + "/".join(f"(?P<{n}>{NAME_PATTERN})" for n in ("env", "company", "domain", "topic"))
    + "/"
)


def table_prefix_of(key: str) -> TablePrefix | None:
    """The table whose location holds ``key`` (any object under ``data/<env>/<company>/<domain>/<topic>/``)."""
    match = TABLE_PREFIX_RE.match(key)
    return TablePrefix(**match.groupdict()) if match else None


def is_compaction_output(key: str) -> bool:
    """Whether ``key`` (or key prefix) is compaction output, in this layout or the legacy one."""
    return COMPACTION_OUTPUT_RE.match(key) is not None


def parse_data_key(key: str) -> DataKey:
    """Parse a decoded data key; raise ``LayoutError`` saying why a key is not one of ours."""
    match = DATA_KEY_RE.match(key)
    if match is None:
        if is_compaction_output(key):
            raise LayoutError(f"{key!r} is compaction output, not a data partition")
        root = key.split("/", 1)[0]
        if root in NON_DATA_ROOTS:
            raise LayoutError(f"{key!r} is under the {root!r} prefix, not a data partition")
        if not key.endswith(".parquet"):
            raise LayoutError(f"{key!r} is not a .parquet data object")
        raise LayoutError(
            f"{key!r} does not match {DATA_ROOT}/<env>/<company>/<domain>/<topic>/schema_version=<n>/"
            "dt=<YYYY-MM-DD>/hour=<HH>/<topic>+<partition>+<first>-<last>.parquet"
        )
    g = match.groupdict()
    if g["file_topic"] != g["topic"]:
        raise LayoutError(f"{key!r}: file name topic {g['file_topic']!r} differs from prefix topic {g['topic']!r}")
    try:
        partition = Partition(int(g["schema_version"]), date.fromisoformat(g["dt"]), int(g["hour"]))
    except ValueError as exc:
        raise LayoutError(f"{key!r}: invalid partition value ({exc})") from exc
    return DataKey(
        table=TablePrefix(g["env"], g["company"], g["domain"], g["topic"]),
        partition=partition,
        kafka_partition=int(g["kafka_partition"]),
        first_offset=int(g["first_offset"]),
        last_offset=int(g["last_offset"]),
    )
