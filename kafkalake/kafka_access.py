"""How the jobs reach Kafka and the schema registry: addresses from configuration, credentials from AWS Secrets
Manager (the secret ``kafka_secret_arn`` in environments.yaml names), never from code.

The secret is a JSON object::

    {"username": "...", "password": "...",                      # Kafka SASL
     "mechanism": "SCRAM-SHA-512", "security_protocol": "SASL_SSL", # optional; these are the defaults
     "ca_pem": "-----BEGIN CERTIFICATE-----...",                  # optional: the brokers' CA, for SASL_SSL
     "registry_username": "...", "registry_password": "..."}      # optional: schema registry basic auth

``ca_pem`` is for brokers whose certificate a private CA signed (a self-managed cluster): the Kafka clients then trust
that CA (librdkafka's ``ssl.ca.pem``, the Java client's PEM truststore), and the registry's client trusts it beside the
system's CAs (an ``https`` registry the same CA signed). Without it every client trusts the system's CAs, which is what
Amazon MSK and Confluent Cloud need.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kafkalake.endpoints import Endpoints
from kafkalake.registry import RegistryClient

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
PROTOCOLS = ("SASL_SSL", "SASL_PLAINTEXT")
PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"


class CredentialsInvalid(ValueError):
    """The Kafka credentials secret is missing a field or has a value kafkalake cannot use."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    mechanism: str = "SCRAM-SHA-512"
    security_protocol: str = "SASL_SSL"
    ca_pem: str | None = None
    registry_username: str | None = None
    registry_password: str | None = None

    @classmethod
    def from_secret(cls, secret_string: str, source: str) -> Credentials:
        try:
            fields = json.loads(secret_string)
        except json.JSONDecodeError as exc:
            raise CredentialsInvalid(f"secret {source} is not JSON ({exc}); store a JSON object") from exc
        if not isinstance(fields, dict):
            raise CredentialsInvalid(f"secret {source} must be a JSON object, not {type(fields).__name__}")
        missing = [k for k in ("username", "password") if not fields.get(k)]
        unknown = sorted(set(fields) - set(cls.__dataclass_fields__))
        if missing or unknown:
            raise CredentialsInvalid(
                f"secret {source}: missing {missing or 'nothing'}, unknown {unknown or 'nothing'}; "
                f"expected keys: {', '.join(cls.__dataclass_fields__)}"
            )
        credentials = cls(**fields)
        if credentials.mechanism not in LOGIN_MODULES:
            raise CredentialsInvalid(
                f"secret {source}: mechanism {credentials.mechanism!r} is not one of {', '.join(LOGIN_MODULES)}"
            )
        if credentials.security_protocol not in PROTOCOLS:
            raise CredentialsInvalid(
                f"secret {source}: security_protocol {credentials.security_protocol!r} is not one of "
                f"{', '.join(PROTOCOLS)}"
            )
        if credentials.ca_pem is not None and (
            credentials.security_protocol != "SASL_SSL" or not credentials.ca_pem.lstrip().startswith(PEM_CERTIFICATE)
        ):
            raise CredentialsInvalid(
                f"secret {source}: ca_pem must be the brokers' CA certificate in PEM (beginning {PEM_CERTIFICATE}), "
                "with security_protocol SASL_SSL; leave it out to trust the system's CAs"
            )
        return credentials

    def jaas(self) -> str:
        def quoted(value: str) -> str:
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

        module = LOGIN_MODULES[self.mechanism]
        return f"{module} required username={quoted(self.username)} password={quoted(self.password)};"


@dataclass(frozen=True)
class KafkaAccess:
    bootstrap: str
    registry_url: str
    credentials: Credentials | None = None

    def client_config(self) -> dict[str, str]:
        """librdkafka (confluent-kafka) settings."""
        config = {"bootstrap.servers": self.bootstrap}
        if self.credentials:
            config |= {
                "security.protocol": self.credentials.security_protocol,
                "sasl.mechanisms": self.credentials.mechanism,
                "sasl.username": self.credentials.username,
                "sasl.password": self.credentials.password,
            }
            if self.credentials.ca_pem:
                config["ssl.ca.pem"] = self.credentials.ca_pem
        return config

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source (the Java client's settings, prefixed ``kafka.``)."""
        options = {"kafka.bootstrap.servers": self.bootstrap}
        if self.credentials:
            options |= {
                "kafka.security.protocol": self.credentials.security_protocol,
                "kafka.sasl.mechanism": self.credentials.mechanism,
                "kafka.sasl.jaas.config": self.credentials.jaas(),
            }
            if self.credentials.ca_pem:
                options |= {
                    "kafka.ssl.truststore.type": "PEM",
                    "kafka.ssl.truststore.certificates": self.credentials.ca_pem,
                }
        return options

    def registry(self) -> RegistryClient:
        """The registry's client: one per access, shared by its threads (making its HTTP client's TLS context costs
        ~8 ms of CPU: a fifth of the archiver driver's CPU over 40 light topics when each plan made its own)."""
        return self._registry

    @cached_property
    def _registry(self) -> RegistryClient:
        auth = None
        if self.credentials and self.credentials.registry_username:
            auth = (self.credentials.registry_username, self.credentials.registry_password or "")
        return RegistryClient(
            self.registry_url, auth=auth, ca_pem=self.credentials.ca_pem if self.credentials else None
        )


def kafka_access(endpoints: Endpoints, secrets: Any | None = None) -> KafkaAccess:
    """Addresses from ``endpoints``; credentials from the secret it names (read with the injected
    Secrets Manager client), or none when it names no secret (the local stack)."""
    if not endpoints.kafka_secret_arn:
        return KafkaAccess(endpoints.kafka_bootstrap, endpoints.schema_registry_url)
    if secrets is None:
        raise ValueError(f"reading {endpoints.kafka_secret_arn} needs a Secrets Manager client")
    value = secrets.get_secret_value(SecretId=endpoints.kafka_secret_arn)["SecretString"]
    credentials = Credentials.from_secret(value, endpoints.kafka_secret_arn)
    return KafkaAccess(endpoints.kafka_bootstrap, endpoints.schema_registry_url, credentials)
