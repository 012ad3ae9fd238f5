"""The maintainer's data access: the only code that calls SQS, Glue, S3, EventBridge and Lake Formation, with the
caches that keep the calls few between warm invocations."""

from __future__ import annotations

import gzip
import json
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from botocore.exceptions import ClientError

from kafkalake.footer import NotParquet, newest_time, read_footer
from kafkalake.glue import (
    BatchOutcome,
    batch_create_partitions,
    batch_get_partitions,
    batch_update_partitions,
    chunks,
)
from kafkalake.layout import Partition, TablePrefix
from kafkalake.lease import create_once
from kafkalake.lftags import column_tags, columns_resource, pairs, table_resource, table_tags
from kafkalake.metrics import MaintainerCount
from kafkalake.s3_location import parse_s3_uri
from lambdas.maintainer.inference import read_footer_columns

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
EVENT_SOURCE = "kafkalake.maintainer"
PartitionKey = tuple[str, str, tuple[str, ...]]
"""(database, table, partition values)."""


@dataclass(frozen=True)
class Clients:
    sqs: Any
    glue: Any
    s3: Any
    events: Any
    lakeformation: Any


class TtlCache(Generic[K, V]):
    """In-memory cache that survives warm invocations; each entry expires after ``ttl`` seconds."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self._items: dict[K, tuple[float, V]] = {}

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None or item[0] < self.clock():
            self._items.pop(key, None)
            return None
        return item[1]

    def put(self, key: K, value: V) -> None:
        self._items[key] = (self.clock() + self.ttl, value)

    def drop(self, key: K) -> None:
        self._items.pop(key, None)

    def drop_where(self, predicate: Callable[[K], bool]) -> None:
        for key in [k for k in self._items if predicate(k)]:
            del self._items[key]


@dataclass
class State:
    """What the maintainer remembers between warm invocations."""

    ttl: float
    clock: Callable[[], float] = time.monotonic
    crawlers: TtlCache[str, bool] = field(init=False)
    tables: TtlCache[tuple[str, str], dict[str, Any]] = field(init=False)
    partitions: TtlCache[PartitionKey, str] = field(init=False)
    """Partitions → the location Glue gave them (empty when Glue holds none, as crawlers may leave it), for the
    late-data check; never taken as proof that Glue still holds the partition (``logic``'s acknowledgement rule)."""
    versions: TtlCache[tuple[str, str, int], bool] = field(init=False)
    completed: TtlCache[PartitionKey, bool] = field(init=False)
    tagged: TtlCache[tuple[str, str], tuple[str, tuple[str, ...]]] = field(init=False)
    """Tables → the sensitivity and personal columns last tagged (re-sent when either changes, or after the TTL)."""

    def __post_init__(self) -> None:
        self.crawlers = TtlCache(self.ttl, self.clock)
        self.tables = TtlCache(self.ttl, self.clock)
        self.partitions = TtlCache(self.ttl, self.clock)
        self.versions = TtlCache(self.ttl, self.clock)
        self.completed = TtlCache(self.ttl, self.clock)
        self.tagged = TtlCache(self.ttl, self.clock)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class Queue:
    """The notification queue."""

    def __init__(self, sqs: Any, url: str, counts: Counter[str]) -> None:
        self.sqs, self.url, self.counts = sqs, url, counts

    def receive(self, max_messages: int, wait_seconds: int) -> list[dict[str, Any]]:
        answer = self.sqs.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=max_messages, WaitTimeSeconds=wait_seconds
        )
        self.counts[MaintainerCount.RECEIVE_CALLS] += 1
        return list(answer.get("Messages", []))

    def delete(self, receipt_handles: list[str]) -> list[str]:
        """Delete in batches of 10; return the failures, described."""
        failures = []
        for chunk in chunks(receipt_handles, 10):
            entries = [{"Id": str(i), "ReceiptHandle": handle} for i, handle in enumerate(chunk)]
            answer = self.sqs.delete_message_batch(QueueUrl=self.url, Entries=entries)
            self.counts[MaintainerCount.DELETED] += len(answer.get("Successful", []))
            for failure in answer.get("Failed", []):
                self.counts[MaintainerCount.DELETE_FAILED] += 1
                failures.append(f"delete failed: {failure.get('Code')} {failure.get('Message', '')}")
        return failures


