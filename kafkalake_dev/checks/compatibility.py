"""Avro schema resolution between a topic's consecutive schema versions, and the changes its Glue table refuses.

``resolve`` applies Avro's resolution rules (a reader schema reading data written with a writer schema): fields
matched by name or alias, a reader field missing from the writer needs a default, the promotions int→long→float→
double and string↔bytes, enum symbols, unions, arrays, maps, fixed sizes. *Backward* means the newer version reads
the older one's data (the registry's default), *forward* the reverse, *full* both. ``glue_refusals`` tells which
changes the table refuses (``lambdas.maintainer.inference.merge_columns``): a column whose Glue type changes, or a
required column that disappears. Pure: no registry, no AWS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from kafkalake.registry import RegisteredSchema

PRIMITIVES: Final = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
PROMOTIONS: Final = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
NAMED: Final = frozenset({"record", "error", "enum", "fixed"})
GLUE_LOGICAL: Final = {
    "timestamp-millis": "timestamp",
    "timestamp-micros": "timestamp",
    "local-timestamp-millis": "timestamp",
    "local-timestamp-micros": "timestamp",
    "date": "date",
}
GLUE_PRIMITIVE: Final = {
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "bytes": "binary",
    "string": "string",
    "enum": "string",
    "fixed": "binary",
}


class Mode(StrEnum):
    BACKWARD = "backward"
    FORWARD = "forward"
    FULL = "full"


@dataclass(frozen=True)
class Refusal:
    """One incompatible change: the field, the two versions and the rule it breaks."""

    field: str
    old: int
    new: int
    rule: str

    def __str__(self) -> str:
        return f"v{self.old} → v{self.new}: field {self.field or '(the record)'}: {self.rule}"


class _Names:
    """The named types (records, enums, fixed) of one schema, by full and short name."""

    def __init__(self, schema: Any) -> None:
        self.types: dict[str, dict[str, Any]] = {}
        self._collect(schema, "")

    def _collect(self, schema: Any, namespace: str) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self._collect(branch, namespace)
        if not isinstance(schema, dict):
            return
        kind = schema.get("type")
        if kind in NAMED:
            namespace = schema.get("namespace", namespace)
            name = schema["name"]
            self.types[name if "." in name else f"{namespace}.{name}".lstrip(".")] = schema
            self.types.setdefault(name.rsplit(".", 1)[-1], schema)
        for child in [f["type"] for f in schema.get("fields", [])] + [schema.get(k) for k in ("items", "values")]:
            self._collect(child, namespace)
        if isinstance(kind, (dict, list)):
            self._collect(kind, namespace)

    def deref(self, schema: Any) -> Any:
        """A named reference replaced by its definition; ``{"type": X}`` wrappers unwrapped to X where plain."""
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return self.types.get(schema) or self.types.get(schema.rsplit(".", 1)[-1]) or schema
        if isinstance(schema, dict) and not isinstance(schema.get("type"), str):
            return self.deref(schema["type"])
        if isinstance(schema, dict) and schema["type"] not in NAMED | {"array", "map"}:
            return schema if "logicalType" in schema else self.deref(schema["type"])
        return schema


def kind(schema: Any) -> str:
    """``union``, a primitive or a complex type's name."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema["type"])
    return str(schema)


def _describe(schema: Any) -> str:
    return "[" + ", ".join(kind(b) for b in schema) + "]" if isinstance(schema, list) else kind(schema)


@dataclass
class _Resolver:
    writer_names: _Names
    reader_names: _Names
    writer: str
    reader: str

    def resolve(
        self, w: Any, r: Any, path: str, seen: frozenset[tuple[int, int]] = frozenset()
    ) -> list[tuple[str, str]]:
        """Where the reader ``r`` cannot read data written with ``w``: (field path, rule) pairs."""
        w, r = self.writer_names.deref(w), self.reader_names.deref(r)
        if isinstance(w, list):
            return [p for branch in w for p in self.resolve(branch, r, path, seen)]
        if isinstance(r, list):
            if any(not self.resolve(w, branch, path, seen) for branch in r):
                return []
            return [(path, f"{self.reader}'s union {_describe(r)} has no branch for {self.writer}'s {_describe(w)}")]
        wk, rk = kind(w), kind(r)
        if wk == rk:
            return self._same_kind(wk, w, r, path, seen)
        if rk in PROMOTIONS.get(wk, set()):
            return []
        rule = (
            f"type changes from {wk} ({self.writer}) to {rk} ({self.reader}); Avro promotes only "
            "int→long→float→double and string↔bytes"
        )
        return [(path, rule)]

    def _same_kind(self, wk: str, w: Any, r: Any, path: str, seen: frozenset[tuple[int, int]]) -> list[tuple[str, str]]:
        if wk in ("record", "error"):
            return [] if (id(w), id(r)) in seen else self._record(w, r, path, seen | {(id(w), id(r))})
        children = {"array": ("items", "[]"), "map": ("values", "{}")}
        if wk in children:
            key, mark = children[wk]
            return self.resolve(w[key], r[key], f"{path}{mark}", seen)
        rules = []
        lost = [s for s in w["symbols"] if s not in r["symbols"]] if wk == "enum" else []
        if lost and "default" not in r:
            rules.append(f"enum symbols {', '.join(lost)} of {self.writer} are missing from {self.reader} (no default)")
        if wk == "fixed" and w["size"] != r["size"]:
            rules.append(f"fixed size changes from {w['size']} ({self.writer}) to {r['size']} ({self.reader})")
        return [(path, rule) for rule in rules]

    def _record(
        self, w: dict[str, Any], r: dict[str, Any], path: str, seen: frozenset[tuple[int, int]]
    ) -> list[tuple[str, str]]:
        written = {f["name"]: f for f in w["fields"]}
        problems = []
        for field in r["fields"]:
            sub = f"{path}.{field['name']}" if path else field["name"]
            names = [field["name"], *field.get("aliases", [])]
            match = next((written[n] for n in names if n in written), None)
            if match is not None:
                problems += self.resolve(match["type"], field["type"], sub, seen)
            elif "default" not in field:
                rule = (
                    f"in {self.reader} without a default, absent from {self.writer}: {self.reader} cannot read its data"
                )
                problems.append((sub, rule))
        return problems


