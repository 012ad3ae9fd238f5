"""What a registered schema version gives its table, whatever the registry's format (docs/formats.md): its columns as
an Avro schema (``kafkalake.registry.RegisteredSchema.schema``), and for Protobuf and JSON Schema what decodes its
records (``ProtobufDecoding``, ``JsonSchemaDecoding``). Rendered once per schema text, references and message in a
process: a run asks for the same versions topic after topic."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from kafkalake.json_schema import render as render_json_schema
from kafkalake.protobuf_schema import ProtoSchema, compile_files, index_bytes

PROTOBUF = "PROTOBUF"
JSON_SCHEMA = "JSON"
ROOT_NAME = "registered.proto"
"""The import name the registered ``.proto`` file is compiled under (its references keep theirs)."""


@dataclass(frozen=True)
class ProtobufDecoding:
    """How a Protobuf version's records decode: the descriptor set, the table's message and its index bytes, and
    the index bytes of the file's other messages (a record of one of those is not the table's)."""

    descriptor_set: bytes
    message: str
    index: bytes
    others: tuple[bytes, ...]


@dataclass(frozen=True)
class JsonSchemaDecoding:
    """How a JSON Schema version's records are validated: the schema and its references (name → text)."""

    schema: str
    references: tuple[tuple[str, str], ...]


@lru_cache(maxsize=1024)
def rendered(
    schema_type: str, text: str, references: str, message: str | None
) -> tuple[str, ProtobufDecoding | JsonSchemaDecoding]:
    """A Protobuf or JSON Schema text (``references``: the JSON of import name → text) as its table's columns (an
    Avro schema's JSON) and what decodes its records; ``message``: Protobuf's message, else the file's first."""
    texts: dict[str, str] = json.loads(references)
    if schema_type == PROTOBUF:
        return protobuf_columns(ProtoSchema(compile_files({**texts, ROOT_NAME: text}, ROOT_NAME), ROOT_NAME), message)
    if schema_type == JSON_SCHEMA:
        parsed = {n: json.loads(t) for n, t in texts.items()}
        columns = render_json_schema(json.loads(text), parsed, "value")
        return json.dumps(columns), JsonSchemaDecoding(text, tuple(sorted(texts.items())))
    raise ValueError(f"schemaType {schema_type} is not one kafkalake knows (AVRO, PROTOBUF, JSON)")


def protobuf_columns(schema: ProtoSchema, message: str | None) -> tuple[str, ProtobufDecoding]:
    """A compiled Protobuf file's message ``message`` (else its first) as the table's columns, and its decoding."""
    name = schema.message(message)
    others = tuple(index_bytes(path) for other, path in schema.messages.items() if other != name)
    decoding = ProtobufDecoding(schema.descriptor_set, name, index_bytes(schema.messages[name]), others)
    return json.dumps(schema.render(name)), decoding