def publish(events: Any, bus: str, detail: list[dict[str, Any]], counts: Counter[str]) -> None:
    """Each detail as an event of its ``type`` on ``bus``, 10 per ``PutEvents``."""
    entries = [
        {"Source": EVENT_SOURCE, "DetailType": d["type"], "Detail": json.dumps(d), "EventBusName": bus} for d in detail
    ]
    for chunk in chunks(entries, 10):
        answer = events.put_events(Entries=list(chunk))
        counts[MaintainerCount.EVENTS_FAILED] += int(answer.get("FailedEntryCount", 0))


class CachedGlue:
    """Glue tables, partitions and crawlers as the maintainer sees them, cached in ``State``."""

    def __init__(self, glue: Any, state: State, counts: Counter[str]) -> None:
        self.glue, self.state, self.counts = glue, state, counts

    def crawler_exists(self, name: str) -> bool:
        cached = self.state.crawlers.get(name)
        if cached is None:
            try:
                self.glue.get_crawler(Name=name)
                cached = True
            except ClientError as exc:
                if error_code(exc) != "EntityNotFoundException":
                    raise
                cached = False
            self.counts[MaintainerCount.GLUE_READS] += 1
            self.state.crawlers.put(name, cached)
        return cached

    def table(self, database: str, table: str, fresh: bool = False) -> dict[str, Any] | None:
        key = (database, table)
        cached = None if fresh else self.state.tables.get(key)
        if cached is not None:
            return cached
        self.counts[MaintainerCount.GLUE_READS] += 1
        try:
            found: dict[str, Any] = self.glue.get_table(DatabaseName=database, Name=table)["Table"]
        except ClientError as exc:
            if error_code(exc) != "EntityNotFoundException":
                raise
            self.state.tables.drop(key)
            return None
        self.state.tables.put(key, found)
        return found

    def forget_table(self, database: str, table: str) -> None:
        """Drop every cached entry of the table (the table, its partitions, versions and completeness)."""
        self.state.tables.drop((database, table))
        for cache in (self.state.partitions, self.state.versions, self.state.completed):
            cache.drop_where(lambda key: key[:2] == (database, table))

    def start_crawler(self, name: str) -> bool:
        """True when started, False when it was already running."""
        try:
            self.glue.start_crawler(Name=name)
        except ClientError as exc:
            if error_code(exc) != "CrawlerRunningException":
                raise
            self.counts[MaintainerCount.CRAWLERS_ALREADY_RUNNING] += 1
            return False
        self.counts[MaintainerCount.CRAWLERS_STARTED] += 1
        return True

    def create_table(self, database: str, table_input: dict[str, Any]) -> bool:
        """True when created, False when it already existed."""
        try:
            self.glue.create_table(DatabaseName=database, TableInput=table_input)
        except ClientError as exc:
            if error_code(exc) != "AlreadyExistsException":
                raise
            return False
        self.counts[MaintainerCount.TABLES_CREATED] += 1
        return True

    def update_table(self, database: str, table_input: dict[str, Any], version_id: str) -> bool:
        """Glue's optimistic lock: update the table only if it is still at ``version_id`` (the ``VersionId`` its
        ``GetTable`` answer carried). True when updated, False when it changed since (``ConcurrentModification``)."""
        try:
            self.glue.update_table(DatabaseName=database, TableInput=table_input, VersionId=version_id)
        except ClientError as exc:
            if error_code(exc) != "ConcurrentModificationException":
                raise
            self.counts[MaintainerCount.TABLE_UPDATE_CONFLICTS] += 1
            return False
        self.counts[MaintainerCount.TABLES_UPDATED] += 1
        return True

    def has_version_partition(self, database: str, table: str, version: int) -> bool:
        """Whether any partition of ``version`` exists (a crawler registered the version)."""
        self.counts[MaintainerCount.GLUE_READS] += 1
        answer = self.glue.get_partitions(
            DatabaseName=database, TableName=table, Expression=f"schema_version={version}", MaxResults=1
        )
        return bool(answer.get("Partitions"))

    def partitions(
        self, database: str, table: str, values: Iterable[tuple[str, ...]]
    ) -> dict[tuple[str, ...], dict[str, Any]]:
        """The existing partitions among ``values``."""
        found, calls = batch_get_partitions(self.glue, database, table, values)
        self.counts[MaintainerCount.GLUE_READS] += calls
        return found

    def create_partitions(self, database: str, table: str, inputs: list[dict[str, Any]]) -> BatchOutcome:
        """Create the partitions; one that already exists is confirmed (``BatchOutcome.existing``), not added."""
        outcome = batch_create_partitions(self.glue, database, table, inputs)
        self.counts[MaintainerCount.CREATE_PARTITION_CALLS] += outcome.calls
        self.counts[MaintainerCount.PARTITIONS_ADDED] += len(outcome.done - outcome.existing)
        return outcome

    def update_partitions(self, database: str, table: str, inputs: list[dict[str, Any]]) -> BatchOutcome:
        return batch_update_partitions(self.glue, database, table, inputs)


