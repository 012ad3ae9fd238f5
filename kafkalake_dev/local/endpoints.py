"""The local stack's addresses and credentials: the only place local defaults live.

``local_endpoints`` returns the same ``KAFKALAKE_*`` settings the jobs read in AWS, filled with the local stack's
addresses (each can still be overridden by its variable); it changes nothing. Whoever talks to the local stack
asks for moto's test credentials explicitly: ``local_credentials`` for boto3's default chain in this process (and
the Spark JVM and Python workers started inside it), ``CREDENTIALS`` for a child process's environment,
``ACCESS_KEY`` for S3A.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from typing import Final

from kafkalake.endpoints import ENV_VARS, Endpoints

KAFKA_PORT: Final = 19092
CONTROLLER_PORT: Final = 19093
KAFKA_SASL_PORT: Final = 19094
"""A SASL_PLAINTEXT (PLAIN) listener on the local broker, for credentials read from Secrets Manager. The broker
authorizes with ACLs (``StandardAuthorizer``): the plaintext listener's ANONYMOUS is a super user and a resource with
no ACL is open to all, so only a test's own ACLs deny anything (say, Read of a topic to ``KAFKA_USER``)."""
KAFKA_TLS_PORT: Final = 19095
"""A SASL_SSL listener with SCRAM-SHA-512, as Amazon MSK's SCRAM listener and the Kafka secret's defaults
(``kafkalake.kafka_access.Credentials``), its certificate from the stack's own CA (``kafkalake_dev.local.tls``): the
secret's ``ca_pem`` is that CA's (``kafkalake_dev.local.stack.local_tls``)."""
KAFKA_MTLS_PORT: Final = 19096
"""A TLS listener that requires a client certificate (mutual TLS, as Amazon MSK's TLS client authentication): the
stack's client certificate (``kafkalake_dev.local.tls``) is the principal ``User:CN=kafkalake``."""
KAFKA_IAM_PORT: Final = 19098
"""A SASL_SSL listener with OAUTHBEARER that takes Amazon MSK IAM tokens only (as MSK's IAM listener on 9098): a
token signed as MSK's signers sign it (a SigV4-presigned ``kafka-cluster:Connect`` request), checked by
``java/MskIamValidator.java`` against the local credentials (every access key's secret is ``ACCESS_KEY``) for
``DEFAULTS.region``. Its principal is the signing role, ``User:archiver`` for the access key ``principal-archiver``
(``principals.principal_credentials``), so ACLs decide per topic and group as IAM policies do; certificate as
``KAFKA_TLS_PORT``'s."""
KAFKA_IAM_BRIEF_PORT: Final = 19099
"""``KAFKA_IAM_PORT``'s twin whose tokens count as expired ``IAM_BRIEF_TOKEN_SECONDS`` after signing (MSK's last 900 s)
and whose sessions end with their token: a client must sign again and re-authenticate, so a read that outlives a
token shows in seconds. Its clients set ``KAFKALAKE_KAFKA_TOKEN_SECONDS`` to ``IAM_BRIEF_TOLD_SECONDS``."""
IAM_BRIEF_TOKEN_SECONDS: Final = 15
IAM_BRIEF_TOLD_SECONDS: Final = 10
"""What the short-lived listener's clients are told a token lasts: less than it does, as a client may be told, so
they sign again 8 s after signing (80%) and a loaded machine has 7 s before the broker refuses the token."""
KAFKA_USER: Final = ("kafkalake", "kafkalake-local-password")
"""The user both SASL listeners admit (PLAIN on one, SCRAM-SHA-512 on the other)."""
REGISTRY_PORT: Final = 18081
REGISTRY_TLS_PORT: Final = 18443
"""The registry's HTTPS port, its certificate from the stack's own CA, as the broker's TLS listener's."""
AWS_PORT: Final = 15000
TRINO_PORT: Final = 18082
"""Trino for the interop check (``make interop``); started and stopped by that check only."""
ACCESS_KEY: Final = "testing"
LOCAL_BUCKET: Final = "kafkalake-local-lake"
LOCAL_PSEUDONYM_SECRET: Final = "kafkalake/local/pseudonym-key"  # noqa: S105 - the secret's name, not a secret
"""The local stack's HMAC key (``kafkalake.personal``), created by ``provision`` with random bytes."""
LOCAL_RESTRICTED_KEY_ALIAS: Final = "alias/kafkalake-local-restricted"
"""The KMS key the archiver writes restricted quarantine objects with locally, as the template's restricted key in
AWS. moto makes key ids at random, so the local provisioning (``kafkalake_dev.local.provision``) looks the key up
by this alias and hands its ARN on in the endpoints (``restricted_key_arn``)."""
LOCAL_ENV: Final = "staging"
"""The environment of environments.yaml the local commands work on unless told otherwise."""

DEFAULTS: Final = Endpoints(
    kafka_bootstrap=f"127.0.0.1:{KAFKA_PORT}",
    schema_registry_url=f"http://127.0.0.1:{REGISTRY_PORT}/apis/ccompat/v7",
    region="eu-west-1",
    bucket=LOCAL_BUCKET,
    aws_endpoint_url=f"http://127.0.0.1:{AWS_PORT}",
    pseudonym_secret_arn=LOCAL_PSEUDONYM_SECRET,
)
CREDENTIALS: Final = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": ACCESS_KEY}
"""moto accepts any credentials; these keep real ones from ever being sent to the local endpoint."""


@contextmanager
def environ_with(updates: Mapping[str, str], environ: MutableMapping[str, str] | None = None) -> Iterator[None]:
    """``updates`` in ``environ`` (the process environment by default) while the block runs, the previous values
    (or their absence) back after it."""
    target = os.environ if environ is None else environ
    previous = {name: target.get(name) for name in updates}
    target.update(updates)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                target.pop(name, None)
            else:
                target[name] = value


def local_credentials(environ: MutableMapping[str, str] | None = None) -> AbstractContextManager[None]:
    """moto's credentials in ``environ`` (the process environment by default) while the block runs: boto3's
    default chain reads them there, and Spark's JVM and Python workers started inside the block inherit them."""
    return environ_with(CREDENTIALS, environ)


def local_endpoints(bucket: str | None = None) -> Endpoints:
    """The local stack's endpoints, each overridable by its ``KAFKALAKE_*`` variable; ``bucket`` overrides both."""
    defaults = {var: value for var, value in DEFAULTS.to_env().items() if value}
    found = Endpoints.from_env({**defaults, **{v: os.environ[v] for v in ENV_VARS.values() if v in os.environ}})
    if bucket is None:
        return found
    return dataclasses.replace(found, bucket=bucket)
