"""``catalog import`` of Protobuf and JSON Schema topics (``kafkalake_dev.onboarding``): the format is the registry's
schemaType for the schema ids the sampled values carry, a Protobuf topic's message the one their indexes name, and the
proposed columns are what the archiver renders for the topic."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from infra.repo import catalog_dir
from kafkalake.protobuf_schema import index_bytes
from kafkalake.registered_formats import rendered
from kafkalake.registry import RegisteredSchema
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.topic_spec import ValueFormat
from kafkalake.wire import encode, frame
from kafkalake_dev.local.producers import Encoder, ProducerSchemas
from kafkalake_dev.onboarding.importer import Flagged, Proposal, Sample, propose, sampled_message
from kafkalake_dev.onboarding.infer import sampled_format
from tests.unit.test_onboarding import AVRO, NAME, NOW_S

CATALOG = load_topic_catalog(catalog_dir())


def _registered_as(topic_name: str, message: str | None = None) -> tuple[tuple[RegisteredSchema, ...], list[Encoder]]:
    """The demo producers' versions of ``topic_name`` (ids 41, 42, ...) as the registry answers them, rendered with
    ``message`` (None: each file's first, as for a topic nobody catalogued), and an encoder per version."""
    topic = load_topic_catalog(catalog_dir()).get(topic_name, "staging")
    producers = ProducerSchemas(topic)
    versions, encoders = [], []
    for number, text in enumerate(producers.versions, 1):
        references = json.dumps(producers.used(text), sort_keys=True)
        columns, decoding = rendered(producers.schema_type, text, references, message)
        versions.append(RegisteredSchema("s", number, 40 + number, columns, producers.schema_type, (), decoding))
        encoders.append(producers.encoder(40 + number, text))
    return tuple(versions), encoders


def test_protobuf_values_are_proposed_as_protobuf_with_the_message_their_index_names(tmp_path: Path) -> None:
    registered, (_, encode_v2) = _registered_as("order-placed")
    placed = datetime.fromtimestamp(NOW_S, UTC)
    values = [encode_v2({"id": f"o{i}", "placed_at": placed}, i) for i in range(4)]  # OrderPlaced, index [1]
    found = propose(
        NAME, env="staging", root=tmp_path, catalog=CATALOG, registered=registered, sample=Sample(values, 4)
    )
    assert isinstance(found, Proposal) and found.value_format == ValueFormat.PROTOBUF
    assert "registry schemaType PROTOBUF" in found.format_evidence
    folder = tmp_path / "acme" / "sales" / "staging"
    text = found.files[folder / "orders.yaml"]
    assert "value_format: protobuf\nmessage: acme.shop.OrderPlaced\n" in text
    assert "time_fields:\n- {path: placed_at, format: avro_timestamp}" in text
    catalogued = load_topic_catalog(catalog_dir()).get("order-placed", "staging")
    proposed = [json.loads(found.files[folder / f"orders.v{n}.avsc"]) for n in (1, 2)]
    assert proposed == [json.loads(s) for s in catalogued.schemas]  # what the archiver renders for the topic


def test_protobuf_values_packing_an_any_of_an_undeclared_type_are_proposed(tmp_path: Path) -> None:
    """The demo's order-placed: its Any (extension) packs a type no registered file declares."""
    registered, (_, encode_v2) = _registered_as("order-placed")
    placed = datetime.fromtimestamp(NOW_S, UTC)
    extension = {"type_url": "type.googleapis.com/acme.shop.Unknown", "value": b"\x08\x01"}
    nested = {"customer": {"customer_id": "c", "email": "e"}, "extension": extension}
    values = [encode_v2({"id": f"o{i}", "placed_at": placed, **nested}, i) for i in range(4)]
    found = propose(
        NAME, env="staging", root=tmp_path, catalog=CATALOG, registered=registered, sample=Sample(values, 4)
    )
    assert isinstance(found, Proposal) and found.value_format == ValueFormat.PROTOBUF
    assert "placed_at (avro_timestamp): score 3" in found.files[tmp_path / "acme" / "sales" / "staging" / "orders.yaml"]


def test_json_schema_values_are_proposed_as_json_schema(tmp_path: Path) -> None:
    registered, [encode] = _registered_as("ticket-opened")
    opened = datetime.fromtimestamp(NOW_S, UTC).isoformat()
    values = [encode({"id": f"t{i}", "customer_id": "c", "opened_at": opened, "priority": 1}, i) for i in range(3)]
    found = propose(
        NAME, env="staging", root=tmp_path, catalog=CATALOG, registered=registered, sample=Sample(values, 3)
    )
    assert isinstance(found, Proposal) and found.value_format == ValueFormat.JSON_SCHEMA
    text = found.files[tmp_path / "acme" / "sales" / "staging" / "orders.yaml"]
    assert "value_format: json_schema\n" in text and "message:" not in text
    assert "opened_at (iso8601): score 2" in text  # the sampled JSON was read


def test_the_format_is_the_schema_type_of_the_ids_the_values_carry_not_the_subject(tmp_path: Path) -> None:
    """A subject whose newest version is Protobuf, while the sampled values carry the id of its Avro version 1."""
    avro = RegisteredSchema("s", 1, 5, AVRO)
    protobuf, _ = _registered_as("order-placed")
    registered = (avro, dataclasses.replace(protobuf[0], version=2))
    framed = [encode(5, AVRO, {"id": f"o{i}", "placed_at": NOW_S * 1000}) for i in range(3)]
    found = sampled_format(framed, registered)
    assert (found.value_format, found.schema_types) == (ValueFormat.AVRO, ("AVRO",))
    both = sampled_format([*framed, _registered_as("order-placed")[1][0]({"id": "x"}, 0)], registered)
    assert both.value_format is None and both.schema_types == ("AVRO", "PROTOBUF")


def test_framed_values_whose_ids_the_subject_lacks_are_flagged_not_guessed(tmp_path: Path) -> None:
    """The format is the registry's schemaType for the ids the values carry: ids the value subject does not hold give
    none, whatever the subject's own versions are."""
    catalog = load_topic_catalog(catalog_dir())
    framed = [encode(9, AVRO, {"id": f"o{i}", "placed_at": NOW_S * 1000}) for i in range(3)]
    registered = (RegisteredSchema("s", 1, 5, AVRO),)
    sample = Sample([*framed, encode(5, AVRO, {"id": "x", "placed_at": NOW_S * 1000})], 4)
    found = propose(NAME, env="staging", root=tmp_path, catalog=catalog, registered=registered, sample=sample)
    assert found == Flagged(
        NAME.kafka_topic,
        "Confluent-framed values carry schema ids 9 that no version of value subject 'staging.acme.sales.orders-value' "
        "has (v1 id 5), so the registry gives no format for them and the archiver would quarantine them as "
        "unknown_schema_id (4 sampled values: 4 Confluent-framed (schema ids 5, 9, registry schemaType AVRO)): "
        "register their schemas under 'staging.acme.sales.orders-value' (TopicNameStrategy), then import again",
    )
    protobuf, _ = _registered_as(
        "order-placed"
    )  # a Protobuf subject: Avro records of an id it lacks are not taken for Protobuf
    found = propose(NAME, env="staging", root=tmp_path, catalog=catalog, registered=protobuf, sample=Sample(framed, 3))
    assert isinstance(found, Flagged) and "schema ids 9 that no version of value subject" in found.reason
    assert "(v1 id 41, v2 id 42)" in found.reason


def test_the_message_is_the_one_the_sampled_indexes_name_however_the_versions_were_rendered(tmp_path: Path) -> None:
    """``message:`` is proposed when the sampled records' message is not each file's first, judged on the files,
    not on the message the given versions happen to be rendered with (a catalogued topic's, say)."""
    catalog = load_topic_catalog(catalog_dir())
    first, (encode_v1, encode_v2) = _registered_as("order-placed")
    catalogued, _ = _registered_as("order-placed", "acme.shop.OrderPlaced")
    v1_values = [encode_v1({"id": f"a{i}"}, i) for i in range(2)]  # index [0]: v1's first message
    v2_values = [encode_v2({"id": f"b{i}"}, i) for i in range(3)]  # index [1]: v2 declares Money first
    for registered in (first, catalogued):
        assert sampled_message(v2_values, registered) == "acme.shop.OrderPlaced"
        assert sampled_message(v1_values, registered) == "acme.shop.OrderPlaced"  # v2's file has another first
        assert sampled_message(v1_values, registered[:1]) is None  # v1's first everywhere: no message needed
    found = propose(
        NAME, env="staging", root=tmp_path, catalog=catalog, registered=catalogued, sample=Sample(v2_values, 3)
    )
    assert isinstance(found, Proposal) and found.value_format == ValueFormat.PROTOBUF
    folder = tmp_path / "acme" / "sales" / "staging"
    assert "value_format: protobuf\nmessage: acme.shop.OrderPlaced\n" in found.files[folder / "orders.yaml"]
    assert [json.loads(found.files[folder / f"orders.v{n}.avsc"]) for n in (1, 2)] == [
        json.loads(r.schema) for r in catalogued
    ]


def test_a_message_some_version_lacks_is_flagged(tmp_path: Path) -> None:
    """Records of v2's first message (Money, index [0]), which v1's file does not declare: no one message for the
    topic's versions, so the import flags it rather than failing."""
    catalog = load_topic_catalog(catalog_dir())
    registered, _ = _registered_as("order-placed")
    money = [frame(42, b"", index_bytes((0,))) for _ in range(3)]
    found = propose(NAME, env="staging", root=tmp_path, catalog=catalog, registered=registered, sample=Sample(money, 3))
    assert found == Flagged(
        NAME.kafka_topic,
        "the sampled records are acme.shop.Money messages, which the file of v1 does not declare: one topic's "
        "versions must all declare its message; write the topic's catalog files by hand",
    )


def test_framed_keys_of_the_key_subject_are_proposed_as_key_format_kept_decoded(tmp_path: Path) -> None:
    """Most sampled keys carry the ids of the <topic>-key subject's versions: the topic file says key_format (the
    subject's schemaType) and keeps the key decoded; a file the catalog then loads. Keys in no frame, or framed with
    ids of no key version, stay bytes."""
    registered, [encode] = _registered_as("ticket-opened")
    opened = datetime.fromtimestamp(NOW_S, UTC).isoformat()
    values = [encode({"id": f"t{i}", "customer_id": "c", "opened_at": opened, "priority": 1}, i) for i in range(4)]
    key_versions = (RegisteredSchema("k", 1, 77, '"string"'),)

    def proposed(key_ids: Counter[int]) -> Proposal | Flagged:
        sample = Sample(values, 4, keys=4, key_ids=key_ids)
        return propose(
            NAME,
            env="staging",
            root=tmp_path,
            catalog=CATALOG,
            registered=registered,
            sample=sample,
            key_registered=key_versions,
        )

    found = proposed(Counter({77: 3}))
    assert isinstance(found, Proposal)
    folder = tmp_path / "acme" / "sales" / "staging"
    text = found.files[folder / "orders.yaml"]
    assert "key_format: avro\n" in text and "archive: {key: clear}" in text
    assert "Keys: 3 of 4 framed with the key subject's schema ids: key_format avro" in text
    for path, body in found.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    assert load_topic_catalog(tmp_path).get("orders", "staging").spec.key_format == ValueFormat.AVRO
    for key_ids in (Counter({77: 2}), Counter({9: 4})):  # half the keys framed; framed with ids of no key version
        kept = proposed(key_ids)
        assert isinstance(kept, Proposal) and "key_format" not in kept.files[folder / "orders.yaml"]
