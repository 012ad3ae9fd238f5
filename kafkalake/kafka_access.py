"""How the jobs reach Kafka and the schema registry: addresses from configuration, credentials from AWS Secrets
Manager (the secret ``kafka_secret_arn`` in environments.yaml names), never from code.

The secret is a JSON object, for SASL::

    {"username": "...", "password": "...",                      # Kafka SASL
     "mechanism": "SCRAM-SHA-512", "security_protocol": "SASL_SSL", # optional; these are the defaults
     "ca_pem": "-----BEGIN CERTIFICATE-----...",                  # optional: the brokers' CA, with TLS
     "registry_username": "...", "registry_password": "..."}      # optional: schema registry basic auth

or, for TLS with a client certificate (mutual TLS, as Amazon MSK's TLS client authentication)::

    {"security_protocol": "SSL",
     "certificate_pem": "-----BEGIN CERTIFICATE-----...",         # the client's certificate, then its chain
     "key_pem": "-----BEGIN PRIVATE KEY-----...",                 # its key: PKCS#8, unencrypted
     "ca_pem": "...", "registry_username": "...", "registry_password": "..."}   # optional, as above

For Amazon MSK with IAM access control (``kafka_auth: msk_iam`` in environments.yaml; MSK Serverless has nothing
else), no Kafka credential is stored anywhere: the job's role signs a short-lived token for each connection
(``MskIamToken``) and the brokers check it against IAM. The secret is then optional and may hold only
``registry_username``, ``registry_password`` and ``ca_pem``.

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

from kafkalake.endpoints import MSK_TOKEN_SECONDS, Endpoints
from kafkalake.registry import RegistryClient

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
SASL_PROTOCOLS = ("SASL_SSL", "SASL_PLAINTEXT")
MUTUAL_TLS = "SSL"
PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"
PEM_KEY = "-----BEGIN PRIVATE KEY-----"
SASL_FIELDS = ("username", "password", "mechanism")
MUTUAL_TLS_FIELDS = ("certificate_pem", "key_pem")


class CredentialsInvalid(ValueError):
    """The Kafka credentials secret is missing a field or has a value kafkalake cannot use."""


@dataclass(frozen=True)
class Credentials:
    username: str = ""
    password: str = ""
    mechanism: str = "SCRAM-SHA-512"
    security_protocol: str = "SASL_SSL"
    ca_pem: str | None = None
    certificate_pem: str | None = None
    key_pem: str | None = None
    registry_username: str | None = None
    registry_password: str | None = None

    @property
    def mutual_tls(self) -> bool:
        return self.security_protocol == MUTUAL_TLS

    @classmethod
    def from_secret(cls, secret_string: str, source: str) -> Credentials:
        fields = secret_fields(secret_string, source)
        mutual = fields.get("security_protocol") == MUTUAL_TLS
        needed, foreign = (MUTUAL_TLS_FIELDS, SASL_FIELDS) if mutual else (("username", "password"), MUTUAL_TLS_FIELDS)
        missing = [k for k in needed if not fields.get(k)]
        unknown = sorted((set(fields) - set(cls.__dataclass_fields__)) | (set(fields) & set(foreign)))
        if missing or unknown:
            kind = "TLS with a client certificate" if mutual else "SASL"
            raise CredentialsInvalid(
                f"secret {source} ({kind}): missing {missing or 'nothing'}, unknown {unknown or 'nothing'}; "
                f"expected keys: {', '.join(k for k in cls.__dataclass_fields__ if k not in foreign)}"
            )
        return cls(**fields).checked(source)

    def checked(self, source: str) -> Credentials:
        """These credentials, or ``CredentialsInvalid`` saying which value kafkalake cannot use."""
        if self.security_protocol not in (*SASL_PROTOCOLS, MUTUAL_TLS):
            raise CredentialsInvalid(
                f"secret {source}: security_protocol {self.security_protocol!r} is not one of "
                f"{', '.join((*SASL_PROTOCOLS, MUTUAL_TLS))}"
            )
        if not self.mutual_tls and self.mechanism not in LOGIN_MODULES:
            raise CredentialsInvalid(
                f"secret {source}: mechanism {self.mechanism!r} is not one of {', '.join(LOGIN_MODULES)}"
            )
        tls = self.security_protocol in ("SASL_SSL", MUTUAL_TLS)
        if self.ca_pem is not None and (not tls or not _pem(self.ca_pem, PEM_CERTIFICATE)):
            raise CredentialsInvalid(
                f"secret {source}: ca_pem must be the brokers' CA certificate in PEM (beginning {PEM_CERTIFICATE}), "
                "with security_protocol SASL_SSL or SSL; leave it out to trust the system's CAs"
            )
        if self.mutual_tls and not (_pem(self.certificate_pem, PEM_CERTIFICATE) and _pem(self.key_pem, PEM_KEY)):
            raise CredentialsInvalid(
                f"secret {source}: certificate_pem must be the client's certificate in PEM (beginning "
                f"{PEM_CERTIFICATE}) and key_pem its unencrypted PKCS#8 key (beginning {PEM_KEY}; "
                "`openssl pkcs8 -topk8 -nocrypt` converts one)"
            )
        return self

    def jaas(self) -> str:
        def quoted(value: str) -> str:
            return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

        module = LOGIN_MODULES[self.mechanism]
        return f"{module} required username={quoted(self.username)} password={quoted(self.password)};"


MSK_IAM = "msk_iam"
"""``kafka_auth`` of an Amazon MSK cluster with IAM access control."""
KAFKA_AUTHS = (MSK_IAM,)
REGISTRY_ONLY_FIELDS = ("registry_username", "registry_password", "ca_pem")
"""What the secret may hold with IAM access control: the registry's credentials and the brokers' CA."""
MSK_IAM_SPARK_OPTIONS = {
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "OAUTHBEARER",
    "kafka.sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
    "kafka.sasl.login.callback.handler.class": "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler",
    "kafka.sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler",
}
"""Spark's Kafka source on MSK with IAM (``software.amazon.msk:aws-msk-iam-auth``, shipped with the connectors): its
login handler signs with the AWS SDK's default credentials and region (the job's role, ``AWS_REGION``) and signs
again before each token expires."""


def msk_iam_spark_options(token_seconds: int) -> dict[str, str]:
    """``MSK_IAM_SPARK_OPTIONS``, and for tokens honoured ``token_seconds`` (less than the signer's 900) a refresh
    at 80% of that: Kafka's login refreshes ``buffer`` seconds before the signed expiry (its rule when the 80% point
    falls inside that buffer), at least a second apart."""
    if token_seconds >= MSK_TOKEN_SECONDS:
        return MSK_IAM_SPARK_OPTIONS
    return MSK_IAM_SPARK_OPTIONS | {
        "kafka.sasl.login.refresh.buffer.seconds": str(MSK_TOKEN_SECONDS - token_seconds * 4 // 5),
        "kafka.sasl.login.refresh.min.period.seconds": "1",
    }


@dataclass(frozen=True)
class MskIamToken:
    """librdkafka's ``oauth_cb`` for MSK with IAM: a token signed with the default AWS credentials (the job's role)
    for ``region`` (``aws-msk-iam-sasl-signer-python``), and when it expires: ``token_seconds`` after signing, at
    most the signer's 900. librdkafka asks again at 80% of that lifetime, so a read longer than a token's lifetime
    goes on. A class, so it pickles to the task reader's executors by name."""

    region: str
    token_seconds: int = MSK_TOKEN_SECONDS

    def __call__(self, _config: str | None = None) -> tuple[str, float]:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider  # the jobs' dependency; imported where it signs

        token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(self.region)
        expiry = expiry_ms / 1000
        return token, expiry - MSK_TOKEN_SECONDS + min(self.token_seconds, MSK_TOKEN_SECONDS)


