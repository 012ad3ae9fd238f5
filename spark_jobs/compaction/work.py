"""The unit of work every step of a partition rewrite takes, the rewriter that carries it, and what it ends as.

A ``Work`` is one Glue partition being rewritten in this run: its table, the Glue partition as read, and its
manifest (``spark_jobs.compaction.manifest``: the input files and their sizes, the run's output prefix, the state
reached, the digest expected of the output), stored under its manifest key. A ``Rewriter`` holds what the steps
use (Spark, S3, Glue, the manifest store, the knobs, the clock, the output) and the plumbing they share: Spark jobs
of one task per item, isolation of one partition's failure, manifest state changes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypedDict, TypeVar

from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.iceberg import ORPHAN_AGE, SNAPSHOT_RETENTION
from kafkalake.jobspec import COMPACTOR_GRACE_MINUTES, COMPACTOR_MIN_INPUT_FILES, COMPACTOR_TARGET_FILE_MB
from kafkalake.lease import Lease
from kafkalake.topic_catalog import Topic
from spark_jobs.common import Run
from spark_jobs.compaction.manifest import Manifest, ManifestState, ManifestStore

MAX_REASON = 500
"""Characters of a failed Spark job's message a result repeats (Java stack traces run to pages)."""

T = TypeVar("T")


@dataclass(frozen=True)
class Knobs:
    target_file_bytes: int = COMPACTOR_TARGET_FILE_MB * 1024 * 1024
    min_input_files: int = COMPACTOR_MIN_INPUT_FILES
    max_bytes_per_run: int = 50 * 1024**3
    safety_delay: timedelta = timedelta(hours=2)
    grace_period: timedelta = timedelta(minutes=COMPACTOR_GRACE_MINUTES)
    """Longer than the longest query: inputs stay readable for queries that started before the swap."""
    snapshot_retention: timedelta = SNAPSHOT_RETENTION
    """An Iceberg table's snapshots older than this expire (``kafkalake.iceberg.SNAPSHOT_RETENTION``)."""
    orphan_age: timedelta = ORPHAN_AGE
    """Files an Iceberg table does not reference are deleted once older than this (``kafkalake.iceberg.ORPHAN_AGE``)."""


class Action(StrEnum):
    COMPACTED = "compacted"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass
class PartitionResult:
    table: str
    partition: list[str]
    action: Action
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rows: int = 0
    repacked: bool = False
    late: bool = False
    """Taken first: the maintainer saw objects land after the partition's last compaction."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Task seconds spent writing and inspecting this partition's files, wall seconds of its swap."""
    reason: str = ""


@dataclass
class Work:
    """One partition being carried forward in this run."""

    topic: Topic
    manifest: Manifest
    key: str
    """The manifest's S3 key: also the name of this work in the Spark tasks' outcomes."""
    late: bool = False
    """The maintainer left a late-data marker for this partition: its marker goes once the swap is done."""
    planned_here: bool = False
    """Planned by this run (not carried forward): its run directory, named after its inputs, was never written, so
    the write need not list it to clear a crashed attempt's files."""
    failure: str = ""
    refused: str = ""
    """Why the swap was refused (the partition changed since it was planned): left as it was, not a failure."""
    repacked: bool = False
    inspections: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Output key → its merge task's inspection of the file it uploaded (``merging``: taken from the local file, and
    the upload carries its checksum), for verification; empty for a manifest an earlier run wrote."""
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def table(self) -> str:
        return table_name(self.topic)

    @property
    def name(self) -> str:
        return f"{self.table} {'/'.join(self.manifest.partition)}"

    def fail(self, reason: str) -> None:
        self.failure = self.failure or reason


class RewriterOptions(TypedDict, total=False):
    """What a rewriting job may be given beside its tables, with ``Rewriter``'s defaults: the run (its id and lease
    TTL; a new one when absent), the clock and where progress is said."""

    run: Run | None
    now: Callable[[], datetime]
    say: Callable[[str], None]


class Rewriter:
    """What the write, verify, swap and clean steps use. A job that rewrites partitions is a ``Rewriter`` with its
    own selection (``spark_jobs.compaction.job.Compactor``, ``spark_jobs.erasure.job.Eraser``): this constructor is
    theirs."""

    def __init__(
        self,
        spark: SparkSession,
        endpoints: Endpoints,
        topics: Sequence[Topic],
        knobs: Knobs,
        *,
        run: Run | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        say: Callable[[str], None] = print,
    ) -> None:
        self.spark, self.endpoints, self.knobs, self.now, self.say = spark, endpoints, knobs, now, say
        self.topics = list(topics)
        """The tables this job may rewrite."""
        self.identity = run or Run.new(spark)
        self.s3, self.glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
        self.bucket = endpoints.bucket
        self.manifests = ManifestStore(self.s3, self.bucket)
        self.leases: dict[str, Lease] = {}
        """Table name → this run's lease on it; only tables whose lease the run holds are rewritten."""

    def fence(self, item: Work) -> None:
        """Renew the item's table lease before a step readers see (swap, clean-up): ``LeaseLost`` if another run
        took the table over, so a run that stalled past its lease changes nothing more."""
        self.leases[item.table].renew()

    def advance(self, item: Work, state: ManifestState) -> None:
        """The item's manifest moves on to ``state``, in S3 before anything else happens."""
        item.manifest.advance(state, self.now())
        self.manifests.save(item.key, item.manifest)

    def tasks(self, function: Callable[[Any], dict[str, Any]], tasks: list[Any], what: str) -> list[dict[str, Any]]:
        """One Spark job of one task per item of ``tasks``; when the job fails as a whole (a lost worker after its
        retries), an error outcome per task, so the run goes on."""
        if not tasks:
            return []
        context = self.spark.sparkContext
        context.setJobDescription(what)
        try:
            return context.parallelize(tasks, len(tasks)).map(function).collect()
        except Exception as exc:  # noqa: BLE001 - a lost worker fails the Spark job after its retries, not the run
            reason = f"the Spark job failed: {describe(exc)[:MAX_REASON]}"
            return [
                {"work": t.work, "output": getattr(t, "output", ""), "key": getattr(t, "key", ""), "error": reason}
                for t in tasks
            ]
        finally:
            context.setJobDescription(None)  # type: ignore[arg-type]

    @staticmethod
    def isolated(item: Work, step: str, action: Callable[[Work], T]) -> T | None:
        """``action(item)``; a failure marks the item failed (its partition is left as it was), never raises."""
        try:
            return action(item)
        except Exception as exc:  # noqa: BLE001 - one partition's failure never stops the others: reported
            item.fail(f"{step}: {describe(exc)}")
            return None


def table_name(topic: Topic) -> str:
    return f"{topic.database}.{topic.table}"


def describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def grouped(outcomes: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Spark tasks' outcomes by the work they belong to."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for outcome in outcomes:
        found[outcome["work"]].append(outcome)
    return found
