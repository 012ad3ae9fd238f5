"""Protobuf schemas from the registry: compiled into a descriptor set, their messages' index paths in Confluent's wire
format, and a message rendered as the table's columns in Avro notation (docs/formats.md).

A registered ``.proto`` text is compiled with protoc (``grpcio-tools``), its references (imports registered as
subjects of their own: ``kafkalake.registry.RegistryClient.referenced_files``) beside it; ``google/protobuf/*.proto``
come with protoc and ``confluent/meta.proto`` with kafkalake (``kafkalake/proto``), so neither needs registering.

The table's columns are the message rendered as an Avro record (``render``), so that everything the catalog does with
a schema (personal fields, subject fields, the versions it declares) works on it as on Avro's, and the Spark decoder
(``spark_jobs.protobuf_decoder``) fills exactly the struct spark-avro maps the rendering to. The rules:
- nested messages are records; repeated fields arrays; maps Avro maps (their keys as text); enums strings (their
  names); ``bytes`` bytes; ``google.protobuf.Timestamp`` a ``timestamp-micros``; a wrapper (``StringValue``, ...) its
  nullable scalar; ``Any`` a record of its ``type_url`` and ``value`` bytes;
- a field with presence (a message, a wrapper, proto3 ``optional``, each arm of a ``oneof``, proto2's optional
  fields) is nullable: unset is null, never its default; a proto3 scalar without presence is its value, zero
  included, as proto3 defines it;
- ``uint32`` is a long (it does not fit an int); ``uint64`` a long too (values past 2^63 read negative);
- a field's ``(confluent.field_meta).tags`` become its ``confluent:tags`` (``kafkalake.personal``);
- a message that contains itself cannot be a table's columns: ``ProtobufSchemaError`` names it.
"""

from __future__ import annotations

import importlib.resources
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kafkalake.personal import CONFLUENT_TAGS

BUNDLED = ("confluent/meta.proto",)
"""kafkalake's own copies of imports every registry resolves without a reference (``kafkalake/proto``), read as
package resources: the jobs import kafkalake from a zip."""
FIELD_META = 1088
"""The number of Confluent's ``field_meta`` extension of ``google.protobuf.FieldOptions`` (``confluent/meta.proto``)."""
TIMESTAMP = "google.protobuf.Timestamp"
WRAPPERS = frozenset(
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)
SCALARS = {
    FieldDescriptor.TYPE_DOUBLE: "double",
    FieldDescriptor.TYPE_FLOAT: "float",
    FieldDescriptor.TYPE_INT64: "long",
    FieldDescriptor.TYPE_UINT64: "long",
    FieldDescriptor.TYPE_INT32: "int",
    FieldDescriptor.TYPE_FIXED64: "long",
    FieldDescriptor.TYPE_FIXED32: "long",
    FieldDescriptor.TYPE_BOOL: "boolean",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_UINT32: "long",
    FieldDescriptor.TYPE_ENUM: "string",
    FieldDescriptor.TYPE_SFIXED32: "int",
    FieldDescriptor.TYPE_SFIXED64: "long",
    FieldDescriptor.TYPE_SINT32: "int",
    FieldDescriptor.TYPE_SINT64: "long",
}


class ProtobufSchemaError(ValueError):
    """A schema that does not compile, a message it lacks, or one that cannot be a table's columns."""


