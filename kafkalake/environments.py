"""Per-environment settings (``environments.yaml``): one typed file the CDK app and the local stack both read."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from kafkalake.settings import Endpoints


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

    def endpoints(self) -> Endpoints:
        """What this environment's jobs talk to in AWS (regional AWS endpoints)."""
        return Endpoints(
            kafka_bootstrap=self.kafka_bootstrap,
            schema_registry_url=self.schema_registry_url,
            region=self.region,
            bucket=self.bucket,
            kafka_secret_arn=self.kafka_secret_arn,
        )

    @property
    def queue_visibility_timeout_seconds(self) -> int:
        """At least six times the Lambda timeout, as AWS recommends for queues a Lambda drains."""
        return 6 * self.maintainer_timeout_seconds


def load_environments(path: Path) -> dict[str, EnvironmentSettings]:
    """Every environment of an ``environments.yaml``."""
    raw = yaml.safe_load(path.read_text()) or {}
    return {name: EnvironmentSettings(name=name, **values) for name, values in raw.items()}
