"""JSON Schema from the registry: a registered schema rendered as the table's columns in Avro notation, and the
validator its records are checked with (docs/formats.md).

The rendering (``render``), so that the catalog treats it as an Avro schema (personal fields, subject fields, declared
versions) and Spark parses the records into the struct spark-avro maps it to:
- an object with ``properties`` is a record of them, in their order; a property in ``required`` is not nullable, any
  other is (absent is null);
- an object without ``properties`` whose ``additionalProperties`` is a schema is a map of it;
- ``array`` is an array of its ``items``; ``string`` a string (whatever its ``format``), ``integer`` a long,
  ``number`` a double, ``boolean`` a boolean; an ``enum`` or ``const`` of strings a string;
- ``"type": [T, "null"]``, and ``oneOf``/``anyOf`` of one schema and ``{"type": "null"}``, are T, nullable;
- ``$ref`` to ``#/definitions/..``, ``#/$defs/..``, or to a reference (another registered schema, by its name, with or
  without a ``#/..`` fragment into it) is the schema it points at;
- a property's ``confluent:tags`` become its field's (``kafkalake.personal``);
- anything else (a free-form object, a union of several types, a schema that contains itself) cannot be columns:
  ``JsonSchemaError`` names where.
Unknown properties: a record's columns are its ``properties``; a value's other members are not stored. With
``"additionalProperties": false`` the validator refuses such a value, so it is quarantined instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from kafkalake.personal import CONFLUENT_TAGS

PRIMITIVES = {"string": "string", "integer": "long", "number": "double", "boolean": "boolean"}
NOT_A_NAME = re.compile(r"[^A-Za-z0-9_]")


class JsonSchemaError(ValueError):
    """A JSON Schema that cannot be rendered as columns; the message names the place (a JSON pointer) and why."""


def render(schema: Mapping[str, Any], references: Mapping[str, Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The registered ``schema`` (its ``references``: name → schema) as an Avro record named ``name``."""
    renderer = _Renderer(schema, references)
    rendered = renderer.kind(schema, "#", name, ())
    if not (isinstance(rendered, dict) and rendered.get("type") == "record"):
        raise JsonSchemaError("#: the schema's top level must be an object with properties (a record)")
    return rendered


class _Renderer:
    def __init__(self, root: Mapping[str, Any], references: Mapping[str, Mapping[str, Any]]) -> None:
        self.root, self.references = root, references
        self.names: set[str] = set()

    def resolve(self, schema: Mapping[str, Any], where: str) -> tuple[Mapping[str, Any], str]:
        """``schema`` with its ``$ref`` followed (repeatedly), and where it then lies."""
        seen = set()
        while "$ref" in schema:
            ref = str(schema["$ref"])
            if ref in seen:
                raise JsonSchemaError(f"{where}: $ref {ref} refers to itself")
            seen.add(ref)
            document_name, _, fragment = ref.partition("#")
            if document_name:
                if document_name not in self.references:
                    known = ", ".join(self.references) or "none"
                    raise JsonSchemaError(f"{where}: $ref {ref} names no reference of the schema (it has: {known})")
                document: Mapping[str, Any] = self.references[document_name]
            else:
                document = self.root
            schema, where = _pointer(document, fragment, ref), ref
        return schema, where

    def kind(self, schema: Mapping[str, Any], where: str, name: str, within: tuple[str, ...]) -> Any:
        """The Avro type of ``schema``: nullable ones as a union with null."""
        schema, place = self.resolve(schema, where)
        if place in within:
            raise JsonSchemaError(f"{where}: the schema at {place} contains itself: not a table's columns")
        inner, nullable = _without_null(schema, place)
        if inner is not schema:
            found = self.kind(inner, place, name, within)
            return ["null", found] if nullable and not isinstance(found, list) else found
        types = schema.get("type")
        if isinstance(types, list):
            kinds = [t for t in types if t != "null"]
            if len(kinds) != 1:
                raise JsonSchemaError(f"{place}: a value of types {types} is not one column's type")
            found = self.kind({**schema, "type": kinds[0]}, place, name, within)
            return ["null", found] if "null" in types else found
        if types == "object" or (types is None and "properties" in schema):
            return self.record(schema, place, name, (*within, place))
        if types == "array":
            items = schema.get("items")
            if not isinstance(items, Mapping):
                raise JsonSchemaError(f"{place}: an array needs one items schema to be a column")
            return {"type": "array", "items": _required(self.kind(items, f"{place}/items", f"{name}_item", within))}
        if types in PRIMITIVES:
            return PRIMITIVES[str(types)]
        values = schema.get("enum", [schema["const"]] if "const" in schema else None)
        if types is None and values and all(isinstance(v, str) for v in values):
            return "string"
        raise JsonSchemaError(f"{place}: a schema of type {types!r} is not one column's type; give it a type")

    def record(self, schema: Mapping[str, Any], place: str, name: str, within: tuple[str, ...]) -> Any:
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if not properties:
            if isinstance(extra, Mapping):
                return {
                    "type": "map",
                    "values": _required(self.kind(extra, f"{place}/additionalProperties", name, within)),
                }
            raise JsonSchemaError(
                f"{place}: an object without properties holds anything: not columns; list its properties, or give "
                "additionalProperties a schema (a map)"
            )
        required = set(schema.get("required", ()))
        fields = []
        for key, member in properties.items():
            if not isinstance(member, Mapping):
                raise JsonSchemaError(f"{place}/properties/{key}: a property's schema must be an object")
            found = self.kind(member, f"{place}/properties/{key}", f"{name}_{key}", within)
            field: dict[str, Any] = {"name": key}
            if key in required:
                field["type"] = _required(found)
            else:
                field["type"] = found if isinstance(found, list) else ["null", found]
                field["default"] = None
            tags = member.get(CONFLUENT_TAGS) or self.resolve(member, place)[0].get(CONFLUENT_TAGS)
            if tags:
                field[CONFLUENT_TAGS] = list(tags)
            fields.append(field)
        record_name = self.unique(NOT_A_NAME.sub("_", str(schema.get("title") or name)))
        return {"type": "record", "name": record_name, "fields": fields}

    def unique(self, name: str) -> str:
        name = name if re.match(r"[A-Za-z_]", name) else f"_{name}"
        found, n = name, 2
        while found in self.names:
            found, n = f"{name}_{n}", n + 1
        self.names.add(found)
        return found


