"""What a topic's YAML file in the catalog may say (``TopicSpec``), with its defaults: formats, business-time
candidates, the archive policy, personal data and erasure. The catalog (``kafkalake.topic_catalog``) loads the files
into these models, validates them against each other and the schemas, and derives every per-topic name."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kafkalake.lftags import Sensitivity
from kafkalake.naming import TableInference
from kafkalake.personal import PiiAction, QuarantineMode


class ValueFormat(StrEnum):
    """How a topic's values are written (``value_format``; docs/formats.md)."""

    AVRO = "avro"
    """Confluent-framed Avro, its schemas in the registry."""
    PROTOBUF = "protobuf"
    """Confluent-framed Protobuf (a message index after the schema id), its ``.proto`` files in the registry."""
    JSON_SCHEMA = "json_schema"
    """Confluent-framed JSON, validated against its JSON Schema in the registry."""
    JSON = "json"
    """Plain JSON, no framing and no registry: its columns are the catalog's ``.avsc``."""

    @property
    def schema_type(self) -> str | None:
        """The registry's ``schemaType`` of the format's schemas (None: the format uses no registry)."""
        return {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}.get(self.value)


class TableFormat(StrEnum):
    """How a topic's table is kept (``table_format``)."""

    HIVE = "hive"
    """Parquet under a Hive layout, its partitions added to Glue by the maintainer, compacted by swapping them."""
    ICEBERG = "iceberg"
    """An Apache Iceberg table in the Glue Data Catalog, committed by the archiver plan by plan (``kafkalake.iceberg``);
    no partitions to add, no crawler; compacted and erased by table operations."""


class TableMode(StrEnum):
    """What a topic's table holds (``mode``; docs/current-state.md)."""

    APPEND = "append"
    """Every record, as produced: a history."""
    UPSERT = "upsert"
    """The latest row per key: a plan's changes replace its keys' rows, a delete or a tombstone removes its key's row
    (``spark_jobs.archiver.upsert``). Iceberg tables only."""


class Envelope(StrEnum):
    """How a record wraps its row (``envelope``)."""

    NONE = "none"
    """The value is the row; a tombstone deletes its key."""
    DEBEZIUM = "debezium"
    """A Debezium change event: the row is ``after``; ``op: d`` deletes the key its ``before`` holds, ``op: r``
    (a snapshot read) counts as an insert; the source's position is kept (``_op``, ``_source_ts_ms``,
    ``_source_lsn``). A tombstone deletes its key too."""


class TimeFormat(StrEnum):
    EPOCH = "epoch"
    ISO8601 = "iso8601"
    AVRO_TIMESTAMP = "avro_timestamp"


class TimeCandidate(BaseModel):
    """One candidate business-time field; ``path`` may be nested (``event.meta.ts``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    format: TimeFormat
    unit: Literal["s", "ms", "us", "ns"] | None = None
    default_zone: str = "UTC"

    @model_validator(mode="after")
    def _unit_only_for_epoch(self) -> TimeCandidate:
        if self.format == TimeFormat.EPOCH and self.unit is None:
            raise ValueError("epoch candidates must declare unit: s, ms, us or ns")
        if self.format != TimeFormat.EPOCH and self.unit is not None:
            raise ValueError("unit applies to epoch candidates only; remove it")
        return self


class StoredAs(StrEnum):
    """How the archive keeps a record's Kafka key (``archive.key``) or headers (``archive.headers``)."""

    DROP = "drop"
    """Left out of the table."""
    CLEAR = "clear"
    """As Kafka holds it: the key's bytes in ``_key``, the headers (name, bytes) in ``_headers``."""
    HMAC = "hmac"
    """Its keyed hash (``kafkalake.personal``): the key's digest in ``_key``, each header's value's digest in
    ``_headers`` beside its name. The clear key is then stored nowhere, quarantine objects included."""


OLDER_NAMES = {"include_key": "key", "include_headers": "headers"}
"""The archive policy's older booleans (``true`` is ``clear``, ``false`` is ``drop``), still read."""


class ArchivePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_records_per_run: int = Field(default=1_000_000, ge=1)
    max_records_per_file: int = Field(default=500_000, ge=1)
    compression: Literal["snappy", "zstd"] = "snappy"
    accept_data_loss: bool = False
    key: StoredAs = StoredAs.DROP
    headers: StoredAs = StoredAs.DROP

    @model_validator(mode="before")
    @classmethod
    def _older_names(cls, data: Any) -> Any:
        """``include_key: true`` of an older file is ``key: clear`` (``false``: ``drop``); so for headers."""
        if not isinstance(data, dict):
            return data
        found = dict(data)
        for older, name in OLDER_NAMES.items():
            if older not in found:
                continue
            if name in found:
                raise ValueError(f"{older} is the older name of {name}: keep {name} only")
            value = found.pop(older)
            found[name] = (StoredAs.CLEAR if value else StoredAs.DROP) if isinstance(value, bool) else value
        return found


