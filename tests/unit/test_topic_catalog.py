import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infra.repo import catalog_dir
from kafkalake.topic_catalog import TopicCatalogInvalid, load_topic_catalog
from kafkalake.topic_spec import StoredAs
from kafkalake_dev.cli.app import app

EXAMPLE = catalog_dir()
SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "id", "type": "string"}]})


def write_topic(root: Path, rel: str, body: str, schemas: int = 1) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    name = path.name.removesuffix(".yaml")
    for version in range(1, schemas + 1):
        (path.parent / f"{name}.v{version}.avsc").write_text(SCHEMA)
    return path


def problems(root: Path) -> list[str]:
    with pytest.raises(TopicCatalogInvalid) as exc:
        load_topic_catalog(root)
    return [str(p) for p in exc.value.problems]


def test_example_catalog_derives_everything() -> None:
    catalog = load_topic_catalog(EXAMPLE)
    assert catalog.environments() == ["production", "staging"]
    assert {t.company for t in catalog.topics} == {"acme", "globex"}
    assert len(catalog.for_env("staging")) == 8
    assert len(catalog.for_env("production")) == 3
    card = catalog.get("card-authorized", "staging")
    assert card.kafka_topic == "staging.acme.payments.card-authorized"
    assert card.database == "acme_staging"
    assert card.table == "card_authorized"
    assert card.crawler_name == "kafkalake-acme_staging-card_authorized"
    assert card.prefix.data_prefix() == "data/staging/acme/payments/card-authorized/"
    assert len(card.schemas) == 2
    assert [c.path for c in card.spec.time_fields] == ["authorization.authorized_at", "created_at_ms"]
    assert card.spec.table_inference.value == "native"
    # Defaults from defaults.yaml, overridden per topic.
    assert catalog.get("shipment-events", "staging").spec.tombstones == "keep"
    assert catalog.get("sensor-readings", "staging").spec.tombstones == "drop"
    assert catalog.get("customer-updated").spec.archive.key == StoredAs.CLEAR  # the older include_key: true
    assert catalog.get("acme_staging.refund_issued").name == "refund-issued"


def test_ambiguous_lookup_names_the_environments() -> None:
    with pytest.raises(KeyError, match=r"several environments \(production, staging\); pass --env"):
        load_topic_catalog(EXAMPLE).get("card-authorized")


def test_two_topics_mapping_to_one_table(tmp_path: Path) -> None:
    write_topic(tmp_path, "acme/payments/staging/orders.yaml", "value_format: avro\n")
    other = write_topic(tmp_path, "acme/shop/staging/orders.yaml", "value_format: avro\n")
    found = problems(tmp_path)
    assert found == [
        f"{other}: table: maps to the same table 'orders' in 'staging' as "
        f"{tmp_path / 'acme/payments/staging/orders.yaml'} "
        "(fix: set 'table:' to a distinct name in one of the two files)"
    ]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    write_topic(tmp_path, "acme/payments/staging/a.yaml", "value_format: thrift\n")
    write_topic(tmp_path, "acme/payments/staging/b.yaml", "time_fields:\n  - {path: ts, format: epoch}\n")
    write_topic(tmp_path, "acme/payments/staging/c.yaml", "value_format: json\n", schemas=0)
    write_topic(tmp_path, "acme/payments/staging/d.yaml", "colour: red\n")
    write_topic(tmp_path, "acme/payments/staging/e.yaml", "table: 9-bad\n")
    write_topic(tmp_path, "acme/payments/f.yaml", "{}\n")
    write_topic(tmp_path, "Acme/payments/staging/g.yaml", "{}\n")
    write_topic(tmp_path, "acme/payments/staging/h.yaml", "key: [unclosed\n")
    write_topic(tmp_path, "acme/payments/staging/i.yaml", "time_fields:\n  - {path: ts, format: iso8601, unit: s}\n")
    found = "\n".join(problems(tmp_path))
    assert "a.yaml: value_format: Input should be 'avro', 'protobuf', 'json_schema' or 'json'" in found
    assert "b.yaml: time_fields.0: Value error, epoch candidates must declare unit: s, ms, us or ns" in found
    assert "c.yaml: schemas: no Avro schema beside the topic file (fix: add c.v1.avsc next to c.yaml" in found
    assert "d.yaml: colour: Extra inputs are not permitted" in found
    assert "e.yaml: table: '9-bad' is not legal in Athena" in found
    assert "f.yaml: path: topic files live exactly four levels deep" in found
    assert "g.yaml: company: 'Acme' is not a valid name (fix: rename it to 'acme'" in found
    assert "h.yaml: -: not valid YAML" in found
    assert "i.yaml: time_fields.0: Value error, unit applies to epoch candidates only; remove it" in found