def compile_files(files: Mapping[str, str], root: str) -> bytes:
    """The serialized ``FileDescriptorSet`` of ``root`` and everything it imports, compiled from ``files`` (import
    name → text: the registered schema under ``root`` and its references), the well-known types and the bundled
    imports."""
    from grpc_tools import _protoc_compiler, protoc  # imported here: protoc is only needed where schemas compile

    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    bundled = {name: (importlib.resources.files("kafkalake") / "proto" / name).read_text() for name in BUNDLED}
    with tempfile.TemporaryDirectory(prefix="kafkalake-proto-") as scratch:
        for name, text in {**bundled, **files}.items():
            path = Path(scratch, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        includes = [scratch, well_known]
        out = Path(scratch, ".descriptor-set")
        args = ["protoc", *(f"-I{i}" for i in includes), f"--descriptor_set_out={out}", "--include_imports", root]
        if protoc.main(args) != 0:
            try:
                _protoc_compiler.get_protos(root.encode(), [i.encode() for i in includes])
            except _protoc_compiler.ProtocErrors as exc:
                raise ProtobufSchemaError(f"{root} does not compile: {exc}") from None
            raise ProtobufSchemaError(f"{root} does not compile (protoc said no more)")
        return out.read_bytes()


def index_bytes(path: tuple[int, ...]) -> bytes:
    """A message's index path as Confluent's serializers write it after the schema id: the count, then each index,
    as zig-zag varints; the first message of the file (``(0,)``) as the single byte 0."""
    if path == (0,):
        return b"\x00"
    return b"".join(_varint(n << 1) for n in (len(path), *path))


def read_index(data: bytes) -> tuple[tuple[int, ...], int]:
    """The index path at the start of ``data`` (after the schema id) and where the payload starts; ``ValueError``
    when the bytes end inside it."""
    count, at = _read_varint(data, 0)
    if count == 0:
        return (0,), at
    path = []
    for _ in range(count):
        n, at = _read_varint(data, at)
        path.append(n)
    return tuple(path), at


def _varint(zigzagged: int) -> bytes:
    out = bytearray()
    while True:
        byte, zigzagged = zigzagged & 0x7F, zigzagged >> 7
        out.append(byte | (0x80 if zigzagged else 0))
        if not zigzagged:
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("the message index ends before its last varint")
        byte = data[at]
        value, at, shift = value | (byte & 0x7F) << shift, at + 1, shift + 7
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at


@dataclass(frozen=True)
class ProtoSchema:
    """One registered ``.proto`` file, compiled: its messages and their index paths."""

    descriptor_set: bytes
    root: str
    """The import name of the registered file within ``descriptor_set``."""

    @cached_property
    def pool(self) -> descriptor_pool.DescriptorPool:
        pool = descriptor_pool.DescriptorPool()
        for file in descriptor_pb2.FileDescriptorSet.FromString(self.descriptor_set).file:
            pool.Add(file)
        return pool

    @cached_property
    def messages(self) -> dict[str, tuple[int, ...]]:
        """Every message of the file, nested ones included (map entries left out), by full name: its index path."""
        file = self.pool.FindFileByName(self.root)
        found: dict[str, tuple[int, ...]] = {}

        def walk(message: Descriptor, path: tuple[int, ...]) -> None:
            found[message.full_name] = path
            for index, nested in enumerate(message.nested_types):
                if not nested.GetOptions().map_entry:
                    walk(nested, (*path, index))

        for index, message in enumerate(file.message_types_by_name.values()):
            walk(message, (index,))
        return found

    def message(self, name: str | None) -> str:
        """The full name of the message ``name`` (a full name, or None for the file's first message)."""
        if name is None:
            if not self.messages:
                raise ProtobufSchemaError(f"{self.root} declares no message")
            return next(iter(self.messages))
        if name not in self.messages:
            known = ", ".join(self.messages) or "none"
            raise ProtobufSchemaError(f"{self.root} has no message {name} (it has: {known}); fix the topic's message")
        return name

    def message_class(self, name: str) -> Any:
        """The Python class of message ``name`` (to encode and decode samples)."""
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(name))

    def render(self, name: str) -> dict[str, Any]:
        """Message ``name`` as the table's columns: an Avro record (the rules in this module's docstring)."""
        record = _Renderer(self.pool).record(self.pool.FindMessageTypeByName(name), ())
        assert isinstance(record, dict)  # a message's first rendering is its record, never a reference to it
        return record


class _Renderer:
    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self.meta = _field_meta_reader(pool)
        self.defined: set[str] = set()

    def record(self, message: Descriptor, within: tuple[str, ...]) -> Any:
        if message.full_name in within:
            chain = " > ".join((*within, message.full_name))
            raise ProtobufSchemaError(f"message {message.full_name} contains itself ({chain}): not a table's columns")
        if message.full_name in self.defined:
            return message.full_name
        self.defined.add(message.full_name)
        fields = [self.field(f, (*within, message.full_name)) for f in message.fields]
        namespace, _, name = message.full_name.rpartition(".")
        return {"type": "record", "name": name, **({"namespace": namespace} if namespace else {}), "fields": fields}

    def field(self, field: FieldDescriptor, within: tuple[str, ...]) -> dict[str, Any]:
        kind: Any
        if _is_map(field):
            kind = {"type": "map", "values": self.single(field.message_type.fields_by_name["value"], within)}
        elif _repeated(field):
            kind = {"type": "array", "items": self.single(field, within)}
        else:
            kind = self.single(field, within)
            if field.has_presence:
                kind = ["null", kind]
        rendered: dict[str, Any] = {"name": field.name, "type": kind}
        if field.has_presence and not _repeated(field):
            rendered["default"] = None
        if tags := self.tags(field):
            rendered[CONFLUENT_TAGS] = tags
        return rendered

    def single(self, field: FieldDescriptor, within: tuple[str, ...]) -> Any:
        if field.type not in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
            return SCALARS[field.type]
        message = field.message_type
        if message.full_name == TIMESTAMP:
            return {"type": "long", "logicalType": "timestamp-micros"}
        if message.full_name in WRAPPERS:
            return SCALARS[message.fields_by_name["value"].type]
        return self.record(message, within)

    def tags(self, field: FieldDescriptor) -> list[str]:
        options = field.GetOptions().SerializeToString()
        return list(self.meta.FromString(options).field_meta.tags) if options and self.meta else []


def _field_meta_reader(pool: descriptor_pool.DescriptorPool) -> Any:
    """A message class reading Confluent's ``field_meta`` extension out of a field's serialized options (None when
    no file of the pool imports ``confluent/meta.proto``, so no field can carry it)."""
    try:
        pool.FindMessageTypeByName("confluent.Meta")
    except KeyError:
        return None
    reader = descriptor_pb2.FileDescriptorProto(
        name="kafkalake/field_meta_reader.proto", package="kafkalake", dependency=["confluent/meta.proto"]
    )
    message = reader.message_type.add(name="FieldMetaReader")
    message.field.add(
        name="field_meta",
        number=FIELD_META,
        type=FieldDescriptor.TYPE_MESSAGE,
        type_name=".confluent.Meta",
        label=FieldDescriptor.LABEL_OPTIONAL,
    )
    pool.Add(reader)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kafkalake.FieldMetaReader"))


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == FieldDescriptor.TYPE_MESSAGE and bool(field.message_type.GetOptions().map_entry)


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)
