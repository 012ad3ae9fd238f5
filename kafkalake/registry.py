"""A thin client for the Confluent schema-registry REST API, and the Confluent wire format.

Works against Confluent Schema Registry and any compatible one (Apicurio's ``/apis/ccompat/v7``).
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

import fastavro
import httpx

MAGIC_BYTE = 0
HEADER = struct.Struct(">bI")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(RuntimeError):
    """The registry refused or could not be reached; the message names the URL and the answer."""


@dataclass(frozen=True)
class RegisteredSchema:
    subject: str
    version: int
    schema_id: int
    schema: str


class RegistryClient:
    def __init__(self, url: str, http: httpx.Client | None = None, auth: tuple[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self._http = http or httpx.Client(timeout=10.0, auth=auth)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.url}{path}"
        try:
            response = self._http.request(method, url, json=body, headers={"Content-Type": CONTENT_TYPE})
        except httpx.HTTPError as exc:
            raise RegistryError(f"schema registry at {self.url} unreachable ({exc}); is it running?") from exc
        if response.status_code >= 400:
            raise RegistryError(f"{method} {url} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def register(self, subject: str, schema: str) -> int:
        """Register (idempotently) and return the schema id."""
        return int(self._call("POST", f"/subjects/{subject}/versions", {"schema": schema, "schemaType": "AVRO"})["id"])

    def schema_by_id(self, schema_id: int) -> str:
        return str(self._call("GET", f"/schemas/ids/{schema_id}")["schema"])

    def versions(self, subject: str) -> list[RegisteredSchema]:
        """Every version of a subject, oldest first (empty when the subject does not exist)."""
        try:
            numbers = self._call("GET", f"/subjects/{subject}/versions")
        except RegistryError as exc:
            if " answered 404" in str(exc):
                return []
            raise
        found = []
        for number in numbers:
            item = self._call("GET", f"/subjects/{subject}/versions/{number}")
            found.append(RegisteredSchema(subject, int(item["version"]), int(item["id"]), str(item["schema"])))
        return found


def value_subject(kafka_topic: str) -> str:
    """The TopicNameStrategy subject for a topic's values."""
    return f"{kafka_topic}-value"


@cache
def _parsed(schema: str) -> Any:
    return fastavro.parse_schema(json.loads(schema))


def encode(schema_id: int, schema: str, record: dict[str, Any]) -> bytes:
    """Confluent wire format: magic byte 0, 4-byte big-endian schema id, Avro binary."""
    out = io.BytesIO()
    out.write(HEADER.pack(MAGIC_BYTE, schema_id))
    fastavro.schemaless_writer(out, _parsed(schema), record)
    return out.getvalue()


def split_header(value: bytes) -> tuple[int, bytes]:
    """Return (schema id, Avro payload); raise ValueError naming what is wrong with the frame."""
    if len(value) < HEADER.size:
        raise ValueError(f"value of {len(value)} bytes is shorter than the 5-byte Confluent header")
    magic, schema_id = HEADER.unpack_from(value)
    if magic != MAGIC_BYTE:
        raise ValueError(f"magic byte is {magic}, expected {MAGIC_BYTE}: not Confluent wire format")
    return schema_id, value[HEADER.size :]