def test_bad_and_gapped_schemas(tmp_path: Path) -> None:
    topic = write_topic(tmp_path, "acme/payments/staging/a.yaml", "{}\n")
    (topic.parent / "a.v3.avsc").write_text(SCHEMA)
    write_topic(tmp_path, "acme/payments/staging/b.yaml", "{}\n", schemas=0)
    (topic.parent / "b.v1.avsc").write_text(
        '{"type": "record", "name": "R", "fields": [{"name": "x", "type": "nosuch"}]}'
    )
    found = "\n".join(problems(tmp_path))
    assert "a.yaml: schemas: schema versions [1, 3] have gaps" in found
    assert "b.v1.avsc: schema: not a valid Avro schema" in found


def test_cli_validate_and_show() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["catalog", "validate"])
    assert result.exit_code == 0, result.output
    assert "11 topics in environments production, staging: OK" in result.output
    shown = runner.invoke(app, ["catalog", "show", "sensor-readings", "--env", "production"])
    assert shown.exit_code == 0, shown.output
    derived = json.loads(shown.output)
    assert derived["glue_database"] == "globex_production"
    assert derived["s3_prefix"] == "data/production/globex/iot/sensor-readings/"
    assert derived["time_fields"] == [
        {"path": "reading.measured_at_us", "format": "epoch", "unit": "us", "default_zone": "UTC"}
    ]


def test_cli_validate_fails_on_bad_catalog(tmp_path: Path) -> None:
    write_topic(tmp_path, "acme/payments/staging/a.yaml", "value_format: xml\n")
    result = CliRunner().invoke(app, ["catalog", "validate", "--catalog", str(tmp_path)])
    assert result.exit_code == 1
    assert "1 catalog problem(s)" in result.output


def test_an_iceberg_topic_has_no_crawler_and_refuses_crawler_settings(tmp_path: Path) -> None:
    (tmp_path / "defaults.yaml").write_text("table_inference: crawler\n")  # the defaults' choice: Hive tables only
    write_topic(tmp_path, "acme/payments/staging/orders.yaml", "table_format: iceberg\n")
    orders = load_topic_catalog(tmp_path).get("orders")
    assert orders.spec.table_format.value == "iceberg" and not orders.crawled
    assert (
        json.loads(CliRunner().invoke(app, ["catalog", "show", "orders", "--catalog", str(tmp_path)]).stdout)[
            "table_format"
        ]
        == "iceberg"
    )
    write_topic(tmp_path, "acme/payments/staging/orders.yaml", "table_format: iceberg\ntable_inference: crawler\n")
    [problem] = problems(tmp_path)
    assert "table_inference apply to Hive tables only" in problem and "remove table_inference" in problem


def test_two_problems_of_one_file_are_both_reported(tmp_path: Path) -> None:
    topic = write_topic(tmp_path, "acme/payments/staging/a.yaml", "retention_days: 0\n", schemas=0)
    (topic.parent / "a.v1.avsc").write_text('{"type": "record", "name": "R", "fields": [{"name": "x", "type": "no"}]}')
    found = problems(tmp_path)
    assert [p.split(": ")[1] for p in found] == ["retention_days", "schema"], found


def test_an_unknown_key_is_answered_with_the_nearest_one_at_its_place(tmp_path: Path) -> None:
    write_topic(tmp_path, "acme/payments/staging/a.yaml", "retention_day: 3\n")
    write_topic(tmp_path, "acme/payments/staging/b.yaml", "archive: {compresion: zstd}\n")
    write_topic(tmp_path, "acme/payments/staging/c.yaml", "colour: red\n")
    found = "\n".join(problems(tmp_path))
    assert "a.yaml: retention_day: Extra inputs are not permitted (fix: did you mean `retention_days`?" in found
    assert "b.yaml: archive.compresion: Extra inputs are not permitted (fix: did you mean `compression`?" in found
    assert "c.yaml: colour: Extra inputs are not permitted (fix: see the catalog keys in docs/catalog.md)" in found


