"""Where every endpoint is. One object; locally it points at the local stack, in AWS at the real services."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCAL_KAFKA_PORT = 19092
LOCAL_CONTROLLER_PORT = 19093
LOCAL_KAFKA_SASL_PORT = 19094
"""A SASL_PLAINTEXT (PLAIN) listener on the local broker, for credentials read from Secrets Manager."""
LOCAL_KAFKA_USER = ("kafkalake", "kafkalake-local-password")
LOCAL_REGISTRY_PORT = 18081
LOCAL_AWS_PORT = 15000
LOCAL_ACCESS_KEY = "testing"


@dataclass(frozen=True)
class Endpoints:
    kafka_bootstrap: str = f"127.0.0.1:{LOCAL_KAFKA_PORT}"
    schema_registry_url: str = f"http://127.0.0.1:{LOCAL_REGISTRY_PORT}/apis/ccompat/v7"
    aws_endpoint_url: str | None = f"http://127.0.0.1:{LOCAL_AWS_PORT}"
    """None in AWS: boto3 and S3A then use the real regional endpoints."""
    region: str = "eu-west-1"
    bucket: str = "kafkalake-local-lake"
    kafka_secret_arn: str | None = None
    """Secrets Manager secret with the Kafka (and registry) credentials; none on the local stack."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Endpoints:
        """Read ``KAFKALAKE_*`` variables (call it at run time, never at import time)."""
        env = os.environ if environ is None else environ
        defaults = cls()
        aws = env.get("KAFKALAKE_AWS_ENDPOINT_URL", defaults.aws_endpoint_url or "")
        return cls(
            kafka_bootstrap=env.get("KAFKALAKE_KAFKA_BOOTSTRAP", defaults.kafka_bootstrap),
            schema_registry_url=env.get("KAFKALAKE_SCHEMA_REGISTRY_URL", defaults.schema_registry_url),
            aws_endpoint_url=aws or None,
            region=env.get("KAFKALAKE_REGION", env.get("AWS_REGION", defaults.region)),
            bucket=env.get("KAFKALAKE_BUCKET", defaults.bucket),
            kafka_secret_arn=env.get("KAFKALAKE_KAFKA_SECRET_ARN") or None,
        )

    def boto3_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``boto3.client``; local credentials only when pointed at the local stack."""
        kwargs: dict[str, Any] = {"region_name": self.region}
        if self.aws_endpoint_url:
            kwargs |= {
                "endpoint_url": self.aws_endpoint_url,
                "aws_access_key_id": LOCAL_ACCESS_KEY,
                "aws_secret_access_key": LOCAL_ACCESS_KEY,
            }
        return kwargs


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Downloads (jars, registry, wheels) live here, outside the clone, so fresh clones reuse them."""
    env = os.environ if environ is None else environ
    return Path(env.get("KAFKALAKE_CACHE", Path.home() / ".cache" / "kafkalake")).expanduser()


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
