"""Per-environment settings (``environments.yaml``): one typed file the CDK app and the local stack both read."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from kafkalake.config import repo_root


class EnvironmentSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    bucket: str
    queue_name: str
    dead_letter_queue_name: str
    event_bus_name: str
    max_receive_count: int = Field(default=5, ge=1)
    maintainer_timeout_seconds: int = Field(default=300, ge=30, le=900)
    maintainer_schedule_minutes: int = Field(default=10, ge=1)
    archiver_schedule_minutes: int = Field(default=20, ge=5)
    cache_ttl_seconds: int = Field(default=600, ge=0)
    completeness_delay_seconds: int = Field(default=900, ge=0)
    # Deployment (read by the CDK app only)
    account: str | None = None
    region: str = "eu-west-1"
    kafka_bootstrap: str = "kafka.internal:9092"
    schema_registry_url: str = "http://schema-registry.internal:8081"
    kafka_secret_arn: str | None = None
    """Secrets Manager secret with the Kafka/registry credentials; the archiver role may read only it."""
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    maintainer_layers: tuple[str, ...] = ()
    """Lambda layer ARNs with the maintainer's dependencies (Powertools, pydantic, pyarrow) for its runtime."""
    data_transition_days: int = Field(default=30, ge=30)
    quarantine_retention_days: int = Field(default=90, ge=1)
    staging_retention_days: int = Field(default=7, ge=1)

    @property
    def queue_visibility_timeout_seconds(self) -> int:
        """At least six times the Lambda timeout, as AWS recommends for queues a Lambda drains."""
        return 6 * self.maintainer_timeout_seconds


def load_environments(path: Path | None = None) -> dict[str, EnvironmentSettings]:
    """``environments.yaml`` at the repository root, or the file ``KAFKALAKE_ENVIRONMENTS`` names."""
    source = path or Path(os.environ.get("KAFKALAKE_ENVIRONMENTS", repo_root() / "environments.yaml"))
    raw = yaml.safe_load(source.read_text()) or {}
    return {name: EnvironmentSettings(name=name, **values) for name, values in raw.items()}