def test_a_time_candidate_no_schema_version_has_is_a_problem(tmp_path: Path) -> None:
    write_topic(tmp_path, "acme/payments/staging/a.yaml", "time_fields:\n  - {path: created_at, format: iso8601}\n")
    assert problems(tmp_path) == [
        f"{tmp_path / 'acme/payments/staging/a.yaml'}: time_fields.0.path: no schema version has the field "
        "created_at, so every record would take its Kafka time (fix: use a dotted path of a field in one of the "
        "topic's .avsc files, or remove the candidate)"
    ]


DEBEZIUM_ROW = {
    "type": "record",
    "name": "Value",
    "fields": [{"name": "id", "type": "long"}, {"name": "v", "type": "int"}],
}
DEBEZIUM = json.dumps(
    {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "before", "type": ["null", DEBEZIUM_ROW], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "op", "type": "string"},
        ],
    }
)


def test_an_upsert_table_is_iceberg_with_a_key_and_catalog_validate_says_why_and_how(tmp_path: Path) -> None:
    topic = "acme/crm/staging/customers.yaml"
    write_topic(tmp_path, topic, "mode: upsert\nkey_fields: [id]\n")
    [problem] = problems(tmp_path)
    assert "only an Iceberg table can do" in problem and "set table_format: iceberg" in problem
    write_topic(tmp_path, topic, "mode: upsert\ntable_format: iceberg\n")
    [problem] = problems(tmp_path)
    assert "mode: upsert needs a key" in problem and "key_fields: [id]" in problem
    write_topic(tmp_path, topic, "table_format: iceberg\nversion_field: id\n")
    [problem] = problems(tmp_path)
    assert "version_field apply to upsert tables only" in problem
    write_topic(tmp_path, topic, "mode: upsert\ntable_format: iceberg\nkey_fields: [customer_id]\n")
    [problem] = problems(tmp_path)
    assert "key_fields.customer_id" in problem and "no schema version's row has the field customer_id" in problem
    write_topic(tmp_path, topic, "mode: upsert\ntable_format: iceberg\nkey_fields: [id]\ntombstones: keep\n")
    [problem] = problems(tmp_path)
    assert "an upsert table keeps no delete log" in problem
    write_topic(tmp_path, topic, "mode: upsert\ntable_format: iceberg\narchive: {key: hmac}\n")
    customers = load_topic_catalog(tmp_path).get("customers")
    assert customers.keeps_tombstones and customers.spec.mode.value == "upsert"


def test_a_debezium_topics_keys_are_fields_of_after_and_its_schema_must_be_an_envelope(tmp_path: Path) -> None:
    topic = "acme/crm/staging/customers.yaml"
    body = "mode: upsert\ntable_format: iceberg\nenvelope: debezium\nkey_fields: [id]\nversion_field: v\n"
    write_topic(tmp_path, topic, body)
    [problem] = problems(tmp_path)  # the schema beside it is a plain row
    assert "no schema version has after, before, op" in problem and "set envelope: none" in problem
    (tmp_path / "acme/crm/staging/customers.v1.avsc").write_text(DEBEZIUM)
    assert load_topic_catalog(tmp_path).get("customers").spec.key_fields == ("id",)
    write_topic(tmp_path, topic, body.replace("[id]", "[before]"), schemas=0)
    [problem] = problems(tmp_path)
    assert "key_fields.before" in problem and "a Debezium row is the event's after" in problem


def test_a_debezium_tables_personal_columns_are_the_rows_and_its_upsert_key_where_the_key_is() -> None:
    [customers] = [t for t in load_topic_catalog(EXAMPLE).for_env("staging") if t.name == "customers"]
    assert set(customers.personal_fields) == {"after.name", "after.email", "before.name", "before.email"}
    # the table's columns are after's fields: name and email are tagged, no after or before column exists to tag
    assert customers.personal_columns == ("_key", "email", "name")
    by_email = customers.spec.model_copy(update={"key_fields": ("email",)})
    assert dataclasses.replace(customers, spec=by_email).personal_columns == ("_key", "_upsert_key", "email", "name")
    by_kafka_key = customers.spec.model_copy(update={"key_fields": (), "key_format": None})
    assert "_upsert_key" in dataclasses.replace(customers, spec=by_kafka_key).personal_columns
