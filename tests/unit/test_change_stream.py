"""The demo's Debezium change stream (``kafkalake_dev.local.change_stream``), decided from its plan: every kind of
change in source order, valid against the catalog's Envelope schemas, and the state it leaves, computed as a
database applies the changes: each key's latest row, counted in the hour and schema version of its latest change."""

from __future__ import annotations

import dataclasses
import io
import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest

from infra.repo import catalog_dir
from kafkalake.layout import Partition
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake_dev.local.change_stream import STATE_COLUMNS, images, key_schema, plan_changes, tally_changes
from kafkalake_dev.local.topic_workload import workload_records

START = datetime(2026, 11, 20, 6, tzinfo=UTC)
[TOPIC] = [t for t in load_topic_catalog(catalog_dir()).for_env("staging") if t.name == "customers"]


def test_the_stream_has_every_kind_of_change_in_source_order() -> None:
    planned = plan_changes(TOPIC, 600, start=START, hours=6)
    assert len(planned) == 600 and [c.index for c in planned] == list(range(600))
    kinds = Counter("poison" if c.key is None else c.op or "tombstone" for c in planned)
    assert set(kinds) == {"r", "c", "u", "d", "tombstone", "poison"}, kinds
    assert all(c.op == "r" for c in planned[:60] if c.op in ("r", "c")), "the snapshot comes first"
    moments = [c.moment for c in planned if c.moment is not None]
    assert moments == sorted(moments) and moments[0] >= START and (moments[-1] - START).total_seconds() < 6 * 3600
    assert {c.version for c in planned if c.event} == {0, 1}, "the stream spans both schema versions"
    assert plan_changes(TOPIC, 600, start=START, hours=6) == planned, "the same arguments give the same stream"


def test_every_event_and_key_is_valid_against_the_catalogs_schemas() -> None:
    schemas = [fastavro.parse_schema(json.loads(s)) for s in TOPIC.schemas]
    for change in plan_changes(TOPIC, 300, start=START, hours=6):
        if change.event is not None:
            fastavro.schemaless_writer(io.BytesIO(), schemas[change.version], change.event)
            before, after = change.event["before"], change.event["after"]
            assert (before is None) == (change.op in ("r", "c")) and (after is None) == (change.op == "d")
    assert [f["name"] for f in key_schema(TOPIC)["fields"]] == ["id"]


def test_the_state_is_each_keys_latest_row_in_its_latest_changes_hour() -> None:
    planned = plan_changes(TOPIC, 600, start=START, hours=6)
    produced = tally_changes(TOPIC, planned)
    held: dict[int, tuple[dict[str, Any], int, str]] = {}  # a database applying the changes in order
    for change in planned:
        if change.key is None:
            continue
        if change.event is None or change.op == "d":
            held.pop(change.key, None)
        else:
            assert change.op is not None
            held[change.key] = (change.event["after"], change.version + 1, change.op)
    assert set(produced.state) == {str(k) for k in held} and held
    for key, (row, version, op) in held.items():
        expected = {"schema_version": version, "_op": op, "tier": row["tier"], "country": row.get("country")}
        assert produced.state[str(key)] == expected
        assert set(expected) == set(STATE_COLUMNS)
    hours = Counter(Partition(v, row["updated_at"].date(), row["updated_at"].hour) for row, v, _ in held.values())
    assert produced.expected == hours
    changes = sum(produced.counts[k] for k in ("reads", "inserts", "updates", "deletes"))
    assert produced.counts["poison"] + produced.counts["tombstones"] + changes == 600


def test_the_personal_values_are_in_both_images() -> None:
    records = workload_records(TOPIC, 200, start=START, hours=6)
    assert records == images(TOPIC, 200, start=START, hours=6)
    assert {next(iter(r)) for r in records} == {"before", "after"}
    assert all("@example.com" in next(iter(r.values()))["email"] for r in records)


def test_a_table_keyed_otherwise_is_refused_with_the_fix() -> None:
    other = dataclasses.replace(TOPIC, spec=TOPIC.spec.model_copy(update={"key_fields": ("email",)}))
    with pytest.raises(ValueError, match=r"set key_fields: \[id\]"):
        plan_changes(other, 10, start=START, hours=1)
