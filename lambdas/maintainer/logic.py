"""The maintainer's rules: drain the queue, make Glue match S3 table by table (``sync``, ``partitions``), delete
only what is done.

A message is acknowledged (deleted) only when Glue is known to hold the partition of every data key it names, and
a cache never stands in for that knowledge, because Glue can change behind it (a partition deleted by hand, a
table deleted and created again) within any TTL: every partition of the drain's keys is sent to
``BatchCreatePartition`` (100 per call, per table), which creates it or answers ``AlreadyExists``, and either
answer is the confirmation. A table Glue no longer has (``EntityNotFound``) has its cached entries dropped and its
sync tried once more. The caches save the reads only: the table's definition, its schema versions, partition
locations (for the late-data check) and the hours already checked for completeness.

Overlapping drains (two execution environments, or a run that outlives the schedule) are safe: a schema merge
updates the table under Glue's optimistic lock (``VersionId``; re-read and merged again when refused), creating a
partition is idempotent, and a partition's ``PartitionComplete`` event is published only by the drain whose
conditional write created its claim (``TablePrefix.completeness_claim_key``). A drain that stops between the claim
and ``PutEvents`` loses that event; the partition stays marked complete in Glue (``kafkalake.complete``), which is
what the compactor's own selection reads.

A maintainer serves one environment: keys under another environment's prefix are ignored (counted, acknowledged,
never sent to Glue or a crawler).

Plain values in, a ``Report`` out; every AWS call goes through ``lambdas.maintainer.dal``. No environment, no
client construction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from kafkalake.layout import DataKey, LayoutError, TablePrefix, is_compaction_output, table_prefix_of
from kafkalake.layout import parse_data_key as parse_key
from kafkalake.metrics import MaintainerCount
from kafkalake.topic_spec import TableFormat
from lambdas.maintainer.dal import CachedGlue, Clients, LakeObjects, LakeTags, Queue, State, publish
from lambdas.maintainer.models import MalformedBody, ObjectEvent, parse_body
from lambdas.maintainer.partitions import PartitionSync
from lambdas.maintainer.report import MAX_SAMPLES, Report
from lambdas.maintainer.sync import TableSync
from lambdas.tables import LakeTable

IGNORED = {
    "removed_object": MaintainerCount.IGNORED_REMOVED_OBJECT,
    "other_event": MaintainerCount.IGNORED_OTHER_EVENT,
    "no_object": MaintainerCount.IGNORED_NO_OBJECT,
    "foreign_key": MaintainerCount.IGNORED_FOREIGN_KEY,
    "other_environment": MaintainerCount.IGNORED_OTHER_ENVIRONMENT,
    "compaction_output": MaintainerCount.IGNORED_COMPACTION_OUTPUT,
    "iceberg_file": MaintainerCount.IGNORED_ICEBERG_FILE,
}
"""Why a record is ignored → what it is counted as."""


@dataclass(frozen=True)
class DrainConfig:
    queue_url: str
    bucket: str
    event_bus: str
    env: str
    """The environment this maintainer serves: the ``<env>`` segment of every data key it acts on."""
    tables: Sequence[LakeTable]
    """Topics from the catalog; keys for other prefixes are ours only if their crawler exists by convention."""
    max_messages: int = 10_000
    wait_seconds: int = 1
    safety_margin_ms: int = 30_000
    cache_ttl_seconds: float = 600.0
    completeness_delay_seconds: float = 900.0

    @cached_property
    def tables_by_prefix(self) -> Mapping[TablePrefix, LakeTable]:
        return {table.prefix: table for table in self.tables}

    @cached_property
    def iceberg_tables(self) -> frozenset[TablePrefix]:
        return frozenset(t.prefix for t in self.tables if t.table_format == TableFormat.ICEBERG)


@dataclass
class _Message:
    receipt_handle: str
    keys: set[DataKey] = field(default_factory=set)
    iceberg_tables: set[TablePrefix] = field(default_factory=set)
    """The Iceberg tables whose own files (a commit's metadata, a rewrite's output) the message names: each table's
    snapshots are read, and the message stays when that fails."""


@dataclass(frozen=True)
class Ignored:
    """Why an event is not acted on (and, for a foreign key, what the layout says about it)."""

    kind: str
    detail: str = ""
    table: TablePrefix | None = None
    """The Iceberg table whose own file the event names (``iceberg_file``)."""


def _not_a_new_data_object(event: ObjectEvent) -> Ignored | None:
    """Why the event names no new object a table could hold, if it does not."""
    if event.name.startswith("ObjectRemoved"):
        return Ignored("removed_object")
    if not event.name.startswith("ObjectCreated"):
        return Ignored("other_event")
    if event.key is None:
        return Ignored("no_object")
    if is_compaction_output(event.key):  # the compactor's own files under the table: never a table or partition
        return Ignored("compaction_output")
    return None


def handle_record(event: ObjectEvent, env: str, iceberg: frozenset[TablePrefix] = frozenset()) -> DataKey | Ignored:
    """The typed record handler: a data key of environment ``env`` to act on, or why this event is ignored. Under
    an Iceberg table's location (``iceberg``), Iceberg's own files are no data keys of ours, and not foreign."""
    ignored = _not_a_new_data_object(event)
    if ignored is not None or event.key is None:
        return ignored or Ignored("no_object")
    try:
        data_key = parse_key(event.key)
    except LayoutError as exc:
        table = table_prefix_of(event.key)
        if table in iceberg:
            return Ignored("iceberg_file", table=table)
        return Ignored("foreign_key", str(exc))
    if data_key.table.env != env:
        return Ignored(
            "other_environment",
            f"{event.key!r} belongs to environment {data_key.table.env!r}; this maintainer serves {env!r} "
            f"(that environment's own maintainer registers it)",
        )
    return data_key


def drain(
    settings: DrainConfig,
    clients: Clients,
    state: State,
    remaining_ms: Callable[[], int],
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Report:
    """One scheduled run: receive until empty/capped/out of time, sync Glue, delete what is done."""
    report = Report()
    queue = Queue(clients.sqs, settings.queue_url, report.counts)
    messages = _receive(settings, queue, remaining_ms, report)
    work = _parse(messages, settings, report)
    by_table: dict[TablePrefix, set[DataKey]] = defaultdict(set)
    for item in work:
        for key in item.keys:
            by_table[key.table].add(key)
        for prefix in item.iceberg_tables:
            by_table[prefix].update(())  # its snapshots are read even when no data key of it came
    report.counts[MaintainerCount.UNIQUE_OBJECTS] = sum(len(keys) for keys in by_table.values())
    done: set[DataKey] = set()
    synced: set[TablePrefix] = set()
    syncer = _table_sync(settings, clients, state, report, now())
    for prefix, keys in sorted(by_table.items()):
        outcome = syncer.sync_isolated(prefix, keys)
        if outcome is not None:
            done |= outcome
            synced.add(prefix)
    publish(clients.events, settings.event_bus, report.events, report.counts)
    report.errors += queue.delete([m.receipt_handle for m in work if m.keys <= done and m.iceberg_tables <= synced])
    report.counts[MaintainerCount.LEFT_FOR_RETRY] = len(messages) - report.counts[MaintainerCount.DELETED]
    return report


def _parse(messages: list[dict[str, Any]], settings: DrainConfig, report: Report) -> list[_Message]:
    """Each well-formed message with the data keys its records name; malformed ones stay for the DLQ."""
    work = []
    for message in messages:
        try:
            body = parse_body(message["Body"])
        except MalformedBody as exc:
            report.counts[MaintainerCount.MALFORMED] += 1
            report.errors.append(f"message {message['MessageId']}: {exc}; left for redrive to the DLQ")
            continue
        item = _Message(message["ReceiptHandle"])
        work.append(item)
        if body.test_event:
            report.counts[MaintainerCount.IGNORED_TEST_EVENT] += 1
        for event in body.events:
            outcome = handle_record(event, settings.env, settings.iceberg_tables)
            if isinstance(outcome, DataKey):
                report.counts[MaintainerCount.DATA_EVENTS] += 1
                item.keys.add(outcome)
                continue
            if outcome.table is not None:
                item.iceberg_tables.add(outcome.table)
            report.counts[IGNORED[outcome.kind]] += 1
            if outcome.detail and len(report.foreign_keys) < MAX_SAMPLES:
                report.foreign_keys.append(outcome.detail)
    return work


def _receive(
    settings: DrainConfig, queue: Queue, remaining_ms: Callable[[], int], report: Report
) -> list[dict[str, Any]]:
    """Long-poll 10 at a time until the queue is empty, the cap is reached, time runs short, or only
    messages already held come back (a visibility timeout shorter than the run)."""
    messages: dict[str, dict[str, Any]] = {}
    while len(messages) < settings.max_messages and remaining_ms() > settings.safety_margin_ms:
        answer = queue.receive(min(10, settings.max_messages - len(messages)), settings.wait_seconds)
        fresh = [m for m in answer if m["MessageId"] not in messages]
        if not fresh:
            break
        messages.update((m["MessageId"], m) for m in fresh)
    report.counts[MaintainerCount.MESSAGES] = len(messages)
    return list(messages.values())


def _table_sync(settings: DrainConfig, clients: Clients, state: State, report: Report, now: datetime) -> TableSync:
    """One drain's table and partition work over the data access objects."""
    glue, lake = CachedGlue(clients.glue, state, report.counts), LakeObjects(clients.s3, settings.bucket)
    delay = timedelta(seconds=settings.completeness_delay_seconds)
    partitions = PartitionSync(glue, lake, state, report, delay, now)
    tags = LakeTags(clients.lakeformation, state, report.counts)
    return TableSync(settings.tables_by_prefix, glue, lake, state, report, partitions, tags)
