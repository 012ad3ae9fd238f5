"""Protobuf and JSON Schema versions as the table's columns (``kafkalake.protobuf_schema``, ``kafkalake.json_schema``,
``kafkalake.registered_formats``): the message index, the rendering rules, the validator's reasons."""

from __future__ import annotations

import json

import fastavro
import pytest

from infra.repo import catalog_dir
from kafkalake.json_schema import JsonSchemaError, validator
from kafkalake.json_schema import render as render_json_schema
from kafkalake.personal import schema_personal_fields
from kafkalake.protobuf_schema import ProtobufSchemaError, ProtoSchema, compile_files, index_bytes, read_index
from kafkalake.registered_formats import PROTOBUF, ProtobufDecoding, rendered
from kafkalake.registry import RegisteredSchema
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake_dev.local.producers import ProducerSchemas
from spark_jobs.archiver.records import FormatMismatch, version_schemas

CATALOG = load_topic_catalog(catalog_dir())


@pytest.mark.parametrize(
    ("path", "encoded"),
    [((0,), b"\x00"), ((1,), b"\x02\x02"), ((0, 1), b"\x04\x00\x02"), ((70,), b"\x02\x8c\x01")],
)
def test_message_indexes_are_written_and_read_as_confluent_does(path: tuple[int, ...], encoded: bytes) -> None:
    assert index_bytes(path) == encoded
    assert read_index(encoded + b"payload") == (path, len(encoded))


def test_an_index_cut_short_is_an_error() -> None:
    with pytest.raises(ValueError, match="ends before"):
        read_index(b"\x04\x00")


NESTED = """
syntax = "proto3";
package p;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/any.proto";
import "confluent/meta.proto";
message First { string a = 1; }
message Outer {
  message Inner { string secret = 1 [(confluent.field_meta).tags = "PII"]; }
  Inner inner = 1;
  repeated Inner inners = 2;
  map<int32, Inner> by_id = 3;
  optional int64 maybe = 4;
  int32 plain = 5;
  google.protobuf.Timestamp at = 6;
  google.protobuf.Int64Value wrapped = 7;
  google.protobuf.Any any = 8;
  oneof choice { string left = 9; Inner right = 10; }
  uint32 unsigned = 11;
  E e = 12;
  enum E { ZERO = 0; ONE = 1; }
}
"""


def test_a_protobuf_message_renders_by_the_documented_rules() -> None:
    schema = ProtoSchema(compile_files({"n.proto": NESTED}, "n.proto"), "n.proto")
    assert schema.messages == {"p.First": (0,), "p.Outer": (1,), "p.Outer.Inner": (1, 0)}
    assert schema.message(None) == "p.First"
    record = schema.render("p.Outer")
    fastavro.parse_schema(record)
    kinds = {f["name"]: f["type"] for f in record["fields"]}
    inner = {"type": "record", "name": "Inner", "namespace": "p.Outer", "fields": [
        {"name": "secret", "type": "string", "confluent:tags": ["PII"]}
    ]}  # fmt: skip
    assert kinds["inner"] == ["null", inner]  # a message has presence: nullable
    assert kinds["inners"] == {"type": "array", "items": "p.Outer.Inner"}  # named once, referred to after
    assert kinds["by_id"] == {"type": "map", "values": "p.Outer.Inner"}
    assert kinds["maybe"] == ["null", "long"]  # proto3 optional
    assert kinds["plain"] == "int"  # no presence: its value, zero included
    assert kinds["at"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert kinds["wrapped"] == ["null", "long"]
    assert kinds["any"] == ["null", {"type": "record", "name": "Any", "namespace": "google.protobuf", "fields": [
        {"name": "type_url", "type": "string"}, {"name": "value", "type": "bytes"}
    ]}]  # fmt: skip
    assert kinds["left"] == ["null", "string"] and kinds["right"] == ["null", "p.Outer.Inner"]  # oneof arms
    assert kinds["unsigned"] == "long" and kinds["e"] == "string"
    # the tag is found wherever the message is used: a field, an array's elements, a map's values, a oneof arm
    tagged = {"inner.secret", "inners[].secret", "by_id{}.secret", "right.secret"}
    assert schema_personal_fields(record) == dict.fromkeys(tagged, "hmac")


def test_a_protobuf_message_that_contains_itself_or_a_missing_one_is_refused_by_name() -> None:
    text = 'syntax = "proto3"; package q; message Node { Node next = 1; }'
    schema = ProtoSchema(compile_files({"r.proto": text}, "r.proto"), "r.proto")
    with pytest.raises(ProtobufSchemaError, match=r"message q.Node contains itself \(q.Node > q.Node\)"):
        schema.render("q.Node")
    with pytest.raises(ProtobufSchemaError, match=r"has no message q.Other \(it has: q.Node\)"):
        schema.message("q.Other")
    with pytest.raises(ProtobufSchemaError, match="does not compile"):
        compile_files({"bad.proto": 'syntax = "proto3"; message X { strin a = 1; }'}, "bad.proto")


def test_the_decoding_names_the_table_message_and_the_other_messages_indexes() -> None:
    _, decoding = rendered(PROTOBUF, NESTED, "{}", "p.Outer")
    assert isinstance(decoding, ProtobufDecoding)
    assert decoding.message == "p.Outer" and decoding.index == b"\x02\x02"
    assert set(decoding.others) == {b"\x00", b"\x04\x02\x00"}


ADDRESS = {"type": "object", "properties": {"zip": {"type": "string", "confluent:tags": ["PII"]}}, "required": ["zip"]}
TICKET = {
    "title": "Ticket",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string"},
        "n": {"type": "integer", "minimum": 0},
        "home": {"$ref": "address.json"},
        "work": {"$ref": "#/definitions/Place"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object", "additionalProperties": {"type": "number"}},
        "note": {"type": ["string", "null"]},
        "kind": {"enum": ["a", "b"]},
        "maybe": {"oneOf": [{"type": "boolean"}, {"type": "null"}]},
    },
    "required": ["id", "n", "tags"],
    "definitions": {"Place": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def test_a_json_schema_renders_by_the_documented_rules() -> None:
    record = render_json_schema(TICKET, {"address.json": ADDRESS}, "value")
    fastavro.parse_schema(record)
    kinds = {f["name"]: f["type"] for f in record["fields"]}
    assert record["name"] == "Ticket"
    assert kinds["id"] == "string" and kinds["n"] == "long"  # required: not nullable
    assert kinds["home"] == ["null", {"type": "record", "name": "value_home", "fields": [
        {"name": "zip", "type": "string", "confluent:tags": ["PII"]}
    ]}]  # fmt: skip
    assert kinds["work"][1]["fields"] == [{"name": "city", "type": ["null", "string"], "default": None}]
    assert kinds["tags"] == {"type": "array", "items": "string"}
    assert kinds["attrs"] == ["null", {"type": "map", "values": "double"}]
    assert kinds["note"] == ["null", "string"] and kinds["kind"] == ["null", "string"]
    assert kinds["maybe"] == ["null", "boolean"]
    assert schema_personal_fields(record) == {"home.zip": "hmac"}


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "properties": {"x": {"type": "object"}}}, "#/properties/x: an object without properties"),
        ({"type": "object", "properties": {"x": {"type": ["string", "integer"]}}}, "is not one column's type"),
        ({"type": "object", "properties": {"x": {"$ref": "missing.json"}}}, "names no reference of the schema"),
        ({"type": "string"}, "must be an object with properties"),
    ],
)
def test_a_json_schema_that_cannot_be_columns_says_where(schema: dict[str, object], message: str) -> None:
    with pytest.raises(JsonSchemaError, match=message):
        render_json_schema(schema, {}, "value")