def resolve(
    writer: str, reader: str, writer_label: str = "writer", reader_label: str = "reader"
) -> list[tuple[str, str]]:
    """Where ``reader`` (an Avro schema text) cannot read data written with ``writer``: (field path, rule)."""
    w, r = json.loads(writer), json.loads(reader)
    return _Resolver(_Names(w), _Names(r), writer_label, reader_label).resolve(w, r, "")


def check_versions(schemas: tuple[str, ...] | list[str], mode: Mode = Mode.BACKWARD) -> list[Refusal]:
    """Each consecutive pair of versions (oldest first) by ``mode``."""
    refusals = []
    for index in range(1, len(schemas)):
        old, new = index, index + 1
        pairs = []
        if mode in (Mode.BACKWARD, Mode.FULL):
            pairs.append((schemas[index - 1], schemas[index], f"v{old}", f"v{new}"))
        if mode in (Mode.FORWARD, Mode.FULL):
            pairs.append((schemas[index], schemas[index - 1], f"v{new}", f"v{old}"))
        for writer, reader, writer_label, reader_label in pairs:
            refusals += [Refusal(f, old, new, rule) for f, rule in resolve(writer, reader, writer_label, reader_label)]
    return refusals


def avro_glue_type(schema: Any, names: _Names) -> str:
    """The Glue column type the archiver's Parquet gives an Avro type (through Spark's Avro reader)."""
    schema = names.deref(schema)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return avro_glue_type(branches[0], names)
        return "struct<" + ",".join(f"member{i}:{avro_glue_type(b, names)}" for i, b in enumerate(branches)) + ">"
    if not isinstance(schema, dict):
        return GLUE_PRIMITIVE[schema]
    logical = schema.get("logicalType")
    if logical == "decimal":
        return f"decimal({schema['precision']},{schema.get('scale', 0)})"
    complex_types = {
        "record": lambda: (
            "struct<" + ",".join(f"{f['name']}:{avro_glue_type(f['type'], names)}" for f in schema["fields"]) + ">"
        ),
        "array": lambda: f"array<{avro_glue_type(schema['items'], names)}>",
        "map": lambda: f"map<string,{avro_glue_type(schema['values'], names)}>",
    }
    if schema["type"] in complex_types:
        return complex_types[schema["type"]]()
    return GLUE_LOGICAL.get(logical or "", GLUE_PRIMITIVE[schema["type"]])


def _columns(text: str) -> dict[str, tuple[str, bool]]:
    """Top-level field → (Glue type, nullable)."""
    schema = json.loads(text)
    names = _Names(schema)
    return {
        f["name"]: (avro_glue_type(f["type"], names), isinstance(f["type"], list) and "null" in f["type"])
        for f in schema["fields"]
    }


ICEBERG_PROMOTIONS: Final = frozenset({("int", "bigint"), ("float", "double")})
"""The column type changes an Iceberg table's schema takes (Iceberg's type promotions)."""


def glue_refusals(schemas: tuple[str, ...] | list[str], *, iceberg: bool = False) -> list[Refusal]:
    """The consecutive version changes the Glue table refuses: a column whose type changes, a required column
    removed (the table keeps every column any version had). An Iceberg table's schema (``iceberg``: the archiver's
    commits evolve it by name, not the maintainer) also takes fields appended to a struct and Iceberg's promotions."""
    refusals = []
    for index in range(1, len(schemas)):
        before, after = _columns(schemas[index - 1]), _columns(schemas[index])
        for name, (old_type, nullable) in before.items():
            new_type = after[name][0] if name in after else old_type
            evolves = old_type.startswith("struct<") and new_type.startswith(old_type[:-1] + ",")  # fields appended
            if new_type != old_type and not (iceberg and (evolves or (old_type, new_type) in ICEBERG_PROMOTIONS)):
                table = "An Iceberg table" if iceberg else "Glue"
                rule = f"{table} refuses the column type change {old_type} → {new_type}; publish a new field or topic"
                refusals.append(Refusal(name, index, index + 1, rule))
            elif name not in after and not nullable:
                rule = "Glue refuses removing a required column; keep it, or make it optional first"
                refusals.append(Refusal(name, index, index + 1, rule))
    return refusals


def registry_differences(schemas: tuple[str, ...] | list[str], registered: list[RegisteredSchema]) -> list[str]:
    """How the catalog's versions differ from the registry's, position by position; a catalog version the registry
    does not hold yet must read data written with the registry's latest (backward, as the registry checks it when
    the producer registers it)."""
    problems = []
    for index, found in enumerate(registered):
        if index >= len(schemas):
            problems.append(
                f"the registry's version {found.version} (id {found.schema_id}) is missing from the catalog"
            )
        elif json.loads(found.schema) != json.loads(schemas[index]):
            problems.append(f"catalog v{index + 1} differs from the registry's version {found.version}")
    if registered and len(schemas) > len(registered):
        latest = registered[-1].schema
        for index in range(len(registered), len(schemas)):
            for field, rule in resolve(latest, schemas[index], "the registry's latest", f"v{index + 1}"):
                problems.append(f"v{index + 1} (not registered yet): field {field}: {rule}")
    return problems
