"""The local stack's addresses and credentials: the only place local defaults live.

``local_endpoints`` fills the same ``KAFKALAKE_*`` settings the jobs read in AWS with the local stack's addresses
(each can still be overridden by the variable), and gives boto3, S3A and the Spark workers moto's test credentials.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import MutableMapping
from typing import Final

from kafkalake.settings import ENV_VARS, Endpoints

KAFKA_PORT: Final = 19092
CONTROLLER_PORT: Final = 19093
KAFKA_SASL_PORT: Final = 19094
"""A SASL_PLAINTEXT (PLAIN) listener on the local broker, for credentials read from Secrets Manager."""
KAFKA_USER: Final = ("kafkalake", "kafkalake-local-password")
REGISTRY_PORT: Final = 18081
AWS_PORT: Final = 15000
TRINO_PORT: Final = 18082
"""Trino for the interop check (``make interop``); started and stopped by that check only."""
ACCESS_KEY: Final = "testing"
LOCAL_BUCKET: Final = "kafkalake-local-lake"

DEFAULTS: Final = Endpoints(
    kafka_bootstrap=f"127.0.0.1:{KAFKA_PORT}",
    schema_registry_url=f"http://127.0.0.1:{REGISTRY_PORT}/apis/ccompat/v7",
    region="eu-west-1",
    bucket=LOCAL_BUCKET,
    aws_endpoint_url=f"http://127.0.0.1:{AWS_PORT}",
)
CREDENTIALS: Final = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": ACCESS_KEY}
"""moto accepts any credentials; these keep real ones from ever being sent to the local endpoint."""


def use_local_credentials(environ: MutableMapping[str, str] | None = None) -> None:
    """Put moto's credentials in the process environment (inherited by Spark's JVM and Python workers)."""
    (os.environ if environ is None else environ).update(CREDENTIALS)


def local_endpoints(bucket: str | None = None) -> Endpoints:
    """The local stack's endpoints, each overridable by its ``KAFKALAKE_*`` variable; ``bucket`` overrides both."""
    defaults = {var: value for var, value in DEFAULTS.to_env().items() if value}
    found = Endpoints.from_env({**defaults, **{v: os.environ[v] for v in ENV_VARS.values() if v in os.environ}})
    use_local_credentials()
    if bucket is None:
        return found
    return dataclasses.replace(found, bucket=bucket)
