"""Avro schema resolution between consecutive versions, Glue's refusals and the registry comparison."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from infra.repo import catalog_dir
from kafkalake.registry import RegisteredSchema
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.checks.compatibility import (
    Mode,
    Refusal,
    check_versions,
    glue_refusals,
    registry_differences,
    resolve,
)
from kafkalake_dev.cli.app import app


def record(*fields: dict[str, Any], name: str = "Order") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "com.acme", "fields": list(fields)})


def f(name: str, kind: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, **extra}


ID = f("id", "string")


def test_every_catalog_topic_passes() -> None:
    for topic in load_topic_catalog(catalog_dir()).topics:
        assert check_versions(topic.schemas, Mode.FULL) == [], topic.kafka_topic
        iceberg = topic.spec.table_format == TableFormat.ICEBERG
        assert glue_refusals(topic.schemas, iceberg=iceberg) == [], topic.kafka_topic


def test_added_field_needs_a_default_backward() -> None:
    old, new = record(ID), record(ID, f("amount", "long"))
    assert check_versions([old, new]) == [
        Refusal("amount", 1, 2, "in v2 without a default, absent from v1: v2 cannot read its data")
    ]
    assert check_versions([old, record(ID, f("amount", "long", default=0))]) == []


def test_removed_field_without_default_breaks_forward_only() -> None:
    old, new = record(ID, f("note", "string")), record(ID)
    assert check_versions([old, new], Mode.BACKWARD) == []
    assert check_versions([old, new], Mode.FORWARD) == [
        Refusal("note", 1, 2, "in v1 without a default, absent from v2: v1 cannot read its data")
    ]
    assert check_versions([record(ID, f("note", "string", default="")), new], Mode.FULL) == []


@pytest.mark.parametrize(
    ("old", "new", "ok"),
    [
        ("int", "long", True),
        ("int", "double", True),
        ("long", "float", True),
        ("float", "double", True),
        ("string", "bytes", True),
        ("bytes", "string", True),
        ("long", "int", False),
        ("double", "float", False),
        ("string", "long", False),
        ("boolean", "int", False),
    ],
)
def test_promotions(old: str, new: str, ok: bool) -> None:
    found = check_versions([record(f("x", old)), record(f("x", new))])
    assert (found == []) is ok
    if not ok:
        assert found[0].field == "x" and f"type changes from {old} (v1) to {new} (v2)" in found[0].rule


def test_unions_enums_nested_and_named_references() -> None:
    nullable = record(f("x", ["null", "string"], default=None))
    assert check_versions([record(f("x", "string")), nullable]) == []
    assert check_versions([nullable, record(f("x", "string"))])[0].rule.startswith("type changes from null")
    enum = {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}
    fewer = {"type": "enum", "name": "Status", "symbols": ["NEW"]}
    assert check_versions([record(f("s", enum)), record(f("s", fewer))])[0].rule == (
        "enum symbols PAID of v1 are missing from v2 (no default)"
    )
    assert check_versions([record(f("s", enum)), record(f("s", {**fewer, "default": "NEW"}))]) == []
    inner = {"type": "record", "name": "Meta", "fields": [f("ts", "long")]}
    changed = {"type": "record", "name": "Meta", "fields": [f("ts", "string")]}
    nested = check_versions(
        [record(f("meta", inner), f("again", "Meta")), record(f("meta", changed), f("again", "Meta"))]
    )
    assert [r.field for r in nested] == ["meta.ts", "again.ts"]
    arrays = check_versions(
        [record(f("xs", {"type": "array", "items": "int"})), record(f("xs", {"type": "array", "items": "string"}))]
    )
    assert [r.field for r in arrays] == ["xs[]"]
    aliased = record(f("total", "long", aliases=["amount"]))
    assert resolve(record(f("amount", "int")), aliased) == []


def test_glue_refuses_type_changes_and_removed_required_columns() -> None:
    v1 = record(ID, f("amount", "int"), f("at", {"type": "long", "logicalType": "timestamp-millis"}))
    v2 = record(ID, f("amount", "long"), f("at", {"type": "long", "logicalType": "timestamp-millis"}))
    assert check_versions([v1, v2]) == []  # Avro promotes int to long ...
    assert glue_refusals([v1, v2]) == [  # ... but the table's column would change type
        Refusal("amount", 1, 2, "Glue refuses the column type change int → bigint; publish a new field or topic")
    ]
    v3 = record(f("amount", "long"), f("at", {"type": "long", "logicalType": "timestamp-millis"}))
    assert glue_refusals([v2, v3]) == [
        Refusal("id", 1, 2, "Glue refuses removing a required column; keep it, or make it optional first")
    ]
    optional = record(f("id", ["null", "string"], default=None))
    assert glue_refusals([optional, record(f("other", "string"))]) == []
    assert str(glue_refusals([v1, v2])[0]).startswith("v1 → v2: field amount: Glue refuses")


def test_an_iceberg_table_takes_fields_appended_to_a_struct_and_promotions_only() -> None:
    row = {"type": "record", "name": "Row", "fields": [f("id", "long")]}
    grown = {**row, "fields": [f("id", "long"), f("country", ["null", "string"], default=None)]}
    first = {**grown, "fields": [f("country", ["null", "string"], default=None), f("id", "long")]}
    v1, v2 = record(f("after", ["null", row], default=None)), record(f("after", ["null", grown], default=None))
    assert glue_refusals([v1, v2], iceberg=True) == []  # Iceberg evolves the struct by name
    assert [r.field for r in glue_refusals([v1, v2])] == ["after"], "a Hive table's Glue column would change type"
    assert glue_refusals([record(f("n", "int")), record(f("n", "long"))], iceberg=True) == []
    moved = glue_refusals([v1, record(f("after", ["null", first], default=None))], iceberg=True)
    assert [(r.field, r.rule.split(";")[0]) for r in moved] == [
        (
            "after",
            "An Iceberg table refuses the column type change struct<id:bigint> → struct<country:string,id:bigint>",
        )
    ]
    assert [r.field for r in glue_refusals([record(f("n", "int")), record(f("n", "string"))], iceberg=True)] == ["n"]


def test_registry_differences() -> None:
    v1, v2 = record(ID), record(ID, f("note", ["null", "string"], default=None))
    registered = [RegisteredSchema("t-value", 1, 11, v1)]
    assert registry_differences([v1, v2], registered) == []
    assert registry_differences([v1], [*registered, RegisteredSchema("t-value", 2, 12, v2)]) == [
        "the registry's version 2 (id 12) is missing from the catalog"
    ]
    assert registry_differences([v2], registered) == ["catalog v1 differs from the registry's version 1"]
    bad = record(ID, f("amount", "long"))
    assert registry_differences([v1, bad], registered) == [
        "v2 (not registered yet): field amount: in v2 without a default, absent from the registry's latest: "
        "v2 cannot read its data"
    ]


def test_catalog_check_refuses_an_incompatible_change_naming_field_versions_and_rule(tmp_path: Path) -> None:
    root = tmp_path / "catalog"
    shutil.copytree(catalog_dir(), root)
    folder = root / "acme" / "payments" / "staging"
    v2 = json.loads((folder / "card-authorized.v2.avsc").read_text())
    v3 = {**v2, "fields": [{**f, "type": "string"} if f["name"] == "amount_cents" else f for f in v2["fields"]]}
    (folder / "card-authorized.v3.avsc").write_text(json.dumps(v3))

    result = CliRunner().invoke(app, ["catalog", "check", "--catalog", str(root), "--env", "staging"])

    assert result.exit_code == 1
    where = f"{folder}/card-authorized.v*.avsc"
    assert "staging.acme.payments.card-authorized" in result.output and "REFUSED" in result.output
    assert (
        f"{where}: v2 → v3: field amount_cents: type changes from long (v2) to string (v3); Avro promotes only "
        "int→long→float→double and string↔bytes"
    ) in result.output
    assert f"{where}: v2 → v3: field amount_cents: Glue refuses the column type change bigint → string" in result.output
    assert "8 topics checked (backward): 2 refusals" in result.output
    clean = CliRunner().invoke(app, ["catalog", "check", "--catalog", str(catalog_dir())])
    assert clean.exit_code == 0 and "11 topics checked (backward): 0 refusals" in clean.output
