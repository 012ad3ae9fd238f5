"""An upsert table's plan turned into its commit (``spark_jobs.archiver.upsert``): which change of a key wins, what a
delete and a tombstone do, Debezium's envelope, and a version field against the table's row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from kafkalake.personal import UPSERT_KEY_COLUMN
from kafkalake.topic_spec import Envelope
from spark_jobs.archiver.upsert import (
    DELETED,
    KEY_SEPARATOR,
    ChangeWithoutKey,
    Keying,
    change_rows,
    fresher_than_held,
    latest,
    state_change,
)
from spark_jobs.archiver.writer import TOMBSTONE_COLUMN

T0 = datetime(2026, 11, 20, 6, tzinfo=UTC)
BY_KAFKA_KEY = Keying((), None, Envelope.NONE, kafka_key_kept=True)
BY_ID = Keying(("id",), None, Envelope.NONE, kafka_key_kept=False)


def changes(*records: dict[str, Any]) -> pa.Table:
    """Change rows as the archiver writes them: value fields, Kafka metadata, ``_key``, the delete-log flag."""
    rows = []
    for r in records:
        stamp = T0 + timedelta(seconds=r.get("ts", r["offset"]))
        rows.append(
            {
                "id": r.get("id"),
                "name": r.get("name"),
                "version": r.get("version"),
                "_kafka_partition": r.get("partition", 0),
                "_kafka_offset": r["offset"],
                "_kafka_timestamp": stamp,
                "_business_time": stamp,
                "_key": r.get("key"),
                TOMBSTONE_COLUMN: r.get("tombstone", False),
                "schema_version": 1,
            }
        )
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("version", pa.int64()),
            ("_kafka_partition", pa.int32()),
            ("_kafka_offset", pa.int64()),
            ("_kafka_timestamp", pa.timestamp("us", tz="UTC")),
            ("_business_time", pa.timestamp("us", tz="UTC")),
            ("_key", pa.binary()),
            (TOMBSTONE_COLUMN, pa.bool_()),
            ("schema_version", pa.int32()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def state(table: pa.Table, keying: Keying) -> dict[str, Any]:
    winners = latest(change_rows(table, keying), keying.version_field)
    change = state_change(winners)
    return {
        "rows": {r[UPSERT_KEY_COLUMN]: r["name"] for r in change.rows.to_pylist()},
        "keys": sorted(change.keys.to_pylist()),
        "deletes": change.deletes,
    }


def test_within_a_partition_the_later_offset_wins_and_a_tombstone_deletes_its_key() -> None:
    table = changes(
        {"offset": 0, "key": b"a", "id": 1, "name": "a1"},
        {"offset": 1, "key": b"b", "id": 2, "name": "b1"},
        {"offset": 2, "key": b"a", "id": 1, "name": "a2"},
        {"offset": 3, "key": b"b", "tombstone": True},
        {"offset": 4, "key": b"c", "id": 3, "name": "c1"},
    )
    found = state(table, BY_KAFKA_KEY)
    assert found == {
        "rows": {b"a".hex(): "a2", b"c".hex(): "c1"},
        "keys": sorted(k.hex() for k in (b"a", b"b", b"c")),
        "deletes": 1,
    }


def test_a_key_that_moves_between_partitions_takes_the_later_kafka_time() -> None:
    table = changes(
        {"partition": 0, "offset": 10, "ts": 5, "key": b"a", "name": "from p0, later"},
        {"partition": 1, "offset": 99, "ts": 3, "key": b"a", "name": "from p1, earlier"},
        {"partition": 1, "offset": 5, "ts": 1, "key": b"b", "name": "b from p1"},
        {"partition": 2, "offset": 0, "ts": 1, "key": b"b", "name": "b from p2, same time"},
    )
    assert state(table, BY_KAFKA_KEY)["rows"] == {b"a".hex(): "from p0, later", b"b".hex(): "b from p2, same time"}


def test_offsets_decide_within_a_partition_whatever_the_kafka_times() -> None:
    table = changes(
        {"offset": 1, "ts": 9, "key": b"a", "name": "earlier offset, later time"},
        {"offset": 2, "ts": 1, "key": b"a", "name": "later offset"},
    )
    assert state(table, BY_KAFKA_KEY)["rows"] == {b"a".hex(): "later offset"}


def test_a_version_field_wins_over_offsets_and_a_change_without_one_loses() -> None:
    keying = Keying(("id",), "version", Envelope.NONE, kafka_key_kept=False)
    table = changes(
        {"offset": 0, "id": 1, "version": 3, "name": "v3"},
        {"offset": 1, "id": 1, "version": 2, "name": "v2 replayed later"},
        {"offset": 2, "id": 1, "version": None, "name": "no version"},
        {"partition": 1, "offset": 0, "id": 2, "version": 1, "name": "k2 v1"},
    )
    assert state(table, keying)["rows"] == {"1": "v3", "2": "k2 v1"}


def test_a_change_older_than_the_tables_row_is_dropped_with_its_delete() -> None:
    keying = Keying(("id",), "version", Envelope.NONE, kafka_key_kept=False)
    winners = latest(
        change_rows(
            changes(
                {"offset": 0, "id": 1, "version": 5, "name": "older than held"},
                {"offset": 1, "id": 2, "version": 5, "name": "newer than held"},
                {"offset": 2, "id": 3, "version": 5, "name": "equal to held"},
                {"offset": 3, "id": 4, "version": 1, "name": "not held"},
            ),
            keying,
        ),
        "version",
    )
    held = pa.table({UPSERT_KEY_COLUMN: ["1", "2", "3"], "version": pa.array([7, 4, 5], pa.int64())})
    change = state_change(fresher_than_held(winners, held, "version"))
    assert {r[UPSERT_KEY_COLUMN] for r in change.rows.to_pylist()} == {"2", "3", "4"}
    assert sorted(change.keys.to_pylist()) == ["2", "3", "4"]


def test_key_fields_are_joined_and_the_kafka_key_is_left_out_when_not_kept() -> None:
    keying = Keying(("id", "name"), None, Envelope.NONE, kafka_key_kept=False)
    rows = change_rows(changes({"offset": 0, "id": 7, "name": "x", "key": b"k"}), keying)
    assert rows.column(UPSERT_KEY_COLUMN).to_pylist() == [f"7{KEY_SEPARATOR}x"]
    assert "_key" not in rows.column_names and TOMBSTONE_COLUMN not in rows.column_names
    assert rows.column(DELETED).to_pylist() == [False]


def test_a_change_without_a_key_fails_the_plan_with_where_it_is_and_a_tombstone_without_one_is_dropped() -> None:
    table = changes(
        {"offset": 0, "id": 1, "name": "a"},
        {"offset": 1, "tombstone": True, "key": b"k"},  # key_fields, and the Kafka key is not decoded
    )
    assert state(table, BY_ID) == {"rows": {"1": "a"}, "keys": ["1"], "deletes": 0}
    with pytest.raises(ChangeWithoutKey, match=r"1 changes have no key .*partition 0, offset 2"):
        change_rows(changes({"offset": 0, "id": 1}, {"offset": 2, "id": None, "name": "no id"}), BY_ID)


def debezium(*events: dict[str, Any]) -> pa.Table:
    row = pa.struct([("id", pa.int64()), ("email", pa.string())])
    source = pa.struct([("ts_ms", pa.int64()), ("lsn", pa.int64()), ("db", pa.string())])
    rows = [
        {
            "before": e.get("before"),
            "after": e.get("after"),
            "op": e.get("op"),
            "source": None
            if e.get("op") is None
            else {"ts_ms": 1000 + e["offset"], "lsn": 50 + e["offset"], "db": "x"},
            "_kafka_partition": 0,
            "_kafka_offset": e["offset"],
            "_kafka_timestamp": T0,
            "_business_time": T0,
            "_key": e.get("key"),
            TOMBSTONE_COLUMN: e.get("op") is None,
            "schema_version": 1,
        }
        for e in events
    ]
    schema = pa.schema(
        [
            ("before", row),
            ("after", row),
            ("op", pa.string()),
            ("source", source),
            ("_kafka_partition", pa.int32()),
            ("_kafka_offset", pa.int64()),
            ("_kafka_timestamp", pa.timestamp("us", tz="UTC")),
            ("_business_time", pa.timestamp("us", tz="UTC")),
            ("_key", pa.struct([("id", pa.int64())])),
            (TOMBSTONE_COLUMN, pa.bool_()),
            ("schema_version", pa.int32()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def test_debezium_rows_are_after_a_delete_takes_its_key_from_before_and_a_decoded_tombstone_deletes() -> None:
    keying = Keying(("id",), None, Envelope.DEBEZIUM, kafka_key_kept=False)
    events = debezium(
        {"offset": 0, "op": "r", "after": {"id": 1, "email": "one@snapshot"}},
        {"offset": 1, "op": "c", "after": {"id": 2, "email": "two@insert"}},
        {"offset": 2, "op": "u", "before": {"id": 1, "email": "one@snapshot"}, "after": {"id": 1, "email": "one@u"}},
        {"offset": 3, "op": "c", "after": {"id": 3, "email": "three"}},
        {"offset": 4, "op": "d", "before": {"id": 2, "email": "two@insert"}},
        {"offset": 5, "key": {"id": 2}},  # Debezium's tombstone after the delete
        {"offset": 6, "key": {"id": 3}},  # a tombstone alone deletes too
        {"offset": 7, "op": "t"},  # a truncate changes no row here
    )
    winners = latest(change_rows(events, keying), None)
    change = state_change(winners)
    assert change.rows.to_pylist() == [
        {
            "id": 1,
            "email": "one@u",
            "_op": "u",
            "_source_ts_ms": 1002,
            "_source_lsn": 52,
            "_kafka_partition": 0,
            "_kafka_offset": 2,
            "_kafka_timestamp": T0,
            "_business_time": T0,
            "schema_version": 1,
            UPSERT_KEY_COLUMN: "1",
        }
    ]
    assert sorted(change.keys.to_pylist()) == ["1", "2", "3"] and change.deletes == 2


def test_debezium_needs_its_envelope() -> None:
    keying = Keying(("id",), None, Envelope.DEBEZIUM, kafka_key_kept=False)
    with pytest.raises(ValueError, match="no after, before, op"):
        change_rows(changes({"offset": 0, "id": 1}), keying)