class TagsRefused(RuntimeError):
    """Lake Formation did not attach a table's LF-tags: the table fails for this drain, its messages stay."""


class LakeTags:
    """The LF-tags of the tables the maintainer creates or meets (``kafkalake.lftags``), sent once per cache
    period and again when what they say changes."""

    def __init__(self, lakeformation: Any, state: State, counts: Counter[str]) -> None:
        self.lakeformation, self.state, self.counts = lakeformation, state, counts

    def tag(self, database: str, table: str, sensitivity: str, personal_columns: Sequence[str]) -> bool:
        """The personal columns first, then the table: a failure in between leaves the table untagged, so its
        columns count as personal by its database's tags. True when tags were sent."""
        wanted = (sensitivity, tuple(sorted(personal_columns)))
        if self.state.tagged.get((database, table)) == wanted:
            return False
        name = f"{database}.{table}"
        if personal_columns:
            self._add(columns_resource(database, table, personal_columns), column_tags(), f"the columns of {name}")
        self._add(table_resource(database, table), table_tags(sensitivity), name)
        self.state.tagged.put((database, table), wanted)
        self.counts[MaintainerCount.TABLES_TAGGED] += 1
        return True

    def _add(self, resource: dict[str, Any], tags: dict[str, str], what: str) -> None:
        answer = self.lakeformation.add_lf_tags_to_resource(Resource=resource, LFTags=pairs(tags))
        failures = answer.get("Failures") or []
        if failures:
            errors = sorted({f"{f['Error'].get('ErrorCode')}: {f['Error'].get('ErrorMessage')}" for f in failures})
            raise TagsRefused(
                f"Lake Formation refused the LF-tags of {what} ({'; '.join(errors)}): the stack creates the tags and "
                "grants the maintainer ASSOCIATE on them; locally, `kafkalake provision` creates them"
            )


class LakeObjects:
    """The lake bucket: the Parquet footers of data objects (read), the late-data markers and the completeness-event
    claims (written)."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3, self.bucket = s3, bucket

    def footer_columns(self, key: str) -> list[dict[str, Any]]:
        """Glue columns from a data object's Parquet footer."""
        return read_footer_columns(self.s3, self.bucket, key)

    def newest_kafka_time(self, key: str) -> datetime | None:
        """The newest Kafka time in a data object, from its footer's statistics; None when it has none or cannot be
        read (gone since its event, not Parquet): a freshness metric never fails a table's sync."""
        try:
            return newest_time(read_footer(self.s3, self.bucket, key))
        except (NotParquet, ClientError):
            return None

    def table_metadata(self, location: str) -> dict[str, Any]:
        """An Iceberg table's metadata file (JSON; gzip-compressed when its name says so, as Iceberg names it)."""
        where = parse_s3_uri(location)
        body = self.s3.get_object(Bucket=where.bucket, Key=where.key)["Body"].read()
        found: dict[str, Any] = json.loads(gzip.decompress(body) if location.endswith(".gz.metadata.json") else body)
        return found

    def put_late_data_marker(
        self, table: TablePrefix, partition: Partition, objects: list[str], noticed_at: datetime
    ) -> None:
        """The marker the compactor takes the partition first for (``TablePrefix.late_data_key``)."""
        marker = {"partition": partition.values(), "objects": objects, "noticed_at": noticed_at.isoformat()}
        body = json.dumps(marker, sort_keys=True).encode()
        self.s3.put_object(Bucket=self.bucket, Key=table.late_data_key(partition), Body=body)

    def claim_completeness_event(self, table: TablePrefix, partition: Partition, claimed_at: datetime) -> bool:
        """Create the claim on the partition's ``PartitionComplete`` event (``TablePrefix.completeness_claim_key``)
        unless it exists: True for the one drain whose write created it (also when S3's answer to it was lost),
        False when another drain holds it (``kafkalake.lease.create_once``)."""
        claim = {"partition": partition.values(), "claimed_at": claimed_at.isoformat()}
        return create_once(self.s3, self.bucket, table.completeness_claim_key(partition), claim)
