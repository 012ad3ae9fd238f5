"""The Lambdas' environments: what the stack sets (``to_env``) and each function validates once, at its first
invocation, and the tables document bundled beside the functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class LambdaEnvironmentError(ValueError):
    """A Lambda's variable or its bundled tables document is missing or invalid; the message names which."""


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
        """Validate the variables; raise ``LambdaEnvironmentError`` naming each missing or invalid one."""
        aliases = {f.alias for f in cls.model_fields.values()}
        present = {k: v for k, v in environ.items() if k in aliases and v != ""}
        try:
            return cls.model_validate(present)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise LambdaEnvironmentError(f"{cls.__name__}: {problems} (the stack sets these variables)") from exc

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
