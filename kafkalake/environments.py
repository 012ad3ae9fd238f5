"""Per-environment settings (``environments.yaml``): one typed file the CDK app and the local stack both read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from kafkalake.convention import DEFAULT_TOPIC_NAMING, checked_convention
from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import ARCHIVER_BUDGET_MINUTES
from kafkalake.lftags import Sensitivity

ROLE_ARN = r"^arn:aws(-[a-z]+)*:iam::\d{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$"
ARCHIVER_SCHEDULE_MINIMUM_MINUTES: Final = 5
"""The shortest ``archiver_schedule_minutes`` an environment may set; the default is chosen among the schedules this
allows by the cost model (bench/freshness.py)."""


class AlarmSubscription(BaseModel):
    """Where the stack's alarms go."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: Literal["email", "https"]
    endpoint: str = Field(min_length=3)


class Consumer(BaseModel):
    """A role that reads the lake through Lake Formation: the tables of the listed sensitivity levels, and their
    personal columns only with ``pii: true``. It has no S3 access of its own to the lake (``kafkalake access``
    prints what it may read)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")
    role_arn: str = Field(pattern=ROLE_ARN)
    sensitivity: tuple[Sensitivity, ...] = Field(min_length=1)
    pii: bool = False


class EnvironmentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    bucket: str
    queue_name: str
    dead_letter_queue_name: str
    event_bus_name: str
    max_receive_count: int = Field(default=5, ge=1)
    maintainer_timeout_seconds: int = Field(default=300, ge=30, le=900)
    maintainer_schedule_minutes: int = Field(default=10, ge=1)
    """How often the maintainer drains the queue, adding the Glue partitions that make Hive tables' new objects
    queryable; what a faster one buys: docs/benchmarks.md (the cost model's schedules)."""
    archiver_schedule_minutes: int = Field(default=8, ge=ARCHIVER_SCHEDULE_MINIMUM_MINUTES)
    """Chosen by the cost model (bench/freshness.py, README: Freshness and cost): the cheapest schedule that meets the
    freshness goals; a unit test keeps it equal to the adopted result's choice."""
    cache_ttl_seconds: int = Field(default=600, ge=0)
    completeness_delay_seconds: int = Field(default=900, ge=0)
    reconcile_schedule: str = Field(default="cron(30 3 * * ? *)", pattern=r"^(rate|cron)\(.+\)$")
    """When the reconciler compares S3 with Glue (an EventBridge schedule expression; daily by default)."""
    reconciler_timeout_seconds: int = Field(default=900, ge=60, le=900)
    # Deployment (read by the CDK app only)
    account: str | None = None
    region: str = "eu-west-1"
    kafka_bootstrap: str = "kafka.internal:9092"
    schema_registry_url: str = "http://schema-registry.internal:8081"
    kafka_secret_arn: str | None = None
    """Secrets Manager secret with the Kafka/registry credentials; the archiver role may read only it."""
    kafka_auth: Literal["msk_iam"] | None = None
    """``msk_iam``: Amazon MSK with IAM access control: the archiver's role signs, and is granted exactly the Kafka
    actions on ``msk_cluster_arn``, its catalog topics and its consumer groups (docs/deploying.md); the secret, if
    any, then holds only the registry's credentials and the brokers' CA."""
    msk_cluster_arn: str | None = Field(
        default=None, pattern=r"^arn:aws[a-z-]*:kafka:[a-z0-9-]+:[0-9]{12}:cluster/[A-Za-z0-9-]+/[A-Za-z0-9-]+$"
    )
    """The MSK cluster's ARN (``arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>``), with ``kafka_auth``."""
    pseudonym_secret_arn: str | None = None
    """Secrets Manager secret with the environment's HMAC key for pseudonyms and hashed erasure subjects."""
    subnet_ids: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    maintainer_layers: tuple[str, ...] = ()
    """Lambda layer ARNs with the maintainer's dependencies (Powertools, pydantic, pyarrow) for its runtime."""
    maintainer_reserved_concurrency: int | None = Field(default=None, ge=1)
    """Unset by default: reserving concurrency fails in accounts whose quota would leave under 10 unreserved.
    Draining stays single-flight without it: the schedule interval exceeds the timeout and failed invocations are
    not retried (they go to the dead-letter queue)."""
    archiver_timeout_minutes: int = Field(default=60, ge=5)
    archiver_budget_minutes: float = Field(default=ARCHIVER_BUDGET_MINUTES, gt=0)
    """No archiver plan starts after this; the job's timeout must leave time to finish the last one."""
    compactor_timeout_minutes: int = Field(default=120, ge=5)
    emr_max_vcpu: int = Field(default=32, ge=2)
    emr_max_memory_gb: int = Field(default=128, ge=4)
    emr_max_disk_gb: int = Field(default=1000, ge=20)
    scheduler_retry_attempts: int = Field(default=3, ge=0, le=185)
    scheduler_max_event_age_seconds: int = Field(default=3600, ge=60, le=86400)
    oldest_notification_alarm_seconds: int = Field(default=7200, ge=60)
    """Messages wait in the queue while a crawler runs; the alarm fires only well past the visibility timeout."""
    alarm_subscriptions: tuple[AlarmSubscription, ...] = ()
    data_transition_days: int = Field(default=30, ge=30)
    quarantine_retention_days: int = Field(default=90, ge=1)
    restricted_quarantine_retention_days: int = Field(default=14, ge=1)
    """How long raw quarantined records of topics with personal fields are kept (``restricted/quarantine/``)."""
    noncurrent_version_days: int = Field(default=7, ge=1)
    """How long the lake bucket keeps an overwritten or deleted object's old version."""
    consumers: tuple[Consumer, ...] = ()
    """Roles granted read access through Lake Formation by LF-tag expression (``kafkalake.permissions``)."""
    topic_naming: Annotated[str, AfterValidator(checked_convention)] = DEFAULT_TOPIC_NAMING
    """How a Kafka topic's name gives its catalog place (``kafkalake.convention``): for import and drift."""
    freshness_alarm_minutes: int = Field(default=30, ge=1)
    """The alarm fires when a drain makes data queryable whose newest Kafka record is older than this."""

    def endpoints(self) -> Endpoints:
        """What this environment's jobs talk to in AWS (regional AWS endpoints)."""
        return Endpoints(
            kafka_bootstrap=self.kafka_bootstrap,
            schema_registry_url=self.schema_registry_url,
            region=self.region,
            bucket=self.bucket,
            kafka_secret_arn=self.kafka_secret_arn,
            kafka_auth=self.kafka_auth,
            pseudonym_secret_arn=self.pseudonym_secret_arn,
        )

    @model_validator(mode="after")
    def _consistent(self) -> EnvironmentConfig:
        if (self.kafka_auth is None) != (self.msk_cluster_arn is None):
            raise ValueError(
                "kafka_auth: msk_iam and msk_cluster_arn go together: the archiver's role is granted the Kafka actions "
                "on that cluster's topics and groups; set both, or neither to use the Kafka secret's credentials"
            )
        if self.maintainer_schedule_minutes * 60 <= self.maintainer_timeout_seconds:
            raise ValueError(
                f"maintainer_schedule_minutes ({self.maintainer_schedule_minutes}) must exceed the timeout "
                f"({self.maintainer_timeout_seconds} s), so that two drains never overlap"
            )
        if self.oldest_notification_alarm_seconds <= self.queue_visibility_timeout_seconds:
            raise ValueError(
                f"oldest_notification_alarm_seconds ({self.oldest_notification_alarm_seconds}) must exceed the "
                f"queue's visibility timeout ({self.queue_visibility_timeout_seconds} s): messages wait that long "
                "in normal operation"
            )
        if self.archiver_budget_minutes >= self.archiver_timeout_minutes:
            raise ValueError("archiver_budget_minutes must be below archiver_timeout_minutes")
        for what in ("name", "role_arn"):
            values = [getattr(c, what) for c in self.consumers]
            if repeated := sorted({v for v in values if values.count(v) > 1}):
                raise ValueError(f"consumers: {what} {', '.join(repeated)} listed twice; give each consumer its own")
        return self

    @property
    def queue_visibility_timeout_seconds(self) -> int:
        """At least six times the Lambda timeout, as AWS recommends for queues a Lambda drains."""
        return 6 * self.maintainer_timeout_seconds


class EnvironmentsInvalid(ValueError):
    """An ``environments.yaml`` entry kafkalake cannot use: the message names the file, the environment and each
    field with what is wrong with it."""


def load_environments(path: Path) -> dict[str, EnvironmentConfig]:
    """Every environment of an ``environments.yaml``; ``EnvironmentsInvalid`` naming every problem of every
    environment otherwise."""
    raw = yaml.safe_load(path.read_text()) or {}
    found, problems = {}, []
    for name, values in raw.items():
        try:
            found[name] = EnvironmentConfig(name=name, **(values or {}))
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(part) for part in error["loc"]) or "(the entry)"
                problems.append(f"{path}: {name}: {where}: {error['msg']}")
    if problems:
        raise EnvironmentsInvalid("\n".join(problems))
    return found
