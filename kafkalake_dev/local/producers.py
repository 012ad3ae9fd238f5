"""The local workload's Protobuf and JSON Schema producers: their schema files (``registered/<topic>/``: ``v<N>.proto``
or ``v<N>.schema.json``, and the files they reference), registered as Confluent's serializers register them (each
reference a subject named as it is imported, then each version with its references), and records encoded with them
in Confluent's wire format."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from kafkalake.protobuf_schema import WRAPPERS, ProtoSchema, compile_files, index_bytes
from kafkalake.registered_formats import JSON_SCHEMA, PROTOBUF, ROOT_NAME, rendered
from kafkalake.registry import Reference, RegistryClient
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import ValueFormat
from kafkalake.wire import frame

REGISTERED = Path(__file__).parent / "registered"
VERSION_FILE = re.compile(r"^v(\d+)\.(proto|schema\.json)$")
Encoder = Callable[[dict[str, Any], int], bytes]
"""A record (as the topic's rendering shapes it) and its index in the workload, in Confluent's wire format."""


class ProducerSchemas:
    """One topic's registered schema files."""

    def __init__(self, topic: Topic, root: Path = REGISTERED) -> None:
        self.topic, self.folder = topic, root / topic.name
        self.schema_type = PROTOBUF if topic.spec.value_format == ValueFormat.PROTOBUF else JSON_SCHEMA
        files = sorted(p for p in self.folder.rglob("*") if p.is_file())
        named = {p: VERSION_FILE.match(p.relative_to(self.folder).as_posix()) for p in files}
        self.versions = [p.read_text() for p, m in sorted(named.items(), key=_number) if m]
        self.references = {p.relative_to(self.folder).as_posix(): p.read_text() for p, m in named.items() if not m}

    def used(self, text: str) -> dict[str, str]:
        """The references ``text`` imports (or ``$ref``s), and theirs."""
        found: dict[str, str] = {}
        pending = [text]
        while pending:
            current = pending.pop()
            for name, body in self.references.items():
                if name not in found and (f'"{name}"' in current or f'"{name}#' in current):
                    found[name] = body
                    pending.append(body)
        return found

    def rendered(self) -> list[str]:
        """Each version's columns, as the archiver renders them from the registry (the catalog's ``.avsc``)."""
        return [
            rendered(self.schema_type, t, json.dumps(self.used(t), sort_keys=True), self.topic.spec.message)[0]
            for t in self.versions
        ]

    def register(self, registry: RegistryClient, subject: str) -> list[Encoder]:
        """Register every reference, then every version under ``subject``; an encoder per version."""
        for name, body in self.references.items():
            registry.register(name, body, self.schema_type, self._references(body))
        encoders = []
        for text in self.versions:
            schema_id = registry.register(subject, text, self.schema_type, self._references(text))
            encoders.append(self.encoder(schema_id, text))
        return encoders

    def _references(self, text: str) -> list[Reference]:
        return [Reference(name, name, 1) for name in self.used(text) if f'"{name}' in text]

    def encoder(self, schema_id: int, text: str) -> Encoder:
        """Records of version ``text``, registered under ``schema_id``, in Confluent's wire format."""
        if self.schema_type == JSON_SCHEMA:
            return lambda record, _: frame(schema_id, json.dumps(record, default=str).encode())
        schema = ProtoSchema(compile_files({**self.used(text), ROOT_NAME: text}, ROOT_NAME), ROOT_NAME)
        name = schema.message(self.topic.spec.message)
        message_class, index = schema.message_class(name), index_bytes(schema.messages[name])
        return lambda record, i: frame(schema_id, _filled(message_class(), record, i).SerializeToString(), index)


def _number(item: tuple[Path, re.Match[str] | None]) -> int:
    return int(item[1].group(1)) if item[1] else 0


def _filled(message: Message, record: dict[str, Any], i: int) -> Message:
    """``message`` with the fields ``record`` holds (an enum takes its ``i``-th value, cycling)."""
    for field in message.DESCRIPTOR.fields:
        value = record.get(field.name)
        if value is not None:
            _fill(message, field, value, i)
    return message


def _fill(message: Message, field: Any, value: Any, i: int) -> None:
    target = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        entry = field.message_type.fields_by_name["value"]
        for key, item in value.items():
            if entry.message_type is not None:
                _filled(target[key], item, i)
            else:
                target[key] = item
    elif field.label == field.LABEL_REPEATED:
        for item in value:
            if field.message_type is not None:
                _filled(target.add(), item, i)
            else:
                target.append(_scalar(field, item, i))
    elif field.message_type is None:
        setattr(message, field.name, _scalar(field, value, i))
    elif field.message_type.full_name == "google.protobuf.Timestamp":
        target.FromDatetime(value if isinstance(value, datetime) else datetime.fromisoformat(value))
    elif field.message_type.full_name in WRAPPERS:
        target.value = value
    else:
        _filled(target, value, i)


def _scalar(field: Any, value: Any, i: int) -> Any:
    if field.enum_type is not None:
        values = field.enum_type.values
        return values[i % len(values)].number
    return value