class TopicSpec(BaseModel):
    """What a topic's YAML file may say; every field has a default or is derived."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kafka_topic: str | None = None
    value_format: ValueFormat = ValueFormat.AVRO
    message: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    """Protobuf: the full name of the records' message type (``package.Message``, nested ones ``package.Outer.Inner``),
    looked up in every version's file, so its index may change between versions; by default each file's first."""
    key_format: ValueFormat | None = None
    """How the records' Kafka keys are written when they are Confluent-framed (avro, protobuf, json_schema; their
    schemas under the registry's ``<topic>-key`` subject): each key is then decoded, and the table's ``_key`` is a
    struct of the newest key version's fields (a Protobuf key: each version's first message). None: the key is
    bytes, kept as ``archive.key`` says."""
    time_fields: tuple[TimeCandidate, ...] = ()
    tombstones: Literal["drop", "keep"] = "drop"
    retention_days: int | None = Field(default=None, ge=1)
    sensitivity: Sensitivity = Sensitivity.INTERNAL
    table_inference: TableInference = TableInference.CRAWLER
    """How the maintainer makes a Hive table (an Iceberg table is made by the archiver's first commit)."""
    table_format: TableFormat = TableFormat.HIVE
    database: str | None = None
    table: str | None = None
    crawler_name: str | None = None
    archive: ArchivePolicy = ArchivePolicy()
    description: str = ""
    pii: dict[str, PiiAction] = {}
    """Personal fields by path (``kafkalake.personal.SchemaPath``: ``contacts[].email``) and their action; adds to or
    overrides the schema's own tags."""
    quarantine: QuarantineMode | None = None
    """What becomes of undecodable records' raw bytes; by default restricted when the topic has personal fields."""
    owner: str = ""
    """The team answering for the topic (shown in the inventory)."""
    erasure: Literal["none", "by_key"] = "none"
    """``by_key``: the Kafka key identifies the subject, and each tombstone asks to erase the key's earlier rows."""
    subject_fields: tuple[str, ...] = ()
    """Value fields (dotted paths) that hold a subject identifier: an erasure request erases the rows they match."""
    erasure_within_days: int = Field(default=1, ge=1)
    """The deadline of an erasure request: rows and their object versions physically gone within this many days."""
    mode: TableMode = TableMode.APPEND
    envelope: Envelope = Envelope.NONE
    key_fields: tuple[str, ...] = Field(default=(), max_length=8)
    """An upsert table's key: fields of the row (``after``'s with ``envelope: debezium``); by default the Kafka key.
    A tombstone names its key by the Kafka key, so with ``key_fields`` it deletes only when ``key_format`` decodes
    the Kafka key into fields of those names."""
    version_field: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """An upsert table's field (of the row) whose greater value wins over Kafka's order, also against the row the
    table already holds: for producers that re-key or replay."""

    @model_validator(mode="after")
    def _message_for_protobuf(self) -> TopicSpec:
        if self.message is not None and self.value_format != ValueFormat.PROTOBUF:
            raise ValueError(
                f"message names a Protobuf message type, and this topic's value_format is {self.value_format}: "
                "remove message, or set value_format: protobuf"
            )
        return self

    @model_validator(mode="after")
    def _key_format_decodes_a_kept_key(self) -> TopicSpec:
        if self.key_format is None:
            return self
        if self.key_format.schema_type is None:
            raise ValueError(
                f"key_format names a registry format (avro, protobuf, json_schema), not {self.key_format}: a key "
                "without a registered schema is kept as bytes; remove key_format"
            )
        if self.archive.key != StoredAs.CLEAR:
            raise ValueError(
                f"key_format decodes each Kafka key into the table's _key struct, and archive.key is "
                f"{self.archive.key}: set archive.key: clear (the key's fields are then stored as they are), or "
                "remove key_format (archive.key: hmac keeps the key's keyed hash, drop keeps nothing)"
            )
        if self.erasure == "by_key":
            raise ValueError(
                "erasure: by_key matches rows by their Kafka key's bytes, and key_format stores the key decoded: "
                "remove key_format, or erase by a subject field of the value (subject_fields)"
            )
        return self

    @model_validator(mode="after")
    def _upsert_keeps_a_key(self) -> TopicSpec:
        upsert_only = sorted({"key_fields", "version_field"} & self.model_fields_set)
        if self.envelope == Envelope.DEBEZIUM:
            upsert_only.append("envelope: debezium")
        if self.mode != TableMode.UPSERT:
            if upsert_only:
                raise ValueError(
                    f"{' and '.join(upsert_only)} apply to upsert tables only: set mode: upsert (with "
                    "table_format: iceberg), or remove them"
                )
            return self
        if self.table_format != TableFormat.ICEBERG:
            raise ValueError(
                "mode: upsert keeps the latest row per key by deleting and adding rows in one commit, which only an "
                "Iceberg table can do: set table_format: iceberg (a Hive table only appends)"
            )
        if self.tombstones == "keep":
            raise ValueError(
                "an upsert table keeps no delete log: a tombstone deletes its key's row; remove tombstones: keep"
            )
        if not self.key_fields and (self.archive.key == StoredAs.DROP or self.key_format is not None):
            raise ValueError(
                "mode: upsert needs a key: name the row's key fields (key_fields: [id]), or keep the Kafka key as "
                "bytes (archive.key: clear or hmac, without key_format)"
            )
        return self

    @model_validator(mode="after")
    def _iceberg_needs_no_crawler(self) -> TopicSpec:
        if self.table_format == TableFormat.ICEBERG:
            told = sorted({"table_inference", "crawler_name"} & self.model_fields_set)
            if told:
                raise ValueError(
                    f"{' and '.join(told)} apply to Hive tables only: an Iceberg table is made by the archiver's "
                    f"first commit, with no crawler; remove {' and '.join(told)}, or use table_format: hive"
                )
        return self
