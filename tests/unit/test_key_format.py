"""``key_format``: what a topic file may say about framed keys, the key versions read from the registry, and the
pure transform that decodes keys (``transform.with_decoded_key``) on a bare Spark session."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from pydantic import ValidationError
from pyspark.sql import SparkSession
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from infra.repo import catalog_dir
from kafkalake.registry import RegisteredSchema
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake.topic_spec import StoredAs, TopicSpec, ValueFormat
from kafkalake.wire import encode
from spark_jobs.archiver import transform
from spark_jobs.archiver.records import FormatMismatch, SubjectMissing, key_versions

CATALOG = load_topic_catalog(catalog_dir())
KEY_V1 = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "string"}]}
KEY_V2 = {
    **KEY_V1,
    "fields": [*KEY_V1["fields"], {"name": "email", "type": ["null", "string"], "default": None, "pii": "hmac"}],
}


@pytest.mark.parametrize(
    ("settings", "fix"),
    [
        ({"key_format": "json"}, "a key without a registered schema is kept as bytes; remove key_format"),
        ({"key_format": "avro"}, "set archive.key: clear"),
        ({"key_format": "avro", "archive": {"key": "hmac"}}, "set archive.key: clear"),
        (
            {"key_format": "avro", "archive": {"key": "clear"}, "erasure": "by_key"},
            "remove key_format, or erase by a subject field",
        ),
    ],
)
def test_key_format_is_refused_where_the_key_could_not_be_kept_decoded(settings: dict[str, Any], fix: str) -> None:
    with pytest.raises(ValidationError, match=fix):
        TopicSpec(**settings)


def test_key_format_with_a_clear_key_is_accepted() -> None:
    spec = TopicSpec(key_format="protobuf", archive={"key": "clear"})
    assert spec.key_format == ValueFormat.PROTOBUF and spec.archive.key == StoredAs.CLEAR
    assert TopicSpec().key_format is None


class Registry:
    """A registry holding ``found`` under every key subject."""

    url = "http://registry"

    def __init__(self, *found: tuple[dict[str, Any], str]) -> None:
        self.found = found
        self.asked: list[str] = []

    def versions(self, subject: str, message: str | None = None) -> list[RegisteredSchema]:
        self.asked.append(subject)
        return [RegisteredSchema(subject, n, 10 + n, json.dumps(s), t) for n, (s, t) in enumerate(self.found, 1)]


def keyed_topic() -> Topic:
    topic = CATALOG.get("card-authorized", "staging")
    spec = topic.spec.model_copy(update={"key_format": ValueFormat.AVRO, "archive": {"key": "clear"}})
    return dataclasses.replace(topic, spec=spec)


def test_key_versions_come_from_the_key_subject_with_the_personal_fields_the_registry_tags() -> None:
    topic = keyed_topic()
    registry = Registry((KEY_V1, "AVRO"), (KEY_V2, "AVRO"))
    found = key_versions(topic, registry)  # type: ignore[arg-type]
    assert registry.asked == [f"{topic.kafka_topic}-key"]
    assert [(v.version, v.schema_id, dict(v.personal)) for v in found] == [(1, 11, {}), (2, 12, {"email": "hmac"})]
    assert key_versions(CATALOG.get("card-authorized", "staging"), registry) == []  # type: ignore[arg-type]


def test_a_key_subject_missing_or_of_another_format_fails_the_topic_with_the_fix() -> None:
    topic = keyed_topic()
    with pytest.raises(SubjectMissing, match=r"no schema under subject .*-key.*remove key_format from"):
        key_versions(topic, Registry())  # type: ignore[arg-type]
    with pytest.raises(FormatMismatch, match=r"PROTOBUF schemas .* says key_format: avro; set key_format: protobuf"):
        key_versions(topic, Registry((KEY_V1, "PROTOBUF")))  # type: ignore[arg-type]


ROWS = StructType(
    [
        StructField(transform.MEMBER_COLUMN, IntegerType()),
        StructField("_key", BinaryType()),
        StructField("_raw_value", BinaryType()),
        StructField("_schema_id", LongType()),
        StructField("_error", StringType()),
        StructField("_schema_version", IntegerType()),
    ]
)


def key_decoding(*schemas: dict[str, Any]) -> transform.Decoding:
    versions = [transform.VersionSchema(n, 10 + n, json.dumps(s)) for n, s in enumerate(schemas, 1)]
    return transform.Decoding(ValueFormat.AVRO, tuple((v, transform.key_column(v.version)) for v in versions))


def test_keys_are_decoded_by_their_version_into_the_newest_struct_and_bad_ones_give_their_record_a_key_reason(
    bare_spark: SparkSession,
) -> None:
    v1, v2 = json.dumps(KEY_V1), json.dumps(KEY_V2)
    newest = StructType([StructField("id", StringType()), StructField("email", StringType())])
    value = b"value"
    rows = [
        (0, encode(11, v1, {"id": "a"}), value, 1, None, 1),
        (0, encode(12, v2, {"id": "b", "email": "e"}), value, 1, None, 1),
        (0, None, value, 1, None, 1),  # no key: lands with a null one
        (0, b"\x07not framed", value, 1, None, 1),  # a key that is not framed
        (0, encode(99, v1, {"id": "c"}), value, 1, None, 1),  # a key of no key version
        (0, encode(11, v1, {"id": "d"})[:5], None, None, "tombstone", None),  # a tombstone's key cut after its header
        (0, b"\x07not framed", b"\x07", None, "bad_magic_byte", None),  # the value's own reason comes first
    ]
    frame = bare_spark.createDataFrame(rows, ROWS)
    out = transform.with_decoded_key(frame, key_decoding(KEY_V1, KEY_V2), newest).collect()
    assert [*frame.columns, transform.DECODED_KEY_COLUMN] == list(out[0].asDict())
    assert [r[transform.DECODED_KEY_COLUMN] for r in out[:3]] == [("a", None), ("b", "e"), None]
    assert [r["_error"] for r in out] == [
        None,
        None,
        None,
        "key_bad_magic_byte",
        "key_unknown_schema_id",
        "key_corrupt_avro",
        "bad_magic_byte",
    ]
    assert [r["_raw_value"] for r in out] == [r[2] for r in rows]  # the value's columns are as they were
    assert [r["_schema_id"] for r in out] == [r[3] for r in rows]


def test_a_key_version_whose_field_changed_type_is_refused(bare_spark: SparkSession) -> None:
    changed = {**KEY_V1, "fields": [{"name": "id", "type": "long"}]}
    newest = StructType([StructField("id", LongType())])
    frame = bare_spark.createDataFrame([], ROWS)
    with pytest.raises(transform.KeyVersionsDiffer, match="field id of key version 1 is string, the newest"):
        transform.with_decoded_key(frame, key_decoding(KEY_V1, changed), newest)
