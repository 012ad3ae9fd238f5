"""The access model: LF-tags per database, table and personal column, grants per consumer, the matrix, and the
consumers' validation in environments.yaml."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from infra.repo import REPO_ROOT, catalog_dir, environments_file
from kafkalake.environments import EnvironmentConfig, load_environments
from kafkalake.lftags import MAX_KEYS_PER_EXPRESSION, MAX_TAGS_PER_RESOURCE, personal_columns, strictest
from kafkalake.permissions import AccessModel, Grant, access_model, matches, table_tags_of
from kafkalake.personal import PiiAction
from kafkalake.topic_catalog import Topic, load_topic_catalog, tables_document
from kafkalake.topic_spec import TopicSpec
from kafkalake_dev.cli.app import app
from lambdas.tables import tables_from_document

ENVIRONMENTS = load_environments(environments_file())
ACCESS_DOC_MARKER = "<!-- kafkalake access --env staging -->\n```text\n"
CATALOG = load_topic_catalog(catalog_dir())


def model(env: str) -> AccessModel:
    return access_model(ENVIRONMENTS[env], CATALOG.for_env(env))


def grant(access: AccessModel, name: str) -> Grant:
    return next(g for g in access.grants if g.consumer.name == name)


def test_a_nested_personal_field_tags_its_top_level_column_and_a_dropped_field_is_no_column() -> None:
    fields = {
        "customer.email": PiiAction.HMAC,
        "customer.phone": PiiAction.DROP,
        "card.pan": PiiAction.MASK_LAST4,
        "Phone": PiiAction.DROP,
        "address": PiiAction.DROP,
        "address.street": PiiAction.HMAC,
        "ip": PiiAction.DROP,
        "note.text": PiiAction.DROP,
    }
    assert personal_columns(fields) == ("card", "customer")


def test_what_identifies_a_subject_is_personal_whatever_its_action() -> None:
    """A subject field kept in clear and the stored Kafka key name a data subject: erasure finds rows by them."""
    fields = {"email": PiiAction.HMAC, "phone": PiiAction.DROP}
    assert personal_columns(fields, ("Customer.ID", "_key", "phone")) == ("_key", "customer", "email")


def test_the_stored_kafka_key_is_a_personal_column_of_its_table() -> None:
    record = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "string"}]}
    stored = TopicSpec.model_validate({"archive": {"key": "clear"}, "subject_fields": ["id"]})
    topic = Topic("t", "acme", "crm", "staging", stored, (json.dumps(record),), Path("t.yaml"))
    tags = table_tags_of(topic)
    assert (tags.columns, tags.personal_columns) == (("id", "_key"), ("_key", "id"))
    unstored = table_tags_of(Topic("t", "acme", "crm", "staging", TopicSpec(), (json.dumps(record),), Path("t.yaml")))
    assert (unstored.columns, unstored.personal_columns) == (("id",), ())


def test_consumers_without_pii_access_read_no_subject_field_and_no_kafka_key() -> None:
    access = model("staging")
    by_name = {t.name: t for t in access.tables}
    refunds, customers = by_name["acme_staging.refund_issued"], by_name["globex_staging.customer_updated"]
    assert "customer_id" in access.readable(grant(access, "analysts"), refunds)[1]
    assert {"customer_id", "_key"} <= set(access.readable(grant(access, "support"), customers)[1])


def test_a_tables_columns_are_every_versions_top_level_fields_minus_the_dropped() -> None:
    fields = [{"name": "id", "type": "string"}, {"name": "Phone", "type": "string"}]
    v1 = {"type": "record", "name": "R", "fields": fields}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "email", "type": ["null", "string"], "default": None}]}
    spec = TopicSpec(pii={"Phone": PiiAction.DROP, "email": PiiAction.HMAC})
    topic = Topic("t", "acme", "crm", "staging", spec, (json.dumps(v1), json.dumps(v2)), Path("t.yaml"))
    tags = table_tags_of(topic)
    assert (tags.columns, tags.personal_columns) == (("id", "email"), ("email",))


def test_databases_carry_their_strictest_table_and_no_pii_tables_their_own_level() -> None:
    access = model("staging")
    assert access.databases == {
        "acme_staging": {"sensitivity": "confidential", "pii": "true"},
        "globex_staging": {"sensitivity": "pii", "pii": "true"},
    }
    by_name = {t.name: t for t in access.tables}
    assert {name: (t.sensitivity, t.personal_columns) for name, t in by_name.items()} == {
        "acme_staging.card_authorized": ("confidential", ()),
        "acme_staging.customers": ("confidential", ("_key", "email", "name")),  # the row's columns
        "acme_staging.order_placed": ("confidential", ("customer", "ship_to")),  # customer.email tagged in the registry
        "acme_staging.refund_issued": ("internal", ("customer_id",)),
        "acme_staging.shipment_events": ("internal", ()),
        "globex_staging.customer_updated": ("pii", ("_key", "customer_id", "email")),
        "globex_staging.sensor_readings": ("public", ()),
        "globex_staging.ticket_opened": ("pii", ("address", "contact", "customer_id", "email")),
    }
    customer = by_name["globex_staging.customer_updated"]
    assert customer.columns == ("id", "customer_id", "email", "updated_at", "_key")
    assert access.column_tags(customer, "email") == {"sensitivity": "pii", "pii": "true"}
    assert access.column_tags(customer, "id") == {"sensitivity": "pii", "pii": "false"}
    assert strictest(["public", "pii", "internal"]) == "pii"


def test_grants_express_the_consumers_settings_as_tag_expressions() -> None:
    access = model("staging")
    analysts, privacy = grant(access, "analysts"), grant(access, "privacy")
    assert analysts.table_expression == {"sensitivity": ("public", "internal"), "pii": ("false",)}
    assert privacy.table_expression == {"sensitivity": ("public", "internal", "confidential", "pii")}
    for each in access.grants:
        assert each.database_expression == {"sensitivity": ("public", "internal", "confidential", "pii")}
        assert all(matches(each.database_expression, tags) for tags in access.databases.values())


def test_the_matrix_follows_lake_formation_inheritance() -> None:
    access = model("staging")
    analysts, privacy = grant(access, "analysts"), grant(access, "privacy")
    by_name = {t.name: t for t in access.tables}
    customer, card = by_name["globex_staging.customer_updated"], by_name["acme_staging.card_authorized"]
    assert access.readable(analysts, customer) == ((), ())
    assert access.readable(analysts, card) == ((), ())
    assert access.readable(analysts, by_name["globex_staging.sensor_readings"])[1] == ()
    assert access.readable(privacy, customer) == (customer.columns, ())
    support = grant(access, "support")
    assert access.readable(support, customer) == (("id", "updated_at"), ("customer_id", "email", "_key"))
    # a table nobody has tagged yet has only its database's tags: every column counts as personal
    assert not matches(support.table_expression, access.databases["globex_staging"])
    assert matches(privacy.table_expression, access.databases["globex_staging"])
    no_pii = Grant(privacy.consumer.model_copy(update={"pii": False}))
    assert access.readable(no_pii, customer) == (("id", "updated_at"), ("customer_id", "email", "_key"))


@pytest.mark.parametrize("env", ["staging", "production"])
def test_lake_formation_limits_hold(env: str) -> None:
    access = model(env)
    tagged: list[dict[str, str]] = [*access.databases.values()]
    tagged += [{**t.tags()} for t in access.tables]
    tagged += [access.column_tags(t, c) for t in access.tables for c in t.personal_columns]
    for tags in tagged:
        assert len(tags) <= MAX_TAGS_PER_RESOURCE
        assert all(value == value.lower() for value in tags.values())
    for each in access.grants:
        assert 1 <= len(each.table_expression) <= MAX_KEYS_PER_EXPRESSION


def test_the_tables_document_carries_each_tables_tags_for_the_lambda() -> None:
    tables = {t.name: t for t in tables_from_document(tables_document(CATALOG.for_env("staging")))}
    customer = tables["globex_staging.customer_updated"]
    assert (customer.sensitivity, customer.personal_columns) == ("pii", ("_key", "customer_id", "email"))
    assert tables["acme_staging.refund_issued"].personal_columns == ("customer_id",)
    assert tables["acme_staging.card_authorized"].sensitivity == "confidential"


def staging_with(consumers: list[dict[str, Any]]) -> EnvironmentConfig:
    values = ENVIRONMENTS["staging"].model_dump(exclude={"consumers"})
    return EnvironmentConfig.model_validate({**values, "consumers": consumers})


ARN = "arn:aws:iam::111111111111:role/readers"


@pytest.mark.parametrize(
    ("consumers", "message"),
    [
        ([{"name": "a", "role_arn": ARN, "sensitivity": ["secret"]}], "sensitivity.0"),
        ([{"name": "a", "role_arn": ARN, "sensitivity": []}], "at least 1 item"),
        ([{"name": "a", "role_arn": "arn:aws:iam::1111:user/x", "sensitivity": ["public"]}], "role_arn"),
        ([{"name": "A b", "role_arn": ARN, "sensitivity": ["public"]}], "name"),
        (
            [
                {"name": "a", "role_arn": ARN, "sensitivity": ["public"]},
                {"name": "a", "role_arn": ARN + "2", "sensitivity": ["public"]},
            ],
            "name a listed twice",
        ),
        (
            [
                {"name": "a", "role_arn": ARN, "sensitivity": ["public"]},
                {"name": "b", "role_arn": ARN, "sensitivity": ["public"]},
            ],
            f"role_arn {ARN} listed twice",
        ),
    ],
)
def test_consumers_are_validated(consumers: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        staging_with(consumers)


def test_a_consumer_in_another_partition_is_accepted() -> None:
    settings = staging_with(
        [{"name": "a", "role_arn": "arn:aws-cn:iam::111111111111:role/team/a", "sensitivity": ["public"]}]
    )
    assert settings.consumers[0].pii is False


def test_the_access_doc_shows_what_kafkalake_access_prints_for_the_demo_catalog() -> None:
    result = CliRunner().invoke(app, ["access", "--env", "staging"])
    assert result.exit_code == 0, result.output
    doc = (REPO_ROOT / "docs" / "access.md").read_text()
    assert ACCESS_DOC_MARKER in doc, "docs/access.md lost its `kafkalake access` block"
    block = doc.split(ACCESS_DOC_MARKER, 1)[1].split("```", 1)[0]
    assert block == result.output, "docs/access.md's `kafkalake access` block is stale: paste the command's output"
    assert "globex_staging.customer_updated  pii           id, updated_at | customer_id, email, _key" in result.output
    assert "acme_staging.refund_issued       internal      id, amount_cents, refunded_at | customer_id" in result.output
    debezium = "id, tier, updated_at, _op, _source_ts_ms, _source_lsn, country, _upsert_key | name, email, _key"
    assert f"acme_staging.customers           confidential  {debezium}" in result.output, "the upsert table's row"
