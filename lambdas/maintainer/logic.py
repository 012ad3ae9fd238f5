"""The maintainer's logic: drain the queue, make Glue match S3, delete only what is done.

Plain values and injected boto3 clients in, a ``Report`` out; no environment, no client construction.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from botocore.exceptions import ClientError

from kafkalake.glue import (
    COMPLETE_PARAMETER,
    SCHEMA_VERSIONS_PARAMETER,
    batch_create_partitions,
    batch_get_partitions,
    batch_update_partitions,
    chunks,
    partition_input,
    s3_uri,
    table_input,
    table_input_from,
)
from kafkalake.layout import (
    PARTITION_KEYS,
    DataKey,
    LayoutError,
    Partition,
    TablePrefix,
    decode_event_key,
    parse_data_key,
)
from kafkalake.naming import TableInference, crawler_name_for, default_names
from lambdas.maintainer.inference import IncompatibleSchema, merge_columns, read_footer_columns
from lambdas.maintainer.models import MalformedBody, S3Record, parse_body

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
EVENT_SOURCE = "kafkalake.maintainer"


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


@dataclass(frozen=True)
class Clients:
    sqs: Any
    glue: Any
    s3: Any
    events: Any


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


@dataclass
class State:
    """What the maintainer remembers between warm invocations."""

    ttl: float
    clock: Callable[[], float] = time.monotonic
    crawlers: TtlCache[str, bool] = field(init=False)
    tables: TtlCache[tuple[str, str], dict[str, Any]] = field(init=False)
    partitions: TtlCache[tuple[str, str, tuple[str, ...]], bool] = field(init=False)
    versions: TtlCache[tuple[str, str, int], bool] = field(init=False)
    completed: TtlCache[tuple[str, str, tuple[str, ...]], bool] = field(init=False)

    def __post_init__(self) -> None:
        self.crawlers = TtlCache(self.ttl, self.clock)
        self.tables = TtlCache(self.ttl, self.clock)
        self.partitions = TtlCache(self.ttl, self.clock)
        self.versions = TtlCache(self.ttl, self.clock)
        self.completed = TtlCache(self.ttl, self.clock)


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    events: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"counts": dict(sorted(self.counts.items())), "events": self.events, "errors": self.errors}


@dataclass
class _Message:
    receipt_handle: str
    keys: set[DataKey] = field(default_factory=set)


def handle_record(record: S3Record) -> DataKey | str:
    """The typed record handler: a data key to act on, or the reason this record is ignored."""
    if record.eventName.startswith("ObjectRemoved"):
        return "removed_object"
    if not record.eventName.startswith("ObjectCreated"):
        return "other_event"
    if record.s3.object is None:
        return "no_object"
    try:
        return parse_data_key(decode_event_key(record.s3.object.key))
    except LayoutError:
        return "foreign_key"


def drain(
    settings: Settings,
    clients: Clients,
    state: State,
    remaining_ms: Callable[[], int],
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Report:
    """One scheduled run: receive until empty/capped/out of time, sync Glue, delete what is done."""
    report = Report()
    messages = _receive(settings, clients.sqs, remaining_ms, report)
    work: list[_Message] = []
    for message in messages:
        try:
            body = parse_body(message["Body"])
        except MalformedBody as exc:
            report.counts["malformed"] += 1
            report.errors.append(f"message {message['MessageId']}: {exc}; left for redrive to the DLQ")
            continue
        item = _Message(message["ReceiptHandle"])
        work.append(item)
        if body.test_event:
            report.counts["ignored_test_event"] += 1
        for record in body.records:
            outcome = handle_record(record)
            if isinstance(outcome, DataKey):
                report.counts["data_events"] += 1
                item.keys.add(outcome)
            else:
                report.counts[f"ignored_{outcome}"] += 1
    by_table: dict[TablePrefix, set[DataKey]] = defaultdict(set)
    for item in work:
        for key in item.keys:
            by_table[key.table].add(key)
    report.counts["unique_objects"] = sum(len(keys) for keys in by_table.values())
    done: set[DataKey] = set()
    syncer = _TableSync(settings, clients, state, report, now())
    for prefix, keys in sorted(by_table.items()):
        done |= syncer.sync(prefix, keys)
    _publish(settings, clients.events, report)
    _delete([m for m in work if m.keys <= done], settings, clients.sqs, report)
    report.counts["left_for_retry"] = len(messages) - report.counts["deleted"]
    return report


def _receive(settings: Settings, sqs: Any, remaining_ms: Callable[[], int], report: Report) -> list[dict[str, Any]]:
    """Long-poll 10 at a time until the queue is empty, the cap is reached, time runs short, or only
    messages already held come back (a visibility timeout shorter than the run)."""
    messages: dict[str, dict[str, Any]] = {}
    while len(messages) < settings.max_messages and remaining_ms() > settings.safety_margin_ms:
        answer = sqs.receive_message(
            QueueUrl=settings.queue_url,
            MaxNumberOfMessages=min(10, settings.max_messages - len(messages)),
            WaitTimeSeconds=settings.wait_seconds,
        )
        report.counts["receive_calls"] += 1
        fresh = [m for m in answer.get("Messages", []) if m["MessageId"] not in messages]
        if not fresh:
            break
        messages.update((m["MessageId"], m) for m in fresh)
    report.counts["messages"] = len(messages)
    return list(messages.values())


def _delete(done: list[_Message], settings: Settings, sqs: Any, report: Report) -> None:
    for chunk in chunks(done, 10):
        answer = sqs.delete_message_batch(
            QueueUrl=settings.queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m.receipt_handle} for i, m in enumerate(chunk)],
        )
        report.counts["deleted"] += len(answer.get("Successful", []))
        for failure in answer.get("Failed", []):
            report.counts["delete_failed"] += 1
            report.errors.append(f"delete failed: {failure.get('Code')} {failure.get('Message', '')}")


def _publish(settings: Settings, events: Any, report: Report) -> None:
    entries = [
        {"Source": EVENT_SOURCE, "DetailType": e["type"], "Detail": json.dumps(e), "EventBusName": settings.event_bus}
        for e in report.events
    ]
    for chunk in chunks(entries, 10):
        answer = events.put_events(Entries=list(chunk))
        report.counts["events_failed"] += int(answer.get("FailedEntryCount", 0))


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class _TableSync:
    """Brings one table's Glue entries in line with a set of new data keys."""

    def __init__(self, settings: Settings, clients: Clients, state: State, report: Report, now: datetime) -> None:
        self.settings, self.clients, self.state, self.report, self.now = settings, clients, state, report, now

    def _event(self, kind: str, cfg: TableSettings, **detail: Any) -> None:
        self.report.events.append({"type": kind, "database": cfg.database, "table": cfg.table, **detail})

    def sync(self, prefix: TablePrefix, keys: set[DataKey]) -> set[DataKey]:
        table_cfg = self._resolve(prefix)
        if table_cfg is None:
            self.report.counts["ignored_unknown_table"] += len(keys)
            return set(keys)
        table = self._get_table(table_cfg)
        if table is None:
            table = self._create_table(table_cfg, keys)
            if table is None:
                return set()
        accepted = self._check_versions(table_cfg, table, keys)
        confirmed = self._add_partitions(table_cfg, {k.partition for k in accepted})
        self._mark_complete(table_cfg, {k.partition for k in accepted})
        return {k for k in accepted if k.partition in confirmed}

    def _resolve(self, prefix: TablePrefix) -> TableSettings | None:
        known = self.settings.tables.get(prefix)
        if known is not None:
            return known
        database, table = default_names(prefix)
        crawler = crawler_name_for(database, table)
        if not self._crawler_exists(crawler):
            return None
        location = s3_uri(self.settings.bucket, prefix.data_prefix())
        return TableSettings(database, table, TableInference.CRAWLER, crawler, location)

    def _crawler_exists(self, name: str) -> bool:
        cached = self.state.crawlers.get(name)
        if cached is None:
            try:
                self.clients.glue.get_crawler(Name=name)
                cached = True
            except ClientError as exc:
                if _error_code(exc) != "EntityNotFoundException":
                    raise
                cached = False
            self.report.counts["glue_reads"] += 1
            self.state.crawlers.put(name, cached)
        return cached

    def _get_table(self, cfg: TableSettings, fresh: bool = False) -> dict[str, Any] | None:
        key = (cfg.database, cfg.table)
        cached = None if fresh else self.state.tables.get(key)
        if cached is not None:
            return cached
        self.report.counts["glue_reads"] += 1
        try:
            table: dict[str, Any] = self.clients.glue.get_table(DatabaseName=cfg.database, Name=cfg.table)["Table"]
        except ClientError as exc:
            if _error_code(exc) != "EntityNotFoundException":
                raise
            self.state.tables.drop(key)
            return None
        self.state.tables.put(key, table)
        return table

    def _start_crawler(self, cfg: TableSettings, why: str) -> None:
        try:
            self.clients.glue.start_crawler(Name=cfg.crawler_name)
            self.report.counts["crawlers_started"] += 1
        except ClientError as exc:
            if _error_code(exc) != "CrawlerRunningException":
                raise
            self.report.counts["crawlers_already_running"] += 1
        self.report.counts[f"crawler_reason_{why}"] += 1

    def _create_table(self, cfg: TableSettings, keys: set[DataKey]) -> dict[str, Any] | None:
        if cfg.inference == TableInference.CRAWLER:
            self._start_crawler(cfg, "new_table")
            self.report.counts["deferred_until_table_exists"] += len(keys)
            return None
        first = min(keys, key=lambda k: (k.partition.schema_version, k.key()))
        columns = read_footer_columns(self.clients.s3, self.settings.bucket, first.key())
        version = first.partition.schema_version
        request = table_input(cfg.table, cfg.location, columns, {SCHEMA_VERSIONS_PARAMETER: str(version)})
        try:
            self.clients.glue.create_table(DatabaseName=cfg.database, TableInput=request)
            self.report.counts["tables_created"] += 1
            self._event("TableCreated", cfg, schema_version=version, columns=[c["Name"] for c in columns])
        except ClientError as exc:
            if _error_code(exc) != "AlreadyExistsException":
                raise
        return self._get_table(cfg, fresh=True)

    def _version_known(self, cfg: TableSettings, table: dict[str, Any], version: int) -> bool:
        cache_key = (cfg.database, cfg.table, version)
        if self.state.versions.get(cache_key):
            return True
        listed = table.get("Parameters", {}).get(SCHEMA_VERSIONS_PARAMETER, "")
        known = str(version) in listed.split(",")
        if not known and cfg.inference == TableInference.CRAWLER:
            self.report.counts["glue_reads"] += 1
            answer = self.clients.glue.get_partitions(
                DatabaseName=cfg.database, TableName=cfg.table, Expression=f"schema_version={version}", MaxResults=1
            )
            known = bool(answer.get("Partitions"))
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
                    self._start_crawler(cfg, "new_schema_version")
                    self._event("SchemaVersionAdded", cfg, schema_version=version, columns_added=[])
                else:
                    try:
                        table = self._merge_version(cfg, table, version, of_version)
                    except IncompatibleSchema as exc:
                        self.report.counts["schema_incompatible"] += 1
                        self.report.errors.append(f"{cfg.database}.{cfg.table} schema_version={version}: {exc}")
                        continue
                self.state.versions.put((cfg.database, cfg.table, version), True)
            accepted |= of_version
        return accepted

    def _merge_version(
        self, cfg: TableSettings, table: dict[str, Any], version: int, keys: set[DataKey]
    ) -> dict[str, Any]:
        sample = min(keys, key=lambda k: k.key())
        new_columns = read_footer_columns(self.clients.s3, self.settings.bucket, sample.key())
        merged, added = merge_columns(table["StorageDescriptor"]["Columns"], new_columns)
        update = table_input_from(table)
        update["StorageDescriptor"]["Columns"] = merged
        versions = [v for v in update.get("Parameters", {}).get(SCHEMA_VERSIONS_PARAMETER, "").split(",") if v]
        update.setdefault("Parameters", {})[SCHEMA_VERSIONS_PARAMETER] = ",".join([*versions, str(version)])
        self.clients.glue.update_table(DatabaseName=cfg.database, TableInput=update)
        self.report.counts["tables_updated"] += 1
        self._event("SchemaVersionAdded", cfg, schema_version=version, columns_added=[c["Name"] for c in added])
        refreshed = self._get_table(cfg, fresh=True)
        if refreshed is None:
            raise IncompatibleSchema(f"table {cfg.database}.{cfg.table} disappeared while it was being updated")
        return refreshed

    def _add_partitions(self, cfg: TableSettings, partitions: set[Partition], retried: bool = False) -> set[Partition]:
        cache = self.state.partitions
        known = {p for p in partitions if cache.get((cfg.database, cfg.table, tuple(p.values())))}
        unknown = partitions - known
        if not unknown:
            return known
        existing, calls = batch_get_partitions(
            self.clients.glue, cfg.database, cfg.table, (tuple(p.values()) for p in unknown)
        )
        self.report.counts["glue_reads"] += calls
        missing = sorted(p for p in unknown if tuple(p.values()) not in existing)
        table = self._get_table(cfg)
        if table is None:
            return known | (unknown - set(missing))
        inputs = [partition_input(table, f"{cfg.location}{p.path()}", p) for p in missing]
        try:
            outcome = batch_create_partitions(self.clients.glue, cfg.database, cfg.table, inputs)
        except ClientError as exc:
            if _error_code(exc) != "EntityNotFoundException" or retried:
                raise
            self.state.tables.drop((cfg.database, cfg.table))
            return known | self._add_partitions(cfg, unknown, retried=True)
        self.report.counts["create_partition_calls"] += outcome.calls
        self.report.counts["partitions_added"] += len(outcome.done)
        for values, code in sorted(outcome.failed.items()):
            self.report.counts["partition_errors"] += 1
            self.report.errors.append(f"{cfg.database}.{cfg.table} {list(values)}: {code}")
        confirmed = {p for p in unknown if tuple(p.values()) in existing or tuple(p.values()) in outcome.done}
        for partition in confirmed:
            cache.put((cfg.database, cfg.table, tuple(partition.values())), True)
        return known | confirmed

    def _mark_complete(self, cfg: TableSettings, partitions: Iterable[Partition]) -> None:
        """Hour H is complete once hour H+1 has data and the safety delay after H's end has passed."""
        delay = timedelta(seconds=self.settings.completeness_delay_seconds)
        candidates: set[tuple[str, ...]] = set()
        for later in partitions:
            start = datetime(later.dt.year, later.dt.month, later.dt.day, later.hour, tzinfo=UTC) - timedelta(hours=1)
            if start + timedelta(hours=1) + delay > self.now:
                continue
            for version in range(1, later.schema_version + 1):
                candidates.add(tuple(Partition(version, start.date(), start.hour).values()))
        candidates = {c for c in candidates if not self.state.completed.get((cfg.database, cfg.table, c))}
        if not candidates:
            return
        found, calls = batch_get_partitions(self.clients.glue, cfg.database, cfg.table, candidates)
        self.report.counts["glue_reads"] += calls
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
        outcome = batch_update_partitions(self.clients.glue, cfg.database, cfg.table, updates)
        self.report.counts["partitions_completed"] += len(outcome.done)
        for values, code in sorted(outcome.failed.items()):
            self.report.errors.append(f"{cfg.database}.{cfg.table} {list(values)}: marking complete failed: {code}")
        for values in sorted(outcome.done):
            partition_values = dict(zip(PARTITION_KEYS, values, strict=True))
            self._event("PartitionComplete", cfg, partition=partition_values)