def _required(kind: Any) -> Any:
    """An array's items and a map's values are never null in a column (their type without the null branch)."""
    return kind[1] if isinstance(kind, list) else kind


def _without_null(schema: Mapping[str, Any], place: str) -> tuple[Mapping[str, Any], bool]:
    """``oneOf``/``anyOf`` of one schema and ``{"type": "null"}``: that schema; else ``schema`` itself."""
    for key in ("oneOf", "anyOf"):
        if key in schema:
            options = list(schema[key])
            others = [o for o in options if o.get("type") != "null"]
            if len(others) != 1:
                raise JsonSchemaError(f"{place}/{key}: a choice of {len(others)} schemas is not one column's type")
            return others[0], len(others) < len(options)
    return schema, False


def _pointer(document: Mapping[str, Any], fragment: str, ref: str) -> Mapping[str, Any]:
    found: Any = document
    for escaped in [p for p in fragment.split("/") if p]:
        part = escaped.replace("~1", "/").replace("~0", "~")
        if not isinstance(found, Mapping) or part not in found:
            raise JsonSchemaError(f"$ref {ref}: nothing at {fragment}")
        found = found[part]
    if not isinstance(found, Mapping):
        raise JsonSchemaError(f"$ref {ref}: not a schema")
    return found


def validator(schema: Mapping[str, Any], references: Mapping[str, Mapping[str, Any]]) -> Callable[[Any], str | None]:
    """A function of a parsed value: None when it validates against ``schema`` (its ``$ref``s into ``references``
    resolved), else where and which rule it broke (``$.amount: minimum``, ``$.lines[].sku: type``), named by the
    schema only (``_place``): never a value nor a map's key, which may be personal data, while the reason is stored
    beside the quarantined record and counted in metrics."""
    import fastjsonschema  # imported here: only archivers of JSON Schema topics validate

    handlers = {"": lambda uri: dict(references[uri.partition("#")[0]])}
    check = fastjsonschema.compile(dict(schema), handlers=handlers)
    named = _property_names([schema, *references.values()])

    def violation(value: Any) -> str | None:
        try:
            check(value)
        except fastjsonschema.JsonSchemaValueException as exc:
            return f"${_place(exc.path[1:], named)}: {exc.rule}"
        return None

    return violation


def _place(path: list[Any], named: set[str]) -> str:
    """Where in a value a rule broke, by the schema's own names only: a property the schemas declare by its name, an
    array's element as ``[]``, any other member (a map's key: data, maybe personal) as ``{}``."""
    parts: list[str] = []
    for part in map(str, path):
        found = "[]" if part.isdigit() else f".{part}" if part in named else "{}"
        if not (found == "{}" and parts and parts[-1] == "{}"):  # fastjsonschema splits a key at its dots
            parts.append(found)
    return "".join(parts)


def _property_names(schemas: list[Any]) -> set[str]:
    """Every property name the schemas declare, at any depth."""
    found: set[str] = set()
    pending = list(schemas)
    while pending:
        node = pending.pop()
        if isinstance(node, Mapping):
            if isinstance(node.get("properties"), Mapping):
                found.update(node["properties"])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return found
