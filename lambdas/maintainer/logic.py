"""The maintainer's rules: drain the queue, make Glue match S3, delete only what is done.

Plain values in, a ``Report`` out; every AWS call goes through ``lambdas.maintainer.dal``. No environment, no
client construction.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from kafkalake.glue import COMPLETE_PARAMETER, SCHEMA_VERSIONS_PARAMETER, partition_input, table_input, table_input_from
from kafkalake.layout import (
    PARTITION_KEYS,
    DataKey,
    LayoutError,
    Partition,
    TablePrefix,
    is_compaction_output,
    parse_s3_uri,
    s3_uri,
)
from kafkalake.layout import parse_data_key as parse_key
from kafkalake.metrics import Count
from kafkalake.naming import TableInference, crawler_name_for, default_names
from lambdas.maintainer.dal import Clients, GlueCatalog, Queue, State, error_code, publish
from lambdas.maintainer.inference import IncompatibleSchema, merge_columns
from lambdas.maintainer.models import MalformedBody, ObjectEvent, parse_body

IGNORED = {
    "removed_object": Count.IGNORED_REMOVED_OBJECT,
    "other_event": Count.IGNORED_OTHER_EVENT,
    "no_object": Count.IGNORED_NO_OBJECT,
    "foreign_key": Count.IGNORED_FOREIGN_KEY,
    "compaction_output": Count.IGNORED_COMPACTION_OUTPUT,
}
"""Why a record is ignored → what it is counted as."""


@dataclass(frozen=True)
class TableSettings:
    database: str
    table: str
    inference: TableInference
    crawler_name: str
    location: str
    """``s3://bucket/data/<env>/<company>/<domain>/<topic>/``."""


def tables_from_document(document: list[dict[str, str]], bucket: str) -> dict[TablePrefix, TableSettings]:
    tables = {}
    for item in document:
        prefix = TablePrefix(item["env"], item["company"], item["domain"], item["topic"])
        tables[prefix] = TableSettings(
            item["database"],
            item["table"],
            TableInference(item["inference"]),
            item["crawler_name"],
            s3_uri(bucket, prefix.data_prefix()),
        )
    return tables


@dataclass(frozen=True)
class Settings:
    queue_url: str
    bucket: str
    event_bus: str
    tables: Mapping[TablePrefix, TableSettings]
    """Topics from the catalog; keys for other prefixes are ours only if their crawler exists by convention."""
    max_messages: int = 10_000
    wait_seconds: int = 1
    safety_margin_ms: int = 30_000
    cache_ttl_seconds: float = 600.0
    completeness_delay_seconds: float = 900.0


