"""Where the jobs' services are: one typed model, read from ``KAFKALAKE_*`` variables once at start.

No defaults point anywhere: a variable missing in AWS is an error that names it, never a silent fall-back to a
laptop. Local defaults live in the dev tooling (``kafkalake_dev.local``), which fills the same variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Final, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class SettingsError(ValueError):
    """A required setting is missing or empty; the message names the variable and how to set it."""


ENV_VARS: Final = {
    "kafka_bootstrap": "KAFKALAKE_KAFKA_BOOTSTRAP",
    "schema_registry_url": "KAFKALAKE_SCHEMA_REGISTRY_URL",
    "region": "KAFKALAKE_REGION",
    "bucket": "KAFKALAKE_BUCKET",
    "aws_endpoint_url": "KAFKALAKE_AWS_ENDPOINT_URL",
    "kafka_secret_arn": "KAFKALAKE_KAFKA_SECRET_ARN",
    "pseudonym_secret_arn": "KAFKALAKE_PSEUDONYM_SECRET_ARN",
    "restricted_key_arn": "KAFKALAKE_RESTRICTED_KEY_ARN",
}
"""Field → environment variable: the one list the jobs, the job specification and the dev tooling use."""
OPTIONAL: Final = frozenset({"aws_endpoint_url", "kafka_secret_arn", "pseudonym_secret_arn", "restricted_key_arn"})


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
    pseudonym_secret_arn: str | None = None
    """Secrets Manager secret with the environment's HMAC key (``kafkalake.personal``); needed only when a topic
    has personal fields or erasure requests are hashed."""
    restricted_key_arn: str | None = None
    """The KMS key the archiver writes restricted quarantine objects with (SSE-KMS); None: the bucket's default
    encryption (the local stack)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Endpoints:
        """Read the ``KAFKALAKE_*`` variables (``AWS_REGION`` stands in for the region); raise ``SettingsError``
        naming every required variable that is missing."""
        values = {name: environ.get(var) or None for name, var in ENV_VARS.items()}
        values["region"] = values["region"] or environ.get("AWS_REGION") or None
        missing = [ENV_VARS[name] for name, value in values.items() if value is None and name not in OPTIONAL]
        if missing:
            raise SettingsError(
                f"missing setting(s) {', '.join(missing)}: the job specification sets them for EMR Serverless "
                "(kafkalake.jobspec); locally the dev tooling does (kafkalake_dev.local)"
            )
        return cls(**values)  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The variables ``from_env`` reads back (an unset optional one as an empty string)."""
        return {ENV_VARS[f.name]: getattr(self, f.name) or "" for f in fields(self)}


TABLES_FILE: Final = "tables.json"
"""The catalog as the Lambdas need it, bundled in the ``lambdas`` package (relative paths are relative to it)."""


class LambdaEnvironment(BaseModel):
    """A Lambda's environment: set by the stack (``to_env``), validated once, at the first invocation."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    bucket: str = Field(alias="KAFKALAKE_BUCKET", min_length=1)
    region: str = Field(alias="AWS_REGION", min_length=1)
    """Set by the Lambda runtime."""
    tables_file: str = Field(alias="KAFKALAKE_TABLES_FILE", default=TABLES_FILE)
    aws_endpoint_url: str | None = Field(alias="KAFKALAKE_AWS_ENDPOINT_URL", default=None)
    """Absent in AWS (the regional endpoints); only the dev tooling sets it (the local stack)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Self:
        """Validate the variables; raise ``SettingsError`` naming each missing or invalid one."""
        aliases = {f.alias for f in cls.model_fields.values()}
        present = {k: v for k, v in environ.items() if k in aliases and v != ""}
        try:
            return cls.model_validate(present)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise SettingsError(f"{cls.__name__}: {problems} (the stack sets these variables)") from exc

    def to_env(self) -> dict[str, str]:
        """The variables, as the stack sets them: the runtime's own ``AWS_REGION`` left out, and an unset optional
        one absent (no ``KAFKALAKE_AWS_ENDPOINT_URL`` in AWS: the regional endpoints)."""
        values = self.model_dump(by_alias=True, exclude={"region"}, exclude_none=True)
        return {name: str(value) for name, value in values.items()}


class ReconcilerEnvironment(LambdaEnvironment):
    """The reconciler Lambda's environment: the bucket and the bundled tables are all it needs."""


class MaintainerEnvironment(LambdaEnvironment):
    """The maintainer Lambda's environment."""

    env: str = Field(alias="KAFKALAKE_ENV", min_length=1)
    """The environment the function serves (its data keys' ``<env>`` segment); keys of others are ignored."""
    queue_url: str = Field(alias="KAFKALAKE_QUEUE_URL", min_length=1)
    event_bus: str = Field(alias="KAFKALAKE_EVENT_BUS", min_length=1)
    max_messages: int = Field(alias="KAFKALAKE_MAX_MESSAGES", default=10_000, ge=1)
    safety_margin_ms: int = Field(alias="KAFKALAKE_SAFETY_MARGIN_MS", default=30_000, ge=0)
    cache_ttl_seconds: float = Field(alias="KAFKALAKE_CACHE_TTL_SECONDS", default=600.0, ge=0)
    completeness_delay_seconds: float = Field(alias="KAFKALAKE_COMPLETENESS_DELAY_SECONDS", default=900.0, ge=0)
