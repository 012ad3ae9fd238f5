"""The local workload of an ``envelope: debezium`` topic: a change stream of a ``customers`` table as Debezium's
connector writes it (Avro Envelopes ``before``/``after``/``source``/``op`` in the registry, the key struct ``{id}`` as
the Kafka key), with snapshot reads, inserts, updates, deletes, tombstones and a few poison records, and the table's
state it leaves, computed from the stream as produced: what the topic's upsert table must hold.

The stream is decided without producing anything (the same arguments give the same changes), in source order: each
change's ``after.updated_at`` (its business time) is later than the one before, spread over ``hours``; later changes
are on later schema versions. A key's changes all carry the same Kafka key, so they share a Kafka partition and Kafka's
order is the source's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from kafkalake.layout import Partition
from kafkalake.registry import RegistryClient, key_subject, value_subject
from kafkalake.topic_catalog import Topic
from kafkalake.wire import encode
from kafkalake_dev.local.workload import POISON, Produced, already_held, deliver

KEY_FIELD: Final = "id"
"""The ``customers`` table's primary key: the topic's ``key_fields`` must be this one field."""
ROWS_PER_KEY: Final = 30
"""About how many changes each row of the table gets: the table has ``records // ROWS_PER_KEY`` keys (at least 8)."""
SNAPSHOT_SHARE: Final = 0.1
"""The stream's first changes are the connector's initial snapshot (``op: r``)."""
STATE_COLUMNS: Final = ("schema_version", "_op", "tier", "country")
"""The columns of a state row the checks compare, besides its key: the hashed ones differ from what was produced, and
the business time has its own check (the hour each row is counted in)."""
OPS: Final = {"r": "reads", "c": "inserts", "u": "updates", "d": "deletes"}


@dataclass(frozen=True)
class Change:
    """One record of the stream: ``op`` c/r/u/d with its Envelope ``event``, a tombstone (``op`` None), or poison."""

    index: int
    key: int | None
    """The row's key (``id``); None for a poison record."""
    op: str | None
    version: int = 0
    """Index into the topic's schemas."""
    event: dict[str, Any] | None = None
    moment: datetime | None = None
    """The change's business time (``after.updated_at``): when the source committed it."""


def customer(key: int, index: int, version: int, moment: datetime) -> dict[str, Any]:
    """A row of the ``customers`` table as change ``index`` leaves it (``country`` from schema version 2 on)."""
    row: dict[str, Any] = {
        KEY_FIELD: key,
        "name": f"customer {key} as of change {index}",
        "email": f"customer-{key}-{index}@example.com",
        "tier": index % 4,
        "updated_at": moment,
    }
    if version >= 1:
        row["country"] = ("DE", "FR", "NL")[index % 3]
    return row


def envelope(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, lsn: int, moment: datetime) -> Any:
    """A Debezium Envelope (PostgreSQL's ``source``, with the fields the demo's schemas keep)."""
    millis = int(moment.timestamp() * 1000)
    source = {"version": "2.7.0.Final", "connector": "postgresql", "ts_ms": millis, "db": "shop", "table": "customers"}
    return {"before": before, "after": after, "source": {**source, "lsn": lsn}, "op": op, "ts_ms": millis}