def test_the_validator_says_where_and_which_rule_never_the_value() -> None:
    check = validator(TICKET, {"address.json": ADDRESS})
    good = {"id": "a", "n": 1, "tags": []}
    assert check(good) is None
    assert check({**good, "n": -7}) == "$.n: minimum"
    assert check({**good, "home": {}}) == "$.home: required"
    assert check({**good, "secret-value": 1}) == "$: additionalProperties"
    refused = check({**good, "id": 12345678})
    assert refused == "$.id: type" and "12345678" not in refused
    # a map's keys are data: never named; an array's elements by the schema's shape, not their place
    assert check({**good, "attrs": {"jane@example.com": "x"}}) == "$.attrs{}: type"
    assert check({**good, "tags": ["a", 7]}) == "$.tags[]: type"


@pytest.mark.parametrize("name", ["order-placed", "ticket-opened"])
def test_the_catalog_declares_exactly_what_the_demo_producers_register(name: str) -> None:
    """The catalog's .avsc of each version is the rendering of the schema the demo's producers register."""
    topic = CATALOG.get(name, "staging")
    assert [json.loads(t) for t in topic.schemas] == [json.loads(t) for t in ProducerSchemas(topic).rendered()]


def test_message_is_refused_on_a_topic_that_is_not_protobuf() -> None:
    from pydantic import ValidationError

    from kafkalake.topic_spec import TopicSpec

    with pytest.raises(ValidationError, match="remove message, or set value_format: protobuf"):
        TopicSpec(value_format="avro", message="acme.shop.OrderPlaced")


class OneVersion:
    """A registry holding one version of every subject, of ``schema_type``."""

    url = "http://registry"

    def __init__(self, schema_type: str) -> None:
        self.schema_type = schema_type

    def versions(self, subject: str, message: str | None = None) -> list[RegisteredSchema]:
        return [RegisteredSchema(subject, 1, 7, CATALOG.get("card-authorized", "staging").schemas[0], self.schema_type)]


def test_a_subject_of_another_format_than_the_topic_file_says_fails_the_topic_with_the_fix() -> None:
    topic = CATALOG.get("card-authorized", "staging")  # value_format: avro
    assert [v.version for v in version_schemas(topic, OneVersion("AVRO"), key_at_hand=True)] == [1]  # type: ignore[arg-type]
    with pytest.raises(FormatMismatch, match=r"holds PROTOBUF schemas .* set value_format: protobuf there"):
        version_schemas(topic, OneVersion("PROTOBUF"), key_at_hand=True)  # type: ignore[arg-type]
