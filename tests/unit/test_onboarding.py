"""Onboarding a fleet without the cluster: the naming convention, schema inference, business-time ranking, the
proposed catalog files (and never overwriting one), the value format from the sampled bytes and the registry, and the
drift comparison. Protobuf and JSON Schema topics: ``test_onboarding_formats``."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from infra.repo import catalog_dir
from kafkalake.convention import DEFAULT_TOPIC_NAMING, OffConvention, TopicName, parse_topic_name
from kafkalake.drift import ClusterView, compare, metric_data
from kafkalake.environments import EnvironmentConfig
from kafkalake.registry import RegisteredSchema
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.topic_spec import TimeCandidate, TimeFormat, ValueFormat
from kafkalake.wire import encode
from kafkalake_dev.onboarding.importer import (
    Flagged,
    Proposal,
    Sample,
    WriteOutcome,
    off_convention_lines,
    propose,
    write_proposals,
)
from kafkalake_dev.onboarding.infer import NotInferable, infer_avro, rank_time_fields, sampled_format

NOW_S = 1_763_600_000  # 2025-11-20
NAME = TopicName("staging.acme.sales.orders", "acme", "sales", "orders")


def test_convention_parses_and_explains() -> None:
    assert parse_topic_name("staging.acme.sales.orders", "staging") == NAME
    assert parse_topic_name("orders_v2", "staging") == OffConvention(
        "orders_v2", f"does not match the naming convention {DEFAULT_TOPIC_NAMING}"
    )
    assert parse_topic_name("production.acme.sales.orders", "staging").reason == (  # type: ignore[union-attr]
        "belongs to environment 'production', not 'staging'"
    )
    assert "its company 'Acme'" in parse_topic_name("staging.Acme.sales.orders", "staging").reason  # type: ignore[union-attr]
    custom = r"^(?P<company>[a-z]+)-(?P<domain>[a-z]+)-(?P<topic>[a-z-]+)$"
    assert parse_topic_name("acme-sales-order-placed", "staging", custom) == TopicName(
        "acme-sales-order-placed", "acme", "sales", "order-placed"
    )


def test_environment_validates_its_convention() -> None:
    base = {"name": "x", "bucket": "b", "queue_name": "q", "dead_letter_queue_name": "d", "event_bus_name": "e"}
    assert EnvironmentConfig(**base).topic_naming.startswith("^(?P<env>")
    with pytest.raises(ValidationError, match="lacks the named group"):
        EnvironmentConfig(**base, topic_naming=r"^(?P<company>\w+)\.(?P<topic>\w+)$")
    with pytest.raises(ValidationError, match="not a regular expression"):
        EnvironmentConfig(**base, topic_naming="(")


def test_json_schema_inference() -> None:
    records = [
        {"id": "a", "amount": 1, "ts": NOW_S, "meta": {"source": "web"}, "tags": ["x"]},
        {"id": "b", "amount": 2.5, "ts": NOW_S + 60, "meta": {"source": "app"}, "tags": [], "note": None},
    ]
    schema = infer_avro(records, "order-placed", "acme.sales")
    assert schema["name"] == "OrderPlaced" and schema["namespace"] == "acme.sales"
    assert {f["name"]: f["type"] for f in schema["fields"]} == {
        "id": "string",
        "amount": "double",
        "ts": "long",
        "meta": {"type": "record", "name": "Meta", "fields": [{"name": "source", "type": "string"}]},
        "tags": {"type": "array", "items": "string"},
        "note": ["null", "string"],
    }
    with pytest.raises(NotInferable, match="no records"):
        infer_avro([], "t", "n")
    with pytest.raises(NotInferable, match="not all JSON objects"):
        infer_avro([1, 2], "t", "n")
    with pytest.raises(NotInferable, match=r"field x has values of several types \(long, string\)"):
        infer_avro([{"x": 1}, {"x": "a"}], "t", "n")


def test_time_candidates_are_ranked_with_evidence() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "updated_at", "type": "string"},
            {"name": "created_ms", "type": "long"},
            {"name": "amount", "type": "long"},
            {
                "name": "event",
                "type": {
                    "type": "record",
                    "name": "E",
                    "fields": [
                        {"name": "occurred_at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
                    ],
                },
            },
            {"name": "ts", "type": "long"},
            {"name": "date_label", "type": "string"},
        ],
    }
    sample = [
        {
            "updated_at": "2025-11-20T10:00:00Z",
            "created_ms": NOW_S * 1000,
            "amount": NOW_S,
            "ts": NOW_S * 1_000_000,
            "date_label": "tuesday",
        },
    ]
    ranked = rank_time_fields(schema, sample)
    assert [(r.candidate.path, r.score) for r in ranked] == [
        ("event.occurred_at", 3),
        ("created_ms", 2),
        ("ts", 2),
        ("updated_at", 2),  # an update time after an event time
    ]
    assert ranked[1].candidate == TimeCandidate(path="created_ms", format=TimeFormat.EPOCH, unit="ms")
    assert ranked[2].candidate.unit == "us"
    assert ranked[1].evidence == (
        f"1 sampled values {NOW_S * 1000}..{NOW_S * 1000} are times only in ms: "
        f"{datetime.fromtimestamp(NOW_S, UTC).isoformat()} .. {datetime.fromtimestamp(NOW_S, UTC).isoformat()}"
    )
    issued = {"type": "record", "name": "I", "fields": [{"name": "issued_at_ms", "type": "long"}]}
    assert rank_time_fields(issued, [{"issued_at_ms": NOW_S * 1000}])[0].candidate.unit == "ms"
    unsampled = rank_time_fields(schema, [])
    assert [(r.candidate.path, r.score, r.candidate.unit) for r in unsampled] == [
        ("event.occurred_at", 3, None),
        ("created_ms", 1, "ms"),
        ("date_label", 1, None),
        ("updated_at", 1, None),
    ]


AVRO = json.dumps(
    {
        "type": "record",
        "name": "Orders",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }
)


def test_proposal_for_an_avro_topic_with_every_version(tmp_path: Path) -> None:
    catalog = load_topic_catalog(catalog_dir())
    v2 = json.dumps(
        {
            **json.loads(AVRO),
            "fields": [*json.loads(AVRO)["fields"], {"name": "n", "type": ["null", "long"], "default": None}],
        }
    )
    registered = (RegisteredSchema("s", 1, 5, AVRO), RegisteredSchema("s", 2, 6, v2))
    found = propose(
        NAME,
        env="staging",
        root=tmp_path,
        catalog=catalog,
        registered=registered,
        sample=Sample(records=3, keys=3, tombstones=1),
    )
    assert isinstance(found, Proposal) and found.value_format == ValueFormat.AVRO
    folder = tmp_path / "acme" / "sales" / "staging"
    assert sorted(found.files) == [folder / "orders.v1.avsc", folder / "orders.v2.avsc", folder / "orders.yaml"]
    text = found.files[folder / "orders.yaml"]
    assert "# Sampled 3 records: 3 with a key, 1 tombstones." in text
    assert "placed_at (avro_timestamp): score 3, Avro logical type timestamp-millis" in text
    assert (
        "time_fields:\n- {path: placed_at, format: avro_timestamp}\ntombstones: keep\narchive: {key: clear}\n" in text
    )
    assert "kafka_topic" not in text.split("\n# ")[-1]  # the default name needs no override


def test_proposals_make_a_valid_catalog_and_never_overwrite(tmp_path: Path) -> None:
    root = tmp_path / "catalog"
    shutil.copytree(catalog_dir(), root)
    catalog = load_topic_catalog(root)
    json_sample = Sample([json.dumps({"id": "a", "ts": NOW_S}).encode()], records=1, keys=0)
    odd = TopicName("orders-feed", "acme", "sales", "orders-feed")
    found = propose(odd, env="staging", root=root, catalog=catalog, registered=(), sample=json_sample)
    assert isinstance(found, Proposal) and found.value_format == ValueFormat.JSON
    assert [(p.name, a) for p, a, _ in write_proposals([found])] == [
        ("orders-feed.yaml", WriteOutcome.WRITTEN),
        ("orders-feed.v1.avsc", WriteOutcome.WRITTEN),
    ]
    topic = load_topic_catalog(root).get("orders-feed", "staging")
    assert topic.kafka_topic == "orders-feed"
    assert topic.spec.time_fields == (TimeCandidate(path="ts", format=TimeFormat.EPOCH, unit="s"),)
    assert [a for _, a, _ in write_proposals([found])] == [WriteOutcome.UNCHANGED, WriteOutcome.UNCHANGED]
    yaml_path = next(iter(found.files))
    yaml_path.write_text(yaml_path.read_text() + "retention_days: 30\n")
    (_, action, diff), _ = write_proposals([found])
    assert action == WriteOutcome.WOULD_CHANGE and "-retention_days: 30" in diff
    assert yaml_path.read_text().endswith("retention_days: 30\n")
    known = TopicName("staging.acme.payments.card-authorized", "acme", "payments", "card-authorized")
    registered = tuple(
        RegisteredSchema("s", i, i, s) for i, s in enumerate(load_topic_catalog(root).get(known.kafka_topic).schemas, 1)
    )
    again = propose(known, env="staging", root=root, catalog=catalog, registered=registered, sample=Sample())
    actions = {p.name: a for p, a, _ in write_proposals([again], dry_run=True)}  # type: ignore[list-item]
    assert actions["card-authorized.v1.avsc"] == actions["card-authorized.v2.avsc"] == WriteOutcome.UNCHANGED
    assert actions["card-authorized.yaml"] == WriteOutcome.WOULD_CHANGE


def test_flagged_when_no_schema_can_be_had(tmp_path: Path) -> None:
    catalog = load_topic_catalog(catalog_dir())
    empty = propose(NAME, env="staging", root=tmp_path, catalog=catalog, registered=(), sample=Sample())
    assert empty == Flagged(
        NAME.kafka_topic,
        "JSON without a registered schema, and no records to infer a schema from: write its .avsc by hand",
    )
    binary = propose(
        NAME, env="staging", root=tmp_path, catalog=catalog, registered=(), sample=Sample([b"\x00\x01"], 1)
    )
    assert binary == Flagged(NAME.kafka_topic, "no value subject in the registry, and the values are not JSON")


def test_drift_compares_the_cluster_with_the_catalog() -> None:
    catalog = load_topic_catalog(catalog_dir())
    card = catalog.get("card-authorized", "staging")
    extra = RegisteredSchema("x", 3, 99, AVRO)
    registered = tuple(RegisteredSchema("x", i, i, s) for i, s in enumerate(card.schemas, 1))
    kafka = [t.kafka_topic for t in catalog.for_env("staging") if t.name != "refund-issued"]
    view = ClusterView(
        (*kafka, "staging.acme.sales.orders", "legacy_orders", "production.acme.x.y"),
        {card.kafka_topic: (*registered, extra)},
    )
    drift = compare(view, catalog.topics, "staging")
    assert drift.uncatalogued == (NAME,)
    assert [o.kafka_topic for o in drift.off_convention] == ["legacy_orders"]  # not production's topic
    assert drift.missing_topics == ("staging.acme.payments.refund-issued",)
    assert drift.missing_versions == {card.kafka_topic: (3,)}
    assert drift.held_versions == {  # its field placed_at is neither tagged nor in a version the catalog declares
        card.kafka_topic: {3: "fields placed_at are neither tagged personal nor in a version the catalog declares"}
    }
    assert drift.lines()[-1] == (
        f"held by the archiver (restricted quarantine): {card.kafka_topic} v3: fields placed_at are neither tagged "
        "personal nor in a version the catalog declares"
    )
    assert not drift.clean
    assert drift.lines()[0] == "uncatalogued: staging.acme.sales.orders (would be acme/sales/staging/orders)"
    assert drift.status(card.kafka_topic) == "registry has v3, the catalog lacks it"
    assert drift.status("staging.acme.payments.refund-issued") == "no such Kafka topic"
    assert drift.status("staging.globex.iot.sensor-readings") == "in sync"
    now = datetime(2026, 11, 23, tzinfo=UTC)
    assert {d["MetricName"]: d["Value"] for d in metric_data(drift, now)} == {
        "CatalogUncataloguedTopics": 1,
        "CatalogOffConventionTopics": 1,
        "CatalogMissingTopics": 1,
        "CatalogMissingSchemaVersions": 1,
    }
    in_sync = ClusterView(tuple(t.kafka_topic for t in catalog.for_env("staging")), {card.kafka_topic: registered})
    assert compare(in_sync, catalog.topics, "staging").clean


def test_the_format_is_what_most_sampled_bytes_show() -> None:
    framed = [encode(5, AVRO, {"id": "a", "placed_at": NOW_S * 1000}), encode(6, AVRO, {"id": "b", "placed_at": 0})]
    as_json = [json.dumps({"id": i}).encode() for i in range(3)]
    poison = [b"\x07not a framed value", b"\x00\x01"]  # the second is too short for a frame
    versions = (RegisteredSchema("s", 1, 5, AVRO), RegisteredSchema("s", 2, 6, AVRO))
    avro = sampled_format([*framed, framed[0], poison[0]], versions)
    assert (avro.value_format, avro.framed, avro.schema_ids, avro.neither) == (ValueFormat.AVRO, 3, (5, 6), 1)
    assert avro.evidence() == (
        "4 sampled values: 3 Confluent-framed (schema ids 5, 6, registry schemaType AVRO), 1 neither framed nor JSON"
    )
    bare = sampled_format([*framed, framed[0]])  # no registered version: framing alone names no format
    assert (bare.value_format, bare.unregistered) == (None, (5, 6))
    lacking = sampled_format(framed, versions[:1])  # id 6 is no version of the subject: no guess from the others
    assert (lacking.value_format, lacking.schema_types, lacking.unregistered) == (None, ("AVRO",), (6,))
    mostly_json = sampled_format([*as_json, framed[0], *poison])
    assert mostly_json.value_format == ValueFormat.JSON and mostly_json.json_values == ({"id": 0}, {"id": 1}, {"id": 2})
    assert mostly_json.evidence() == (
        "6 sampled values: 1 Confluent-framed (schema ids 5), 3 JSON, 2 neither framed nor JSON"
    )
    assert sampled_format([*framed, *as_json[:2]]).value_format is None  # as many of each: no one format
    assert sampled_format(poison).value_format is None
    nothing = sampled_format([])
    assert nothing.value_format is None and nothing.evidence() == "no sampled value"


def test_a_json_topic_with_a_registered_subject_is_json(tmp_path: Path) -> None:
    catalog = load_topic_catalog(catalog_dir())
    schema = json.dumps(
        {**json.loads(AVRO), "fields": [{"name": "id", "type": "string"}, {"name": "placed_at", "type": "long"}]}
    )
    registered = (RegisteredSchema("s", 1, 5, schema),)
    values = [json.dumps({"id": f"o{i}", "placed_at": (NOW_S + i) * 1000}).encode() for i in range(4)]
    sample = Sample([*values, b"\x07not a framed value"], records=5, keys=5)
    found = propose(NAME, env="staging", root=tmp_path, catalog=catalog, registered=registered, sample=sample)
    assert isinstance(found, Proposal) and found.value_format == ValueFormat.JSON
    assert found.format_evidence == (
        "5 sampled values: 4 JSON, 1 neither framed nor JSON; a value subject with 1 version(s) in the registry"
    )
    folder = tmp_path / "acme" / "sales" / "staging"
    assert json.loads(found.files[folder / "orders.v1.avsc"]) == json.loads(schema)  # the registered schema
    text = found.files[folder / "orders.yaml"]
    assert "value_format: json\n" in text and f"# Value format json: {found.format_evidence}.\n" in text
    assert found.times[0].candidate == TimeCandidate(path="placed_at", format=TimeFormat.EPOCH, unit="ms")
    assert found.times[0].evidence.startswith("4 sampled values")  # the JSON values were read


def test_framed_values_are_avro_and_the_subject_decides_only_an_empty_sample(tmp_path: Path) -> None:
    catalog = load_topic_catalog(catalog_dir())
    registered = (RegisteredSchema("s", 1, 5, AVRO),)
    framed = [encode(5, AVRO, {"id": f"o{i}", "placed_at": NOW_S * 1000}) for i in range(3)]
    avro = propose(NAME, env="staging", root=tmp_path, catalog=catalog, registered=registered, sample=Sample(framed, 3))
    assert isinstance(avro, Proposal) and avro.value_format == ValueFormat.AVRO
    evidence = "3 sampled values: 3 Confluent-framed (schema ids 5, registry schemaType AVRO); a value subject"
    assert avro.format_evidence.startswith(evidence)
    unregistered = propose(NAME, env="staging", root=tmp_path, catalog=catalog, registered=(), sample=Sample(framed))
    assert unregistered == Flagged(
        NAME.kafka_topic,
        "Confluent-framed values (3 sampled values: 3 Confluent-framed (schema ids 5)), but no value subject in the "
        "registry: register the topic's value schema under subject 'staging.acme.sales.orders-value' "
        "(TopicNameStrategy), then import again",
    )
    empty = propose(NAME, env="staging", root=tmp_path, catalog=catalog, registered=registered, sample=Sample())
    assert isinstance(empty, Proposal) and empty.value_format == ValueFormat.AVRO
    assert empty.format_evidence == "no sampled value; a value subject with 1 version(s) in the registry"
    mixed = Sample([*framed[:1], json.dumps({"id": "x"}).encode()], 2)
    assert propose(NAME, env="staging", root=tmp_path, catalog=catalog, registered=registered, sample=mixed) == (
        Flagged(
            NAME.kafka_topic,
            "the sampled bytes show no one format (2 sampled values: 1 Confluent-framed (schema ids 5, registry "
            "schemaType AVRO), 1 JSON)",
        )
    )


def test_topics_off_the_convention_are_summarised_by_reason() -> None:
    names = [
        *(f"legacy_{n}" for n in ("e", "a", "d", "c", "b")),
        "production.acme.sales.orders",
        "t0a1b2c3d4.acme.sales.refunds",
        "staging.Acme.sales.orders",
    ]
    off = [o for o in (parse_topic_name(n, "staging") for n in names) if isinstance(o, OffConvention)]
    assert len(off) == len(names)
    no_match = f"does not match the naming convention {DEFAULT_TOPIC_NAMING}"
    assert off_convention_lines(off, examples=3) == [
        "8 topics off the naming convention, not imported:",
        "  5 do not match the naming convention (2 more not shown):",
        f"    not imported: legacy_a: {no_match}",
        f"    not imported: legacy_b: {no_match}",
        f"    not imported: legacy_c: {no_match}",
        "  2 belong to another environment:",
        "    not imported: production.acme.sales.orders: belongs to environment 'production', not 'staging'",
        "    not imported: t0a1b2c3d4.acme.sales.refunds: belongs to environment 't0a1b2c3d4', not 'staging'",
        "  1 have a company that is not a catalog name:",
        "    not imported: staging.Acme.sales.orders: its company 'Acme' is not a catalog name "
        "(lower case letters, digits, '-', '_')",
    ]
    assert off_convention_lines([]) == []