def plan_changes(topic: Topic, records: int, *, start: datetime, hours: int, seed: int = 7) -> list[Change]:
    """``records`` changes of a table of ``records // ROWS_PER_KEY`` keys: snapshot reads first, then inserts,
    updates (70% of the changes to an existing row), deletes (15%, each followed by its tombstone 60% of the time,
    as Debezium's ``tombstones.on.delete`` does) and tombstones alone (log compaction's deletes); 1% poison."""
    if topic.spec.key_fields != (KEY_FIELD,):
        raise ValueError(
            f"{topic.name}: the local change stream is of a customers table keyed by {KEY_FIELD}, and the topic's "
            f"key_fields are {list(topic.spec.key_fields)}: set key_fields: [{KEY_FIELD}]"
        )
    rng = random.Random(seed)  # noqa: S311 - test data, not security
    keys, versions = max(8, records // ROWS_PER_KEY), len(topic.schemas)
    state: dict[int, dict[str, Any]] = {}
    planned: list[Change] = []
    while len(planned) < records:
        index = len(planned)
        moment = start + timedelta(seconds=hours * 3600 * index / records)
        if rng.random() < 0.01:
            planned.append(Change(index, None, None))
            continue
        key, version, roll = rng.randint(1, keys), (index * versions) // records, rng.random()
        if key not in state or roll < 0.7:
            op = "u" if key in state else ("r" if index < records * SNAPSHOT_SHARE else "c")
            after = customer(key, index, version, moment)
            planned.append(Change(index, key, op, version, envelope(op, state.get(key), after, index, moment), moment))
            state[key] = after
        elif roll < 0.85:
            planned.append(Change(index, key, "d", version, envelope("d", state.pop(key), None, index, moment), moment))
            if rng.random() < 0.6 and len(planned) < records:
                planned.append(Change(index + 1, key, None))
        else:
            planned.append(Change(index, key, None))
            del state[key]
    return planned


def tally_changes(topic: Topic, planned: list[Change]) -> Produced:
    """What the stream holds, and the state it leaves: each key's row (``STATE_COLUMNS``), counted in the partition
    of its latest change's business time, as the upsert table must hold it."""
    result = Produced(topic.kafka_topic)
    rows: dict[int, Change] = {}
    for change in planned:
        if change.key is None:
            result.counts["poison"] += 1
        elif change.op is None or change.op == "d":
            result.counts[OPS[change.op] if change.op else "tombstones"] += 1
            rows.pop(change.key, None)
        else:
            result.counts[OPS[change.op]] += 1
            rows[change.key] = change
        if change.op is not None:
            result.counts[f"schema_version_{change.version + 1}"] += 1
    for key, change in sorted(rows.items()):
        assert change.event is not None and change.moment is not None
        result.expected[Partition(change.version + 1, change.moment.date(), change.moment.hour)] += 1
        after = change.event["after"]
        values = {"schema_version": change.version + 1, "_op": change.op, "tier": after["tier"]}
        result.state[str(key)] = values | {"country": after.get("country")}
    return result


def key_schema(topic: Topic) -> dict[str, Any]:
    """Debezium's key struct: the row's key field, typed as the newest schema's row types it."""
    newest = json.loads(topic.schemas[-1])
    before = next(f for f in newest["fields"] if f["name"] == "before")
    [row] = [t for t in before["type"] if t != "null"]
    fields = [f for f in row["fields"] if f["name"] == KEY_FIELD]
    return {"type": "record", "name": "Key", "namespace": newest["namespace"], "fields": fields}


def produce_changes(
    topic: Topic,
    bootstrap: str,
    registry: RegistryClient,
    records: int,
    *,
    start: datetime,
    hours: int,
    seed: int = 7,
    progress: Callable[[int], None] = lambda _: None,
) -> Produced:
    """Produce the planned stream unless the topic already holds it; either way, say what it holds."""
    planned = plan_changes(topic, records, start=start, hours=hours, seed=seed)
    result = tally_changes(topic, planned)
    if already_held(topic, bootstrap, records, result, progress):
        return result
    value_ids = [registry.register(value_subject(topic.kafka_topic), s) for s in topic.schemas]
    key_text = json.dumps(key_schema(topic))
    key_id = registry.register(key_subject(topic.kafka_topic), key_text)

    def record(change: Change) -> tuple[int, bytes | None, bytes | None]:
        if change.key is None:
            return change.index, None, POISON
        key = encode(key_id, key_text, {KEY_FIELD: change.key})
        if change.event is None:
            return change.index, key, None
        return change.index, key, encode(value_ids[change.version], topic.schemas[change.version], change.event)

    deliver(topic, bootstrap, (record(c) for c in planned), records, progress)
    return result


def images(topic: Topic, records: int, *, start: datetime, hours: int) -> list[dict[str, Any]]:
    """Every ``before`` and ``after`` row the stream holds (where its personal values are)."""
    events = [c.event for c in plan_changes(topic, records, start=start, hours=hours) if c.event is not None]
    return [{image: e[image]} for e in events for image in ("before", "after") if e[image] is not None]
