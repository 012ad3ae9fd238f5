"""Erasure declarations in the catalog: defaults, and the declarations that could never erase anything refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkalake.topic_catalog import TopicCatalogInvalid, load_topic_catalog

SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "customer", "type": {"type": "record", "name": "C", "fields": [{"name": "id", "type": "string"}]}},
    ],
}


def write_topic(root: Path, body: str, defaults: str = "") -> Path:
    folder = root / "acme" / "shop" / "staging"
    folder.mkdir(parents=True)
    (folder / "orders.yaml").write_text(body)
    (folder / "orders.v1.avsc").write_text(json.dumps(SCHEMA))
    if defaults:
        (root / "defaults.yaml").write_text(defaults)
    return folder / "orders.yaml"


def test_nothing_is_erasable_unless_declared(tmp_path: Path) -> None:
    write_topic(tmp_path, "value_format: avro\n")
    topic = load_topic_catalog(tmp_path).topics[0]
    assert (topic.spec.erasure, topic.spec.subject_fields, topic.spec.erasure_within_days) == ("none", (), 1)
    assert not topic.erasable


def test_declarations_and_the_environment_wide_default(tmp_path: Path) -> None:
    body = "erasure: by_key\narchive: {key: hmac}\nsubject_fields: [customer.id]\n"
    write_topic(tmp_path, body, defaults="erasure_within_days: 3\n")
    topic = load_topic_catalog(tmp_path).topics[0]
    assert topic.erasable
    assert (topic.spec.erasure, topic.spec.subject_fields, topic.spec.erasure_within_days) == (
        "by_key",
        ("customer.id",),
        3,
    )


def test_by_key_without_the_key_stored_and_an_unknown_subject_field_are_refused(tmp_path: Path) -> None:
    path = write_topic(tmp_path, "erasure: by_key\nsubject_fields: [customer.email, id]\n")
    with pytest.raises(TopicCatalogInvalid) as exc:
        load_topic_catalog(tmp_path)
    assert [str(p) for p in exc.value.problems] == [
        f"{path}: erasure: by_key erasure matches rows by their Kafka key, but the table does not store it "
        "(archive.key: drop) (fix: set archive.key: hmac (its keyed hash) or clear (or declare subject_fields "
        "instead))",
        f"{path}: subject_fields.customer.email: no schema version has this field "
        "(fix: use a dotted path of a field in one of the topic's .avsc files)",
    ]


def test_a_deadline_below_one_day_is_refused(tmp_path: Path) -> None:
    write_topic(tmp_path, "subject_fields: [id]\nerasure_within_days: 0\n")
    with pytest.raises(TopicCatalogInvalid, match="erasure_within_days"):
        load_topic_catalog(tmp_path)
