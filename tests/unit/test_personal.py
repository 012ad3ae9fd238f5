"""Personal fields from schema tags and the catalog (as ``catalog validate`` lists them, with name-based
suggestions), the quarantine they call for, and the keyed hash in Python (in Spark: ``test_keyed_hash``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from kafkalake.personal import (
    KeyInvalid,
    Keyring,
    PiiAction,
    PseudonymKey,
    QuarantineMode,
    load_key,
    load_keys,
    name_suggestions,
    schema_personal_fields,
)
from kafkalake.topic_catalog import TopicCatalogInvalid, load_topic_catalog
from kafkalake_dev.cli.app import app

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Payment",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "email", "type": "string", "confluent:tags": ["PII"]},
        {"name": "iban", "type": ["null", "string"], "pii": "mask_last4"},
        {"name": "note", "type": "string", "pii": True},
        {
            "name": "customer",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Customer",
                    "fields": [{"name": "id", "type": "string"}, {"name": "phone", "type": "string", "pii": "drop"}],
                },
            ],
        },
    ],
}
KEY = PseudonymKey("k1", bytes(range(32)))


def test_tags_in_the_schema_name_personal_fields_with_their_action() -> None:
    assert schema_personal_fields(SCHEMA) == {
        "email": PiiAction.HMAC,
        "iban": PiiAction.MASK_LAST4,
        "note": PiiAction.HMAC,
        "customer.phone": PiiAction.DROP,
    }


def write_topic(root: Path, body: str, schema: dict[str, Any]) -> Path:
    folder = root / "acme" / "payments" / "staging"
    folder.mkdir(parents=True)
    (folder / "paid.yaml").write_text(body)
    (folder / "paid.v1.avsc").write_text(json.dumps(schema))
    return folder / "paid.yaml"


def test_the_catalog_adds_to_and_overrides_the_schema_tags(tmp_path: Path) -> None:
    write_topic(tmp_path, "pii: {customer.id: hmac, email: drop}\n", SCHEMA)
    topic = load_topic_catalog(tmp_path).topics[0]
    assert topic.personal_fields == {
        "email": PiiAction.DROP,
        "iban": PiiAction.MASK_LAST4,
        "note": PiiAction.HMAC,
        "customer.phone": PiiAction.DROP,
        "customer.id": PiiAction.HMAC,
    }


def test_a_pii_path_no_schema_has_is_refused(tmp_path: Path) -> None:
    from kafkalake.topic_catalog import TopicCatalogInvalid

    path = write_topic(tmp_path, "pii: {customer.mail: hmac}\n", SCHEMA)
    with pytest.raises(TopicCatalogInvalid) as exc:
        load_topic_catalog(tmp_path)
    assert [str(p) for p in exc.value.problems] == [
        f"{path}: pii.customer.mail: no schema version has this field "
        "(fix: use the path of a field in one of the topic's .avsc files: dotted names, [] after an array for its "
        "elements, {} after a map for its values (customer.email, contacts[].email, tags[], attributes{}.phone))"
    ]


def test_a_schema_tag_naming_no_action_is_refused(tmp_path: Path) -> None:
    from kafkalake.topic_catalog import TopicCatalogInvalid

    bad = {**SCHEMA, "fields": [{"name": "email", "type": "string", "pii": "encrypt"}]}
    write_topic(tmp_path, "{}\n", bad)
    with pytest.raises(TopicCatalogInvalid) as exc:
        load_topic_catalog(tmp_path)
    assert "pii tag is not an action" in str(exc.value) and "hmac, drop, mask_last4" in str(exc.value)


def test_the_digest_is_hmac_sha256() -> None:
    # RFC 4231, test case 2
    key = PseudonymKey("rfc", b"Jefe")
    assert key.digest("what do ya want for nothing?") == (
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )


def test_the_secret_is_read_and_its_key_never_shown() -> None:
    class Secrets:
        def get_secret_value(self, SecretId: str, VersionStage: str) -> dict[str, str]:
            assert SecretId == "arn:secret"
            return {"SecretString": PseudonymKey.secret_string("k7", b"s" * 32)}

    key = load_key(Secrets(), "arn:secret")
    assert key == PseudonymKey("k7", b"s" * 32)
    assert "sss" not in repr(key)


def test_the_erasure_reads_the_key_a_rotation_replaced_beside_the_current_one() -> None:
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name="eu-west-1")
        arn = secrets.create_secret(Name="pseudonym", SecretString=PseudonymKey.secret_string("k1", b"1" * 32))["ARN"]
        assert load_keys(secrets, arn) == Keyring(PseudonymKey("k1", b"1" * 32))
        secrets.put_secret_value(SecretId=arn, SecretString=PseudonymKey.secret_string("k2", b"2" * 32))
        keys = load_keys(secrets, arn)
        assert keys == Keyring(PseudonymKey("k2", b"2" * 32), (PseudonymKey("k1", b"1" * 32),))
        assert keys.get("k1") == PseudonymKey("k1", b"1" * 32) and keys.get("k0") is None
        assert load_key(secrets, arn) == keys.current, "the archiver hashes with the current key only"


@pytest.mark.parametrize(
    ("secret_string", "message"),
    [
        ("not json", "must be a JSON object with 'key_id' and 'key'"),
        (json.dumps({"key_id": "k", "key": "%%%"}), "must be a JSON object with 'key_id' and 'key'"),
        (PseudonymKey.secret_string("k", b"short"), "the key has 5 bytes; use at least 32"),
        (PseudonymKey.secret_string("", b"s" * 32), "'key_id' must be a non-empty string"),
    ],
)
def test_a_bad_secret_is_named_without_its_value(secret_string: str, message: str) -> None:
    with pytest.raises(KeyInvalid, match=message) as exc:
        PseudonymKey.from_secret(secret_string, "arn:the-secret")
    assert "arn:the-secret" in str(exc.value) and "short" not in str(exc.value)


def test_no_secret_configured_says_where_to_set_it() -> None:
    with pytest.raises(KeyInvalid, match=r"set pseudonym_secret_arn for the environment in environments\.yaml"):
        load_key(object(), None)


def test_quarantine_of_a_topic_with_personal_fields_is_restricted_unless_the_catalog_says_offsets_only(
    tmp_path: Path,
) -> None:
    write_topic(tmp_path / "a", "{}\n", SCHEMA)
    personal = load_topic_catalog(tmp_path / "a").topics[0]
    assert personal.quarantine == QuarantineMode.RESTRICTED
    assert personal.quarantine_prefix() == "restricted/quarantine/staging/acme/payments/paid/"
    write_topic(tmp_path / "b", "quarantine: offsets_only\n", SCHEMA)
    offsets_only = load_topic_catalog(tmp_path / "b").topics[0]
    assert offsets_only.quarantine == QuarantineMode.OFFSETS_ONLY
    assert offsets_only.quarantine_prefix() == "quarantine/staging/acme/payments/paid/"
    write_topic(tmp_path / "c", "{}\n", {**SCHEMA, "fields": [{"name": "id", "type": "string"}]})
    assert load_topic_catalog(tmp_path / "c").topics[0].quarantine == QuarantineMode.PLAIN


def test_quarantine_of_a_topic_erased_by_subject_field_or_storing_its_key_is_restricted(tmp_path: Path) -> None:
    """The raw bytes hold the subject's identifier (and the Kafka key) as much as the table's column does."""
    schema = {**SCHEMA, "fields": [{"name": "id", "type": "string"}, {"name": "customer_id", "type": "string"}]}
    write_topic(tmp_path / "a", "subject_fields: [customer_id]\n", schema)
    assert load_topic_catalog(tmp_path / "a").topics[0].quarantine == QuarantineMode.RESTRICTED
    write_topic(tmp_path / "b", "archive: {key: clear}\n", schema)
    assert load_topic_catalog(tmp_path / "b").topics[0].quarantine == QuarantineMode.RESTRICTED
    write_topic(tmp_path / "c", "subject_fields: [customer_id]\nquarantine: plain\n", schema)
    with pytest.raises(TopicCatalogInvalid, match=r"personal columns .*customer_id.*use quarantine: restricted"):
        load_topic_catalog(tmp_path / "c")


def test_the_plain_quarantine_is_refused_for_a_topic_with_personal_fields(tmp_path: Path) -> None:
    write_topic(tmp_path, "quarantine: plain\n", SCHEMA)
    with pytest.raises(
        TopicCatalogInvalid, match=r"quarantine: the topic has personal columns.*use quarantine: restricted"
    ):
        load_topic_catalog(tmp_path)


def test_catalog_validate_lists_personal_fields_with_their_source_and_suggests_untagged_ones(tmp_path: Path) -> None:
    schema = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "full_name", "type": "string"}]}
    write_topic(tmp_path, "pii: {customer.id: hmac, iban: drop}\n", schema)
    result = CliRunner().invoke(app, ["catalog", "validate", "--catalog", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[2:] == [
        "      personal customer.id: hmac (catalog)",
        "      personal customer.phone: drop (schema v1)",
        "      personal email: hmac (schema v1)",
        "      personal iban: drop (catalog)",
        "      personal note: hmac (schema v1)",
        "      quarantine: restricted",
        "      suggestion: full_name looks personal (*name*), not protected: tag it in the schema or add it to pii: "
        "in paid.yaml",
    ]
    assert load_topic_catalog(tmp_path).topics[0].personal_fields["iban"] == PiiAction.DROP  # reported, not applied
    assert "full_name" not in load_topic_catalog(tmp_path).topics[0].personal_fields


def test_name_suggestions_skip_declared_fields_and_their_children() -> None:
    paths = ["id", "email", "contact", "contact.phone", "contact.home_address", "billing_street", "username"]
    assert name_suggestions(paths, {"email", "contact"}) == [("billing_street", "street"), ("username", "name")]