MAX_REASON = 300
"""Characters of a failure's message a report repeats."""
MAX_SAMPLES = 20
"""Foreign keys logged with their reason per drain (the rest are only counted)."""


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    events: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    foreign_keys: list[str] = field(default_factory=list)
    """A sample of the foreign keys and why the layout rejects them."""
    failed_tables: dict[str, str] = field(default_factory=dict)
    """``database.table`` (or the data prefix) → what failed; its messages stay for the next run."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "counts": dict(sorted(self.counts.items())),
            "events": self.events,
            "errors": self.errors,
            "foreign_keys": self.foreign_keys,
            "failed_tables": self.failed_tables,
        }


@dataclass
class _Message:
    receipt_handle: str
    keys: set[DataKey] = field(default_factory=set)


@dataclass(frozen=True)
class Ignored:
    """Why an event is not acted on (and, for a foreign key, what the layout says about it)."""

    kind: str
    detail: str = ""


def handle_record(event: ObjectEvent) -> DataKey | Ignored:
    """The typed record handler: a data key to act on, or why this event is ignored."""
    if event.name.startswith("ObjectRemoved"):
        return Ignored("removed_object")
    if not event.name.startswith("ObjectCreated"):
        return Ignored("other_event")
    if event.key is None:
        return Ignored("no_object")
    if is_compaction_output(event.key):  # the compactor's own files under the table: never a table or partition
        return Ignored("compaction_output")
    try:
        return parse_key(event.key)
    except LayoutError as exc:
        return Ignored("foreign_key", str(exc))


def completion_candidates(partitions: Iterable[Partition], now: datetime, delay: timedelta) -> set[Partition]:
    """Hour H is complete once hour H+1 has data and the delay after H's end has passed: for each partition with
    data, the previous hour of every schema version up to its own."""
    candidates = set()
    for later in partitions:
        earlier = later.previous()
        if earlier.end + delay > now:
            continue
        for version in range(1, later.schema_version + 1):
            candidates.add(Partition(version, earlier.dt, earlier.hour))
    return candidates


def drain(
    settings: Settings,
    clients: Clients,
    state: State,
    remaining_ms: Callable[[], int],
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Report:
    """One scheduled run: receive until empty/capped/out of time, sync Glue, delete what is done."""
    report = Report()
    queue = Queue(clients.sqs, settings.queue_url, report.counts)
    messages = _receive(settings, queue, remaining_ms, report)
    work = _parse(messages, report)
    by_table: dict[TablePrefix, set[DataKey]] = defaultdict(set)
    for item in work:
        for key in item.keys:
            by_table[key.table].add(key)
    report.counts[Count.UNIQUE_OBJECTS] = sum(len(keys) for keys in by_table.values())
    done: set[DataKey] = set()
    syncer = _TableSync(settings, GlueCatalog(clients, settings.bucket, state, report.counts), state, report, now())
    for prefix, keys in sorted(by_table.items()):
        done |= syncer.sync_isolated(prefix, keys)
    publish(clients.events, settings.event_bus, report.events, report.counts)
    report.errors += queue.delete([m.receipt_handle for m in work if m.keys <= done])
    report.counts[Count.LEFT_FOR_RETRY] = len(messages) - report.counts[Count.DELETED]
    return report


def _parse(messages: list[dict[str, Any]], report: Report) -> list[_Message]:
    """Each well-formed message with the data keys its records name; malformed ones stay for the DLQ."""
    work = []
    for message in messages:
        try:
            body = parse_body(message["Body"])
        except MalformedBody as exc:
            report.counts[Count.MALFORMED] += 1
            report.errors.append(f"message {message['MessageId']}: {exc}; left for redrive to the DLQ")
            continue
        item = _Message(message["ReceiptHandle"])
        work.append(item)
        if body.test_event:
            report.counts[Count.IGNORED_TEST_EVENT] += 1
        for event in body.events:
            outcome = handle_record(event)
            if isinstance(outcome, DataKey):
                report.counts[Count.DATA_EVENTS] += 1
                item.keys.add(outcome)
                continue
            report.counts[IGNORED[outcome.kind]] += 1
            if outcome.detail and len(report.foreign_keys) < MAX_SAMPLES:
                report.foreign_keys.append(outcome.detail)
    return work


def _receive(settings: Settings, queue: Queue, remaining_ms: Callable[[], int], report: Report) -> list[dict[str, Any]]:
    """Long-poll 10 at a time until the queue is empty, the cap is reached, time runs short, or only
    messages already held come back (a visibility timeout shorter than the run)."""
    messages: dict[str, dict[str, Any]] = {}
    while len(messages) < settings.max_messages and remaining_ms() > settings.safety_margin_ms:
        answer = queue.receive(min(10, settings.max_messages - len(messages)), settings.wait_seconds)
        fresh = [m for m in answer if m["MessageId"] not in messages]
        if not fresh:
            break
        messages.update((m["MessageId"], m) for m in fresh)
    report.counts[Count.MESSAGES] = len(messages)
    return list(messages.values())


class _TableSync:
    """Brings one table's Glue entries in line with a set of new data keys."""

    def __init__(self, settings: Settings, glue: GlueCatalog, state: State, report: Report, now: datetime) -> None:
        self.settings, self.glue, self.state, self.report, self.now = settings, glue, state, report, now

    def _event(self, kind: str, cfg: TableSettings, **detail: Any) -> None:
        self.report.events.append({"type": kind, "database": cfg.database, "table": cfg.table, **detail})

    def sync_isolated(self, prefix: TablePrefix, keys: set[DataKey]) -> set[DataKey]:
        """``sync``, never letting one table stop the others: on EntityNotFoundException the table's cached
        entries are dropped and the sync is tried once more; any other failure (throttling that outlasted
        botocore's retries, access denied, ...) is reported, and the table's messages stay for the next run."""
        for attempt in (1, 2):
            try:
                return self.sync(prefix, keys)
            except ClientError as exc:
                if error_code(exc) == "EntityNotFoundException" and attempt == 1:
                    self._forget(prefix)
                    continue
                return self._failed(prefix, keys, exc)
            except Exception as exc:  # noqa: BLE001 - reported below; the other tables go on
                return self._failed(prefix, keys, exc)
        return set()

    def _forget(self, prefix: TablePrefix) -> None:
        cfg = self._resolve(prefix)
        if cfg is not None:
            self.glue.forget_table(cfg.database, cfg.table)
        self.report.counts[Count.TABLE_CACHE_DROPPED] += 1

    def _failed(self, prefix: TablePrefix, keys: set[DataKey], exc: Exception) -> set[DataKey]:
        cfg = self.settings.tables.get(prefix)
        name = f"{cfg.database}.{cfg.table}" if cfg else prefix.data_prefix()
        reason = f"{type(exc).__name__}: {str(exc)[:MAX_REASON]}"
        self.report.counts[Count.TABLES_FAILED] += 1
        self.report.failed_tables[name] = reason
        self.report.errors.append(f"{name}: {reason}; its {len(keys)} objects stay queued for the next run")
        return set()

    def sync(self, prefix: TablePrefix, keys: set[DataKey]) -> set[DataKey]:
        table_cfg = self._resolve(prefix)
        if table_cfg is None:
            self.report.counts[Count.IGNORED_UNKNOWN_TABLE] += len(keys)
            return set(keys)
        table = self.glue.table(table_cfg.database, table_cfg.table)
        if table is None:
            table = self._create_table(table_cfg, keys)
            if table is None:
                return set()
        accepted = self._check_versions(table_cfg, table, keys)
        confirmed = self._add_partitions(table_cfg, {k.partition for k in accepted})
        self._mark_complete(table_cfg, {k.partition for k in accepted})
        done = {k for k in accepted if k.partition in confirmed}
        self._note_late(table_cfg, done)
        return done

    def _resolve(self, prefix: TablePrefix) -> TableSettings | None:
        known = self.settings.tables.get(prefix)
        if known is not None:
            return known
        database, table = default_names(prefix)
        crawler = crawler_name_for(database, table)
        if not self.glue.crawler_exists(crawler):
            return None
        location = s3_uri(self.settings.bucket, prefix.data_prefix())
        return TableSettings(database, table, TableInference.CRAWLER, crawler, location)

    def _start_crawler(self, cfg: TableSettings, why: Count) -> None:
        self.glue.start_crawler(cfg.crawler_name)
        self.report.counts[why] += 1

    def _create_table(self, cfg: TableSettings, keys: set[DataKey]) -> dict[str, Any] | None:
        if cfg.inference == TableInference.CRAWLER:
            self._start_crawler(cfg, Count.CRAWLER_REASON_NEW_TABLE)
            self.report.counts[Count.DEFERRED_UNTIL_TABLE_EXISTS] += len(keys)
            return None
        first = min(keys, key=lambda k: (k.partition.schema_version, k.key()))
        columns = self.glue.footer_columns(first.key())
        version = first.partition.schema_version
        request = table_input(cfg.table, cfg.location, columns, {SCHEMA_VERSIONS_PARAMETER: str(version)})
        if self.glue.create_table(cfg.database, request):
            self._event("TableCreated", cfg, schema_version=version, columns=[c["Name"] for c in columns])
        return self.glue.table(cfg.database, cfg.table, fresh=True)

    def _version_known(self, cfg: TableSettings, table: dict[str, Any], version: int) -> bool:
        cache_key = (cfg.database, cfg.table, version)
        if self.state.versions.get(cache_key):
            return True
        listed = table.get("Parameters", {}).get(SCHEMA_VERSIONS_PARAMETER, "")
        known = str(version) in listed.split(",")
        if not known and cfg.inference == TableInference.CRAWLER:
            known = self.glue.has_version_partition(cfg.database, cfg.table, version)
        if known:
            self.state.versions.put(cache_key, True)
        return known

    def _check_versions(self, cfg: TableSettings, table: dict[str, Any], keys: set[DataKey]) -> set[DataKey]:
        """Keys whose schema version the table can take; a new version re-crawls or merges columns."""
        accepted: set[DataKey] = set()
        for version in sorted({k.partition.schema_version for k in keys}):
            of_version = {k for k in keys if k.partition.schema_version == version}
            if not self._version_known(cfg, table, version):
                if cfg.inference == TableInference.CRAWLER:
                    self._start_crawler(cfg, Count.CRAWLER_REASON_NEW_SCHEMA_VERSION)
                    self._event("SchemaVersionAdded", cfg, schema_version=version, columns_added=[])
                else:
                    try:
                        table = self._merge_version(cfg, table, version, of_version)
                    except IncompatibleSchema as exc:
                        self.report.counts[Count.SCHEMA_INCOMPATIBLE] += 1
                        self.report.errors.append(f"{cfg.database}.{cfg.table} schema_version={version}: {exc}")
                        continue
                self.state.versions.put((cfg.database, cfg.table, version), True)
            accepted |= of_version
        return accepted

    def _merge_version(
        self, cfg: TableSettings, table: dict[str, Any], version: int, keys: set[DataKey]
    ) -> dict[str, Any]:
        sample = min(keys, key=lambda k: k.key())
        merged, added = merge_columns(table["StorageDescriptor"]["Columns"], self.glue.footer_columns(sample.key()))
        update = table_input_from(table)
        update["StorageDescriptor"]["Columns"] = merged
        versions = [v for v in update.get("Parameters", {}).get(SCHEMA_VERSIONS_PARAMETER, "").split(",") if v]
        update.setdefault("Parameters", {})[SCHEMA_VERSIONS_PARAMETER] = ",".join([*versions, str(version)])
        self.glue.update_table(cfg.database, update)
        self._event("SchemaVersionAdded", cfg, schema_version=version, columns_added=[c["Name"] for c in added])
        refreshed = self.glue.table(cfg.database, cfg.table, fresh=True)
        if refreshed is None:
            raise IncompatibleSchema(f"table {cfg.database}.{cfg.table} disappeared while it was being updated")
        return refreshed

    def _add_partitions(self, cfg: TableSettings, partitions: set[Partition]) -> set[Partition]:
        cache = self.state.partitions
        known = {p for p in partitions if cache.get((cfg.database, cfg.table, tuple(p.values()))) is not None}
        unknown = partitions - known
        if not unknown:
            return known
        existing = self.glue.partitions(cfg.database, cfg.table, (tuple(p.values()) for p in unknown))
        missing = sorted(p for p in unknown if tuple(p.values()) not in existing)
        table = self.glue.table(cfg.database, cfg.table)
        if table is None:
            return known | (unknown - set(missing))
        inputs = [partition_input(table, f"{cfg.location}{p.path()}", p) for p in missing]
        outcome = self.glue.create_partitions(cfg.database, cfg.table, inputs)
        for values, code in sorted(outcome.failed.items()):
            self.report.counts[Count.PARTITION_ERRORS] += 1
            self.report.errors.append(f"{cfg.database}.{cfg.table} {list(values)}: {code}")
        confirmed = set()
        for partition in unknown:
            values = tuple(partition.values())
            if values in existing:
                location = existing[values].get("StorageDescriptor", {}).get("Location", "")
            elif values in outcome.done:
                location = f"{cfg.location}{partition.path()}"
            else:
                continue
            cache.put((cfg.database, cfg.table, values), location)
            confirmed.add(partition)
        return known | confirmed

    def _note_late(self, cfg: TableSettings, keys: set[DataKey]) -> None:
        """Objects in closed hours (ended more than the completeness delay ago) whose partition's location is a
        compaction run directory get a marker for the compactor and a ``LateData`` event. The location comes from
        the partition cache, like every lookup: a compaction that swapped the partition after it was cached is
        seen once the entry expires (the compactor takes the late file at its next run either way)."""
        delay = timedelta(seconds=self.settings.completeness_delay_seconds)
        late: dict[tuple[str, ...], list[DataKey]] = defaultdict(list)
        for key in keys:
            values = tuple(key.partition.values())
            location = self.state.partitions.get((cfg.database, cfg.table, values)) or ""
            if key.partition.end + delay <= self.now and location and is_compaction_output(parse_s3_uri(location).key):
                late[values].append(key)
        for values, found in sorted(late.items()):
            objects = sorted(k.key() for k in found)
            marker = {"partition": list(values), "objects": objects, "noticed_at": self.now.isoformat()}
            self.glue.put_json(found[0].table.late_data_key(found[0].partition), marker)
            self.report.counts[Count.LATE_OBJECTS] += len(objects)
            partition = dict(zip(PARTITION_KEYS, values, strict=True))
            self._event("LateData", cfg, partition=partition, objects=objects[:MAX_SAMPLES])

    def _mark_complete(self, cfg: TableSettings, partitions: Iterable[Partition]) -> None:
        """Mark the hours before those with new data complete (see ``completion_candidates``)."""
        delay = timedelta(seconds=self.settings.completeness_delay_seconds)
        candidates = {tuple(p.values()) for p in completion_candidates(partitions, self.now, delay)}
        candidates = {c for c in candidates if not self.state.completed.get((cfg.database, cfg.table, c))}
        if not candidates:
            return
        found = self.glue.partitions(cfg.database, cfg.table, candidates)
        for values in candidates:  # checked: not again within the TTL (quiet hours fall to the compactor's delay)
            self.state.completed.put((cfg.database, cfg.table, values), True)
        updates = [
            {
                "Values": list(values),
                "StorageDescriptor": partition["StorageDescriptor"],
                "Parameters": {**partition.get("Parameters", {}), COMPLETE_PARAMETER: "true"},
            }
            for values, partition in sorted(found.items())
            if partition.get("Parameters", {}).get(COMPLETE_PARAMETER) != "true"
        ]
        outcome = self.glue.update_partitions(cfg.database, cfg.table, updates)
        self.report.counts[Count.PARTITIONS_COMPLETED] += len(outcome.done)
        for values, code in sorted(outcome.failed.items()):
            self.report.errors.append(f"{cfg.database}.{cfg.table} {list(values)}: marking complete failed: {code}")
        for values in sorted(outcome.done):
            self._event("PartitionComplete", cfg, partition=dict(zip(PARTITION_KEYS, values, strict=True)))
