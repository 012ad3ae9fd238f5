"""An upsert table's plan (``mode: upsert``): the plan's changes, as the archiver wrote them (every record of the plan,
tombstones as delete-log rows), turned into what its commit does to the table: remove the rows of every key the plan
changes, add each key's latest row unless its latest change deletes it. Pure Arrow, no I/O: the commit
(``spark_jobs.archiver.table_commit.upsert_plan``) reads the changes and applies the result.

Which change of a key wins (docs/current-state.md states the same rule):

1. with ``version_field``, the greater version (a change without one loses to any with one);
2. within a Kafka partition, the later offset;
3. between Kafka partitions (a producer that re-keys), the partition whose latest change of the key has the later
   Kafka timestamp, then the higher partition number.

Across plans the later plan wins, except that with ``version_field`` a change whose version is lower than the row
the table holds for its key is dropped (``fresher_than_held``).

The key is one text column, ``UPSERT_KEY_COLUMN``: the Kafka key (hex of its bytes; a hashed key as stored) or the
``key_fields`` joined by ``KEY_SEPARATOR``, so every commit deletes by one ``In`` over one column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from kafkalake.iceberg import SCHEMA_VERSION_COLUMN
from kafkalake.personal import HEADERS_COLUMN, KAFKA_KEY_COLUMN, KEY_ID_COLUMN, UPSERT_KEY_COLUMN
from kafkalake.topic_catalog import OP_COLUMN, SOURCE_COLUMNS, Topic
from kafkalake.topic_spec import Envelope
from spark_jobs.archiver.transform import META_COLUMNS, TIME_COLUMNS
from spark_jobs.archiver.writer import TOMBSTONE_COLUMN, group_starts

KEY_SEPARATOR: Final = "\x1f"
"""Between the values of a key of several ``key_fields`` (the ASCII unit separator)."""
DELETED: Final = "_deleted"
"""Whether a change deletes its key (a tombstone, ``op: d``); never a column of the table."""
DEBEZIUM_DELETE: Final = "d"
DEBEZIUM_ROW_OPS: Final = pa.array(["c", "u", "r", DEBEZIUM_DELETE])
"""The Debezium operations that change a row; the others (``t`` truncate, ``m`` message) are skipped."""
ASC: Final = "ascending"
KAFKA_ONLY: Final = (*META_COLUMNS, *TIME_COLUMNS, KAFKA_KEY_COLUMN, HEADERS_COLUMN, KEY_ID_COLUMN)


class ChangeWithoutKey(ValueError):
    """A change whose key is null: the plan fails and stays stored, nothing of it applied."""


@dataclass(frozen=True)
class Keying:
    """How an upsert topic's changes name their key and which one wins (the catalog's ``key_fields``,
    ``version_field``, ``envelope``), and whether its table keeps the Kafka key (``archive.key``)."""

    key_fields: tuple[str, ...]
    version_field: str | None
    envelope: Envelope
    kafka_key_kept: bool

    @classmethod
    def of(cls, topic: Topic) -> Keying:
        spec = topic.spec
        return cls(spec.key_fields, spec.version_field, spec.envelope, KAFKA_KEY_COLUMN in topic.kafka_columns)


@dataclass(frozen=True)
class StateChange:
    """What a plan does to its upsert table: delete the rows of ``keys``, then add ``rows``."""

    rows: pa.Table
    keys: pa.Array
    deletes: int
    """How many of ``keys`` the plan deletes (their latest change is a delete)."""


def change_rows(changes: pa.Table, keying: Keying) -> pa.Table:
    """Each change as a row of the table (a Debezium change's ``after`` flattened, with ``OP_COLUMN`` and the
    ``SOURCE_COLUMNS``), with ``UPSERT_KEY_COLUMN`` and ``DELETED``; the delete-log flag and a Kafka key the table
    does not keep left out. ``ChangeWithoutKey`` when a change names no key."""
    tombstone = _flag(changes, TOMBSTONE_COLUMN)
    skipped = pc.and_(tombstone, False)
    if keying.envelope == Envelope.DEBEZIUM:
        rows, deleted, key_source = _debezium(changes, tombstone)
        skipped = pc.invert(pc.or_(tombstone, pc.fill_null(pc.is_in(changes.column("op"), DEBEZIUM_ROW_OPS), False)))
    else:
        rows, deleted = _without_envelope(changes), tombstone
        key_source = rows
    key = _key(key_source, changes, keying, tombstone)
    # dropped: a tombstone whose key names no key field, a Debezium event that changes no row (t, m)
    placed = pc.invert(pc.or_(skipped, pc.and_(tombstone, pc.is_null(key))))
    if not pc.all(placed).as_py():
        changes, rows, key, deleted = (
            changes.filter(placed),
            rows.filter(placed),
            key.filter(placed),
            deleted.filter(placed),
        )
    missing = pc.sum(pc.is_null(key)).as_py() or 0
    if missing:
        first = changes.filter(pc.is_null(key)).slice(0, 1).select(["_kafka_partition", "_kafka_offset"]).to_pylist()
        where = f"partition {first[0]['_kafka_partition']}, offset {first[0]['_kafka_offset']}"
        named = f"key_fields {list(keying.key_fields)}" if keying.key_fields else "the Kafka key"
        raise ChangeWithoutKey(
            f"{missing} changes have no key ({named} null; the first at {where}): an upsert table cannot place them. "
            "Fix the producer, or name key fields every change holds (key_fields)"
        )
    kept = [c for c in rows.column_names if c != KAFKA_KEY_COLUMN or keying.kafka_key_kept]
    return rows.select(kept).append_column(UPSERT_KEY_COLUMN, key).append_column(DELETED, deleted)


def latest(rows: pa.Table, version_field: str | None) -> pa.Table:
    """The winning change of each key (the module's rule), sorted by key."""
    versions = [(version_field, ASC)] if version_field else []
    within = _last_of_runs(
        rows,
        [(UPSERT_KEY_COLUMN, ASC), ("_kafka_partition", ASC), *versions, ("_kafka_offset", ASC)],
        [UPSERT_KEY_COLUMN, "_kafka_partition"],
    )
    return _last_of_runs(
        within,
        [(UPSERT_KEY_COLUMN, ASC), *versions, ("_kafka_timestamp", ASC), ("_kafka_partition", ASC)],
        [UPSERT_KEY_COLUMN],
    )


def fresher_than_held(winners: pa.Table, held: pa.Table, version_field: str) -> pa.Table:
    """``winners`` without the changes whose version is lower than that of the row the table holds for their key
    (``held``: ``UPSERT_KEY_COLUMN`` and ``version_field`` of those rows); a change without a version loses to a held
    row with one."""
    if held.num_rows == 0:
        return winners
    joined = winners.select([UPSERT_KEY_COLUMN, version_field]).join(
        held.select([UPSERT_KEY_COLUMN, version_field]).rename_columns([UPSERT_KEY_COLUMN, "_held"]),
        UPSERT_KEY_COLUMN,
        join_type="left outer",
    )
    stale_keys = joined.filter(
        pc.and_(
            pc.is_valid(joined.column("_held")),
            pc.fill_null(pc.less(joined.column(version_field), joined.column("_held")), True),
        )
    ).column(UPSERT_KEY_COLUMN)
    return winners.filter(pc.invert(pc.is_in(winners.column(UPSERT_KEY_COLUMN), value_set=stale_keys.combine_chunks())))


def state_change(winners: pa.Table) -> StateChange:
    """The table's change from each key's winning change: every key's rows removed, the non-deleting winners added."""
    deleted = winners.column(DELETED)
    rows = winners.filter(pc.invert(deleted)).drop_columns([DELETED])
    return StateChange(rows, winners.column(UPSERT_KEY_COLUMN).combine_chunks(), pc.sum(deleted).as_py() or 0)


def _flag(changes: pa.Table, name: str) -> pa.ChunkedArray:
    """A boolean column, false where absent or null (a schema version's objects without the delete log)."""
    if name not in changes.column_names:
        return pa.chunked_array([pa.array([False] * changes.num_rows, pa.bool_())])
    return pc.fill_null(changes.column(name), False)


def _without_envelope(changes: pa.Table) -> pa.Table:
    return changes.drop_columns([c for c in (TOMBSTONE_COLUMN,) if c in changes.column_names])


def _debezium(changes: pa.Table, tombstone: pa.ChunkedArray) -> tuple[pa.Table, pa.ChunkedArray, pa.Table]:
    """A Debezium change's row (``after``'s fields, ``OP_COLUMN``, ``SOURCE_COLUMNS``, the Kafka columns), whether
    it deletes, and where its key fields are (``before`` for a delete, ``after`` otherwise)."""
    missing = {"before", "after", "op"} - set(changes.column_names)
    if missing:
        raise ValueError(
            f"envelope: debezium expects a Debezium change event (before, after, op, source), and the value has no "
            f"{', '.join(sorted(missing))}: check the topic's schema, or set envelope: none"
        )
    op = changes.column("op")
    deleted = pc.or_(tombstone, pc.fill_null(pc.equal(op, DEBEZIUM_DELETE), False))
    after, before = changes.column("after"), changes.column("before")
    columns: dict[str, pa.ChunkedArray] = {}
    for index, child in enumerate(after.type):
        columns[child.name] = pc.struct_field(after, [index])
    columns[OP_COLUMN] = op
    if "source" in changes.column_names:
        source = changes.column("source")
        for index, child in enumerate(source.type):
            if child.name in SOURCE_COLUMNS:
                columns[SOURCE_COLUMNS[child.name]] = pc.struct_field(source, [index])
    for name in (*KAFKA_ONLY, SCHEMA_VERSION_COLUMN):
        if name in changes.column_names:
            columns[name] = changes.column(name)
    rows = pa.table(columns)
    keys = {}
    for index, child in enumerate(after.type):
        in_before = before.type.get_field_index(child.name)
        from_after = pc.struct_field(after, [index])
        keys[child.name] = (
            pc.if_else(deleted, pc.struct_field(before, [in_before]), from_after) if in_before >= 0 else from_after
        )
    return rows, deleted, pa.table(keys) if keys else rows


def _key(rows: pa.Table, changes: pa.Table, keying: Keying, tombstone: pa.ChunkedArray) -> pa.ChunkedArray:
    """``UPSERT_KEY_COLUMN`` of each change: its ``key_fields`` (a tombstone's from its decoded Kafka key, when there is
    one), else its Kafka key."""
    if not keying.key_fields:
        return _text(changes.column(KAFKA_KEY_COLUMN))
    kafka_key = changes.column(KAFKA_KEY_COLUMN) if KAFKA_KEY_COLUMN in changes.column_names else None
    parts = []
    for name in keying.key_fields:
        if name not in rows.column_names:
            raise ValueError(f"key_fields names {name}, which the rows do not have: name a field of the row")
        value = _text(rows.column(name))
        if kafka_key is not None and pa.types.is_struct(kafka_key.type) and kafka_key.type.get_field_index(name) >= 0:
            from_key = _text(pc.struct_field(kafka_key, [kafka_key.type.get_field_index(name)]))
            value = pc.if_else(tombstone, from_key, value)
        parts.append(value)
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, KEY_SEPARATOR)


def _text(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """A key value as text: bytes as hex, text as it is, anything else as Arrow casts it."""
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        return pa.chunked_array([pa.array([None if v is None else v.hex() for v in values.to_pylist()], pa.string())])
    if pa.types.is_string(values.type):
        return values
    return pc.cast(values, pa.string())


def _last_of_runs(rows: pa.Table, order: list[tuple[str, str]], group: list[str]) -> pa.Table:
    """``rows`` sorted by ``order`` (nulls first: a change without a version loses), then the last row of each run
    of equal ``group`` values."""
    ordered = rows.take(pc.sort_indices(rows, sort_keys=[(name, how, "at_start") for name, how in order]))
    starts = group_starts(ordered, group)
    return ordered.take(pa.array([s - 1 for s in starts[1:]], pa.int64()))
