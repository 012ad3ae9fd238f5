"""Personal fields in every shape of schema (issue #35, finding 2): the walk finds fields inside records, unions,
arrays, maps, arrays of maps and named types used again; catalog paths name elements (``contacts[].email``,
``attributes{}.phone``, ``tags[]``); ``catalog validate`` refuses hashing a whole record, array or map and dropping
an element; LF-tags make the top-level column personal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kafkalake.lftags import personal_columns
from kafkalake.personal import PiiAction, name_suggestions, schema_paths, schema_personal_fields
from kafkalake.topic_catalog import TopicCatalogInvalid, load_topic_catalog
from kafkalake_dev.cli.app import app

CONTACT: dict[str, Any] = {
    "type": "record",
    "name": "Contact",
    "fields": [
        {"name": "kind", "type": "string"},
        {"name": "email", "type": "string", "pii": "hmac"},
        {"name": "phone", "type": ["null", "string"], "confluent:tags": ["PII"]},
    ],
}
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Customer",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "contacts", "type": {"type": "array", "items": CONTACT}},
        {"name": "previous", "type": ["null", {"type": "array", "items": "Contact"}], "default": None},
        {"name": "by_channel", "type": {"type": "map", "values": "Contact"}},
        {"name": "history", "type": {"type": "array", "items": {"type": "map", "values": "Contact"}}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attributes", "type": ["null", {"type": "map", "values": "string"}]},
        {"name": "born", "type": {"type": "int", "logicalType": "date"}},
    ],
}


def test_every_place_of_every_shape_is_walked_with_its_kind() -> None:
    kinds = {p.path: p.kind for p in schema_paths(SCHEMA)}
    assert kinds == {
        "id": "long",
        "contacts": "array",
        "contacts[]": "record",
        "contacts[].kind": "string",
        "contacts[].email": "string",
        "contacts[].phone": "string",
        "previous": "array",
        "previous[]": "record",
        "previous[].kind": "string",
        "previous[].email": "string",
        "previous[].phone": "string",
        "by_channel": "map",
        "by_channel{}": "record",
        "by_channel{}.kind": "string",
        "by_channel{}.email": "string",
        "by_channel{}.phone": "string",
        "history": "array",
        "history[]": "map",
        "history[]{}": "record",
        "history[]{}.kind": "string",
        "history[]{}.email": "string",
        "history[]{}.phone": "string",
        "tags": "array",
        "tags[]": "string",
        "attributes": "map",
        "attributes{}": "string",
        "born": "date",
    }


def test_fields_tagged_inside_arrays_maps_and_unions_of_them_are_personal() -> None:
    assert schema_personal_fields(SCHEMA) == {
        f"{place}.{name}": action
        for place in ("contacts[]", "previous[]", "by_channel{}", "history[]{}")
        for name, action in (("email", PiiAction.HMAC), ("phone", PiiAction.HMAC))
    }


def test_a_recursive_type_is_followed_once() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "name", "type": "string", "pii": True},
            {"name": "children", "type": {"type": "array", "items": "Node"}},
        ],
    }
    assert [p.path for p in schema_paths(node)] == ["name", "children", "children[]"]


def write_topic(root: Path, body: str, schema: dict[str, Any] = SCHEMA) -> Path:
    folder = root / "acme" / "crm" / "staging"
    folder.mkdir(parents=True)
    (folder / "customer.yaml").write_text(body)
    (folder / "customer.v1.avsc").write_text(json.dumps(schema))
    return folder / "customer.yaml"


def problems(root: Path) -> list[str]:
    with pytest.raises(TopicCatalogInvalid) as exc:
        load_topic_catalog(root)
    return [f"{p.field}: {p.message} (fix: {p.fix})" for p in exc.value.problems]


def test_catalog_paths_name_elements_and_map_values(tmp_path: Path) -> None:
    write_topic(
        tmp_path,
        "pii:\n  contacts[].kind: drop\n  tags[]: hmac\n  attributes{}: mask_last4\n  history[]{}.email: drop\n",
    )
    fields = load_topic_catalog(tmp_path).topics[0].personal_fields
    assert fields["contacts[].kind"] == PiiAction.DROP
    assert fields["tags[]"] == PiiAction.HMAC
    assert fields["attributes{}"] == PiiAction.MASK_LAST4
    assert fields["history[]{}.email"] == PiiAction.DROP


@pytest.mark.parametrize(
    ("pii", "expected"),
    [
        (
            "contacts: hmac",
            "pii.contacts: contacts is a array: hmac of it would protect the text of the whole value, which no "
            "erasure request's digest matches and no table can join on (fix: name its leaves instead (contacts[]: "
            "hmac), or drop contacts)",
        ),
        (
            "contacts[]: hmac",
            "pii.contacts[]: contacts[] is a record: hmac of it would protect the text of the whole value, which no "
            "erasure request's digest matches and no table can join on (fix: name its leaves instead "
            "(contacts[].<field>: hmac), or drop contacts[])",
        ),
        (
            "attributes: mask_last4",
            "pii.attributes: attributes is a map: mask_last4 of it would protect the text of the whole value, which "
            "no erasure request's digest matches and no table can join on (fix: name its leaves instead "
            "(attributes{}: mask_last4), or drop attributes)",
        ),
        (
            "tags[]: drop",
            "pii.tags[]: drop leaves a field out, and tags[] names the elements of tags, not a field (fix: drop tags "
            "itself, or hash its elements (tags[]: hmac))",
        ),
    ],
)
def test_protecting_a_whole_record_array_or_map_is_refused_with_the_reason(
    tmp_path: Path, pii: str, expected: str
) -> None:
    write_topic(tmp_path, f"pii:\n  {pii}\n")  # block style: YAML's flow style takes [] and {} as its own
    assert problems(tmp_path) == [expected]


def test_a_schema_tag_on_a_record_is_refused_too(tmp_path: Path) -> None:
    tagged = {**SCHEMA, "fields": [{"name": "contact", "type": CONTACT, "pii": True}]}
    write_topic(tmp_path, "{}\n", tagged)
    assert problems(tmp_path)[0].startswith("schemas (v1: contact): contact is a record: hmac of it would protect")


def test_an_unknown_element_path_is_refused_with_the_syntax(tmp_path: Path) -> None:
    write_topic(tmp_path, "pii: {contacts.email: hmac}\n")
    assert problems(tmp_path) == [
        "pii.contacts.email: no schema version has this field (fix: use the path of a field in one of the topic's "
        ".avsc files: dotted names, [] after an array for its elements, {} after a map for its values "
        "(customer.email, contacts[].email, tags[], attributes{}.phone))"
    ]


def test_a_subject_field_inside_an_array_is_refused(tmp_path: Path) -> None:
    write_topic(tmp_path, "subject_fields:\n  - contacts[].email\n")
    assert problems(tmp_path) == [
        "subject_fields.contacts[].email: a subject field holds one identifier per row; this one lies inside an "
        "array or a map (fix: name a field outside arrays and maps (or declare erasure: by_key))"
    ]


def test_catalog_validate_lists_nested_personal_fields(tmp_path: Path) -> None:
    write_topic(tmp_path, "pii:\n  tags[]: hmac\n")
    result = CliRunner().invoke(app, ["catalog", "validate", "--catalog", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "      personal contacts[].email: hmac (schema v1)" in result.output.splitlines()
    assert "      personal tags[]: hmac (catalog)" in result.output.splitlines()


def test_the_top_level_column_holding_a_nested_personal_field_is_personal() -> None:
    fields = {
        "contacts[].email": PiiAction.HMAC,
        "by_channel{}.phone": PiiAction.MASK_LAST4,
        "history[]{}.email": PiiAction.DROP,
        "Tags[]": PiiAction.HMAC,
        "previous": PiiAction.DROP,
        "previous[].email": PiiAction.HMAC,
    }
    assert personal_columns(fields) == ("by_channel", "contacts", "tags")


def test_suggestions_reach_into_collections_and_skip_elements() -> None:
    paths = [p.path for p in schema_paths(SCHEMA)]
    assert not [path for path, _ in name_suggestions(paths, {"contacts"}) if path.startswith("contacts")]
    assert ("by_channel{}.phone", "phone") in name_suggestions(paths, set())
    assert not [path for path, _ in name_suggestions(paths, set()) if path.endswith(("[]", "{}"))]
