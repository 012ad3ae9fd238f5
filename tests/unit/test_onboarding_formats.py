"""``catalog import`` of Protobuf and JSON Schema topics (``kafkalake_dev.onboarding``): the format is the registry's
schemaType for the schema ids the sampled values carry, a Protobuf topic's message the one their indexes name, and the
proposed columns are what the archiver renders for the topic."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

from infra.repo import catalog_dir
from kafkalake.registered_formats import rendered
from kafkalake.registry import RegisteredSchema
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.topic_spec import ValueFormat
from kafkalake.wire import encode
from kafkalake_dev.local.producers import Encoder, ProducerSchemas
from kafkalake_dev.onboarding.importer import Proposal, Sample, propose
from kafkalake_dev.onboarding.infer import sampled_format
from tests.unit.test_onboarding import AVRO, NAME, NOW_S

CATALOG = load_topic_catalog(catalog_dir())


def _registered_as(topic_name: str) -> tuple[tuple[RegisteredSchema, ...], list[Encoder]]:
    """The demo producers' versions of ``topic_name`` as the registry answers them (rendered with each file's first
    message, as for a topic nobody catalogued), and an encoder per version."""
    topic = load_topic_catalog(catalog_dir()).get(topic_name, "staging")
    producers = ProducerSchemas(topic)
    versions, encoders = [], []
    for number, text in enumerate(producers.versions, 1):
        references = json.dumps(producers.used(text), sort_keys=True)
        columns, decoding = rendered(producers.schema_type, text, references, None)
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