def _pem(value: str | None, begins: str) -> bool:
    return value is not None and value.lstrip().startswith(begins)


@dataclass(frozen=True)
class KafkaAccess:
    bootstrap: str
    registry_url: str
    credentials: Credentials | None = None
    iam_region: str | None = None
    """MSK with IAM access control: the region the tokens are signed for; None: the secret's credentials, if any."""
    iam_token_seconds: int = MSK_TOKEN_SECONDS
    """With IAM: how long the cluster honours a token after signing (``Endpoints.kafka_token_seconds``)."""

    def client_config(self) -> dict[str, Any]:
        """librdkafka (confluent-kafka) settings."""
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap}
        found = self.credentials
        if self.iam_region is not None:
            config |= {"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER"}
            config["oauth_cb"] = MskIamToken(self.iam_region, self.iam_token_seconds)
            if found is not None and found.ca_pem:
                config["ssl.ca.pem"] = found.ca_pem
            return config
        if found is None:
            return config
        config["security.protocol"] = found.security_protocol
        if found.mutual_tls:
            config |= {"ssl.certificate.pem": found.certificate_pem or "", "ssl.key.pem": found.key_pem or ""}
        else:
            config |= {
                "sasl.mechanisms": found.mechanism,
                "sasl.username": found.username,
                "sasl.password": found.password,
            }
        if found.ca_pem:
            config["ssl.ca.pem"] = found.ca_pem
        return config

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source (the Java client's settings, prefixed ``kafka.``)."""
        options = {"kafka.bootstrap.servers": self.bootstrap}
        found = self.credentials
        if self.iam_region is not None:
            options |= msk_iam_spark_options(self.iam_token_seconds)
            if found is not None and found.ca_pem:
                options |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.certificates": found.ca_pem}
            return options
        if found is None:
            return options
        options["kafka.security.protocol"] = found.security_protocol
        if found.mutual_tls:
            options |= {
                "kafka.ssl.keystore.type": "PEM",
                "kafka.ssl.keystore.certificate.chain": found.certificate_pem or "",
                "kafka.ssl.keystore.key": found.key_pem or "",
            }
        else:
            options |= {"kafka.sasl.mechanism": found.mechanism, "kafka.sasl.jaas.config": found.jaas()}
        if found.ca_pem:
            options |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.certificates": found.ca_pem}
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
    Secrets Manager client), or none when it names no secret (the local stack); with ``kafka_auth: msk_iam``, tokens
    the job's role signs for the endpoints' region, and from the secret, if any, only the registry's credentials
    and the brokers' CA."""
    if endpoints.kafka_auth not in (None, *KAFKA_AUTHS):
        raise CredentialsInvalid(
            f"kafka_auth {endpoints.kafka_auth!r} is not one of {', '.join(KAFKA_AUTHS)}: leave it out to use the "
            "Kafka secret's credentials"
        )
    iam_region = endpoints.region if endpoints.kafka_auth == MSK_IAM else None
    credentials = None
    if endpoints.kafka_secret_arn:
        if secrets is None:
            raise ValueError(f"reading {endpoints.kafka_secret_arn} needs a Secrets Manager client")
        value = secrets.get_secret_value(SecretId=endpoints.kafka_secret_arn)["SecretString"]
        read = Credentials.from_secret if iam_region is None else registry_credentials
        credentials = read(value, endpoints.kafka_secret_arn)
    token_seconds = endpoints.kafka_token_seconds or MSK_TOKEN_SECONDS
    return KafkaAccess(endpoints.kafka_bootstrap, endpoints.schema_registry_url, credentials, iam_region, token_seconds)


def registry_credentials(secret_string: str, source: str) -> Credentials:
    """With IAM access control, the secret's registry credentials and CA; any Kafka credential in it is refused, as
    the job's role is what authenticates."""
    fields = secret_fields(secret_string, source)
    unknown = sorted(set(fields) - set(REGISTRY_ONLY_FIELDS))
    if unknown:
        raise CredentialsInvalid(
            f"secret {source}: with kafka_auth: {MSK_IAM} the job's role authenticates to Kafka, so the secret holds "
            f"only {', '.join(REGISTRY_ONLY_FIELDS)}; remove {', '.join(unknown)}"
        )
    return Credentials(security_protocol="SASL_SSL", **fields).checked(source)


def secret_fields(secret_string: str, source: str) -> dict[str, Any]:
    """The secret's JSON object, or ``CredentialsInvalid`` saying what it is instead."""
    try:
        fields = json.loads(secret_string)
    except json.JSONDecodeError as exc:
        raise CredentialsInvalid(f"secret {source} is not JSON ({exc}); store a JSON object") from exc
    if not isinstance(fields, dict):
        raise CredentialsInvalid(f"secret {source} must be a JSON object, not {type(fields).__name__}")
    return fields
