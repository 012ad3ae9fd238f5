"""Where the jobs' services are: one typed model, read from ``KAFKALAKE_*`` variables once at start.

No defaults point anywhere: a variable missing in AWS is an error that names it, never a silent fall-back to a
laptop. Local defaults live in the dev tooling (``kafkalake_dev.local.endpoints``), which fills the same variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Final


class EndpointsError(ValueError):
    """A required ``KAFKALAKE_*`` variable is missing or empty; the message names the variable and how to set it."""


ENV_VARS: Final = {
    "kafka_bootstrap": "KAFKALAKE_KAFKA_BOOTSTRAP",
    "schema_registry_url": "KAFKALAKE_SCHEMA_REGISTRY_URL",
    "region": "KAFKALAKE_REGION",
    "bucket": "KAFKALAKE_BUCKET",
    "aws_endpoint_url": "KAFKALAKE_AWS_ENDPOINT_URL",
    "kafka_secret_arn": "KAFKALAKE_KAFKA_SECRET_ARN",
    "kafka_auth": "KAFKALAKE_KAFKA_AUTH",
    "kafka_token_seconds": "KAFKALAKE_KAFKA_TOKEN_SECONDS",
    "pseudonym_secret_arn": "KAFKALAKE_PSEUDONYM_SECRET_ARN",
    "restricted_key_arn": "KAFKALAKE_RESTRICTED_KEY_ARN",
}
"""Field → environment variable: the one list the jobs, the job specification and the dev tooling use."""
OPTIONAL: Final = frozenset(
    {
        "aws_endpoint_url",
        "kafka_secret_arn",
        "kafka_auth",
        "kafka_token_seconds",
        "pseudonym_secret_arn",
        "restricted_key_arn",
    }
)
MSK_TOKEN_SECONDS: Final = 900
"""How long an MSK IAM token is valid after signing: what both signers sign for (Python's and Java's, fixed)."""
MIN_TOKEN_SECONDS: Final = 5


@dataclass(frozen=True)
class Endpoints:
    """The services one environment's jobs talk to."""

    kafka_bootstrap: str
    schema_registry_url: str
    region: str
    bucket: str
    aws_endpoint_url: str | None = None
    """None in AWS: boto3 and S3A use the regional endpoints. Only the dev tooling sets it."""
    kafka_secret_arn: str | None = None
    """Secrets Manager secret with the Kafka (and registry) credentials; None when the cluster needs none."""
    kafka_auth: str | None = None
    """``msk_iam``: Amazon MSK with IAM access control, the job's role signing (``kafkalake.kafka_access``); None:
    the secret's credentials, if any."""
    kafka_token_seconds: int | None = None
    """With ``msk_iam``: how long the clients count a token valid after signing, so they sign again at 80% of it
    (None: ``MSK_TOKEN_SECONDS``, what MSK honours). Only a cluster honouring tokens for less needs it: the local
    stack's short-lived IAM listener, where tests show a read outlives its tokens."""
    pseudonym_secret_arn: str | None = None
    """Secrets Manager secret with the environment's HMAC key (``kafkalake.personal``); needed only when a topic
    has personal fields or erasure requests are hashed."""
    restricted_key_arn: str | None = None
    """The KMS key the archiver writes restricted quarantine objects with (SSE-KMS); None: the bucket's default
    encryption."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Endpoints:
        """Read the ``KAFKALAKE_*`` variables (``AWS_REGION`` stands in for the region); raise ``EndpointsError``
        naming every required variable that is missing."""
        values: dict[str, str | int | None] = {name: environ.get(var) or None for name, var in ENV_VARS.items()}
        values["region"] = values["region"] or environ.get("AWS_REGION") or None
        values["kafka_token_seconds"] = _token_seconds(environ.get(ENV_VARS["kafka_token_seconds"]) or None)
        missing = [ENV_VARS[name] for name, value in values.items() if value is None and name not in OPTIONAL]
        if missing:
            raise EndpointsError(
                f"missing setting(s) {', '.join(missing)}: the job specification sets them for EMR Serverless "
                "(kafkalake.jobspec); locally the dev tooling does (kafkalake_dev.local.endpoints)"
            )
        return cls(**values)  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The variables ``from_env`` reads back (an unset optional one as an empty string)."""
        return {ENV_VARS[f.name]: str(getattr(self, f.name) or "") for f in fields(self)}


def _token_seconds(value: str | None) -> int | None:
    variable = ENV_VARS["kafka_token_seconds"]
    if value is None:
        return None
    if not value.isdigit() or not MIN_TOKEN_SECONDS <= int(value) <= MSK_TOKEN_SECONDS:
        raise EndpointsError(
            f"{variable}={value!r} is not a number of seconds from {MIN_TOKEN_SECONDS} to {MSK_TOKEN_SECONDS}: "
            "leave it unset for MSK, whose tokens last 900 s"
        )
    return int(value)
