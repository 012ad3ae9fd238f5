"""Kafka and registry access from a Secrets Manager secret: parsing, errors, and the client settings."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from kafkalake.endpoints import Endpoints
from kafkalake.kafka_access import Credentials, CredentialsInvalid, KafkaAccess, kafka_access

ARN_SOURCE = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:kafkalake/staging/kafka"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n"
CA = json.dumps(PEM)[1:-1]
"""``PEM`` as a JSON string in the secret holds it (its line breaks escaped)."""


def endpoints(bootstrap: str, secret_arn: str | None = None) -> Endpoints:
    return Endpoints(bootstrap, "http://registry:8081", "eu-west-1", "lake", kafka_secret_arn=secret_arn)


def test_no_secret_means_plain_access() -> None:
    access = kafka_access(endpoints("b:9092"))
    assert access.client_config() == {"bootstrap.servers": "b:9092"}
    assert access.spark_options() == {"kafka.bootstrap.servers": "b:9092"}


@mock_aws
def test_secret_gives_sasl_settings_to_both_kafka_clients_and_the_registry() -> None:
    secrets = boto3.client("secretsmanager", region_name="eu-west-1")
    value = {"username": "svc", "password": 'p"w\\x', "registry_username": "reg", "registry_password": "rpw"}
    arn = secrets.create_secret(Name="kafkalake/staging/kafka", SecretString=json.dumps(value))["ARN"]
    access = kafka_access(endpoints("b:9096", arn), secrets)
    assert access.client_config() == {
        "bootstrap.servers": "b:9096",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": 'p"w\\x',
    }
    options = access.spark_options()
    assert options["kafka.security.protocol"] == "SASL_SSL" and options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="p\\"w\\\\x";'
    )
    assert access.registry()._http.auth is not None


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("not json", "is not JSON"),
        ('["a"]', "must be a JSON object"),
        ('{"username": "svc"}', "missing ['password']"),
        ('{"username": "u", "password": "p", "user": "x"}', "unknown ['user']"),
        ('{"username": "u", "password": "p", "mechanism": "GSSAPI"}', "mechanism 'GSSAPI' is not one of"),
        (
            '{"username": "u", "password": "p", "security_protocol": "PLAINTEXT"}',
            "security_protocol 'PLAINTEXT' is not one of SASL_SSL, SASL_PLAINTEXT, SSL",
        ),
        (
            '{"username": "u", "password": "p", "security_protocol": "SSL"}',
            "(TLS with a client certificate): missing ['certificate_pem', 'key_pem'], unknown ['password', 'username']",
        ),
        (
            '{"security_protocol": "SSL", "certificate_pem": "' + CA + '", "key_pem": "MIIE..."}',
            "key_pem its unencrypted PKCS#8 key",
        ),
        (
            '{"username": "u", "password": "p", "ca_pem": "MIIB..."}',
            "ca_pem must be the brokers' CA certificate in PEM",
        ),
        (
            '{"username": "u", "password": "p", "security_protocol": "SASL_PLAINTEXT", "ca_pem": "' + CA + '"}',
            "with security_protocol SASL_SSL",
        ),
    ],
)
def test_bad_secrets_say_what_is_wrong_and_where(secret: str, message: str) -> None:
    with pytest.raises(CredentialsInvalid) as raised:
        Credentials.from_secret(secret, ARN_SOURCE)
    assert message in str(raised.value) and ARN_SOURCE in str(raised.value)


def test_a_private_ca_goes_to_both_kafka_clients_and_nothing_else() -> None:
    credentials = Credentials.from_secret(json.dumps({"username": "u", "password": "p", "ca_pem": "\n" + PEM}), "x")
    access = KafkaAccess("b:9096", "https://registry", credentials)
    assert access.client_config()["ssl.ca.pem"] == "\n" + PEM
    options = access.spark_options()
    assert (options["kafka.ssl.truststore.type"], options["kafka.ssl.truststore.certificates"]) == ("PEM", "\n" + PEM)
    without = KafkaAccess("b:9096", "https://registry", Credentials("u", "p"))
    assert "ssl.ca.pem" not in without.client_config() and not any("truststore" in k for k in without.spark_options())


def test_a_client_certificate_goes_to_both_kafka_clients_without_sasl() -> None:
    key = "-----BEGIN PRIVATE KEY-----\nMIGH...\n-----END PRIVATE KEY-----\n"
    secret = {"security_protocol": "SSL", "certificate_pem": PEM, "key_pem": key, "ca_pem": PEM}
    access = KafkaAccess("b:9094", "https://registry", Credentials.from_secret(json.dumps(secret), "x"))
    assert access.client_config() == {
        "bootstrap.servers": "b:9094",
        "security.protocol": "SSL",
        "ssl.certificate.pem": PEM,
        "ssl.key.pem": key,
        "ssl.ca.pem": PEM,
    }
    assert access.spark_options() == {
        "kafka.bootstrap.servers": "b:9094",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": PEM,
        "kafka.ssl.keystore.key": key,
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": PEM,
    }
