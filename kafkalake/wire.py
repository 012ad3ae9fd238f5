"""The Confluent wire format: magic byte 0, a 4-byte big-endian schema id, then the payload (Avro binary; for
Protobuf the message index first, ``kafkalake.protobuf_schema.index_bytes``; JSON Schema's JSON text).

One definition for the producer side (``encode``, ``frame``), the Python reader (``split_header``) and the Spark
decoder, which slices the same header with column expressions (``HEADER_SIZE``, ``MAGIC_BYTE``).
"""

from __future__ import annotations

import io
import json
import struct
from functools import cache
from typing import Any, Final

import fastavro

MAGIC_BYTE: Final = 0
HEADER: Final = struct.Struct(">bI")
HEADER_SIZE: Final = HEADER.size
SCHEMA_ID_BYTES: Final = 4


@cache
def _parsed(schema: str) -> Any:
    return fastavro.parse_schema(json.loads(schema))


def encode(schema_id: int, schema: str, record: dict[str, Any]) -> bytes:
    """An Avro record in Confluent wire format."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _parsed(schema), record)
    return frame(schema_id, out.getvalue())


def frame(schema_id: int, payload: bytes, index: bytes = b"") -> bytes:
    """A payload in Confluent wire format (``index``: a Protobuf message's, ``protobuf_schema.index_bytes``)."""
    return HEADER.pack(MAGIC_BYTE, schema_id) + index + payload


def split_header(value: bytes) -> tuple[int, bytes]:
    """Return (schema id, Avro payload); raise ValueError naming what is wrong with the frame."""
    if len(value) < HEADER_SIZE:
        raise ValueError(f"value of {len(value)} bytes is shorter than the {HEADER_SIZE}-byte Confluent header")
    magic, schema_id = HEADER.unpack_from(value)
    if magic != MAGIC_BYTE:
        raise ValueError(f"magic byte is {magic}, expected {MAGIC_BYTE}: not Confluent wire format")
    return schema_id, value[HEADER_SIZE:]
