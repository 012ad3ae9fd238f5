"""Catalog drift: what Kafka and the schema registry hold that the catalog does not say, and the reverse.

``observe`` reads the cluster's topics and their value subjects' versions; ``compare`` is pure. Every scheduled
archiver run publishes the comparison as metrics (``metric_data``), and ``kafkalake catalog drift`` prints it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from confluent_kafka.admin import AdminClient

from kafkalake.convention import DEFAULT_TOPIC_NAMING, OffConvention, TopicName, parse_topic_name
from kafkalake.kafka import list_topics
from kafkalake.kafka_access import KafkaAccess
from kafkalake.metrics import ENVIRONMENT_DIMENSION, SchemaDriftMetric
from kafkalake.registry import RegisteredSchema, RegistryClient, value_subject
from kafkalake.topic_catalog import Topic
from kafkalake.undeclared import protection

REGISTRY_LOOKUPS = 8
"""Subjects looked up at once: each lookup is a round trip or more (one per version), and every scheduled archiver
run makes one per cluster topic (measured, one after another: 1.2 s for 169 topics on the local registry)."""


@dataclass(frozen=True)
class ClusterView:
    """The cluster's topics and, per topic with a value subject, its registered versions (oldest first)."""

    topics: tuple[str, ...]
    versions: dict[str, tuple[RegisteredSchema, ...]] = field(default_factory=dict)


def observe(access: KafkaAccess, catalogued: Iterable[Topic] = ()) -> ClusterView:
    """Read the cluster's topics (Kafka admin) and their value subjects' versions (the registry), a ``catalogued``
    Protobuf topic's rendered with its ``message``."""
    messages = {t.kafka_topic: t.spec.message for t in catalogued if t.spec.message}
    return cluster_view(list_topics(AdminClient(dict(access.client_config()))), access.registry(), messages)


def cluster_view(
    topics: Iterable[str], registry: RegistryClient, messages: Mapping[str, str | None] | None = None
) -> ClusterView:
    """``topics`` with the versions of their value subjects, each subject looked up by its name: the registry's
    listing of all subjects may be incomplete (capped or paged), so it cannot tell that a subject is missing. A topic
    without one has no entry; a registry that fails raises ``RegistryError`` (never taken for a missing subject).
    ``messages``: the Protobuf message each topic's versions are rendered with (by default each file's first)."""
    names, chosen = tuple(topics), messages or {}
    with ThreadPoolExecutor(max_workers=REGISTRY_LOOKUPS, thread_name_prefix="registry") as pool:
        looked_up = pool.map(lambda topic: tuple(registry.versions(value_subject(topic), chosen.get(topic))), names)
        found = dict(zip(names, looked_up, strict=True))
    return ClusterView(names, {topic: versions for topic, versions in found.items() if versions})


@dataclass(frozen=True)
class Drift:
    env: str
    uncatalogued: tuple[TopicName, ...]
    """Topics following the environment's convention that no catalog entry names."""
    off_convention: tuple[OffConvention, ...]
    """Topics no catalog entry names that do not follow the convention, with the reason (those named for another
    environment are that environment's concern, not listed)."""
    missing_topics: tuple[str, ...]
    """Kafka topics of catalog entries that the cluster lacks."""
    missing_versions: dict[str, tuple[int, ...]]
    """Kafka topic → registry version numbers whose schema none of the entry's ``.avsc`` files holds."""
    held_versions: dict[str, dict[int, str]] = field(default_factory=dict)
    """Kafka topic → those of its missing versions whose records the archiver holds, with why
    (``kafkalake.undeclared``; the others are archived with their own tags honoured)."""

    def status(self, kafka_topic: str) -> str:
        """One catalogued topic's drift, for the inventory."""
        if kafka_topic in self.missing_topics:
            return "no such Kafka topic"
        if kafka_topic in self.missing_versions:
            versions = ", v".join(map(str, self.missing_versions[kafka_topic]))
            return f"registry has v{versions}, the catalog lacks it"
        return "in sync"

    @property
    def clean(self) -> bool:
        return not (self.uncatalogued or self.missing_topics or self.missing_versions)

    def lines(self) -> list[str]:
        """The comparison for people, one line per finding."""
        return [
            *(
                f"uncatalogued: {t.kafka_topic} (would be {t.company}/{t.domain}/{self.env}/{t.topic})"
                for t in self.uncatalogued
            ),
            *(f"off convention: {t.kafka_topic}: {t.reason}" for t in self.off_convention),
            *(f"no such topic in Kafka: {name}" for name in self.missing_topics),
            *(
                f"registry versions missing from the catalog: {name} v{', v'.join(map(str, numbers))}"
                for name, numbers in sorted(self.missing_versions.items())
            ),
            *(
                f"held by the archiver (restricted quarantine): {name} v{version}: {why}"
                for name, held in sorted(self.held_versions.items())
                for version, why in sorted(held.items())
            ),
        ]


def compare(view: ClusterView, topics: Iterable[Topic], env: str, convention: str = DEFAULT_TOPIC_NAMING) -> Drift:
    """The drift between the cluster and the environment's catalog entries ``topics``."""
    known = {t.kafka_topic: t for t in topics if t.env == env}
    parsed = [parse_topic_name(name, env, convention) for name in view.topics if name not in known]
    missing_versions, held_versions = {}, {}
    for name, topic in known.items():
        absent = [found for found in view.versions.get(name, ()) if not topic.declares(found.schema)]
        if absent:
            missing_versions[name] = tuple(found.version for found in absent)
        held = {found.version: protection(topic, found.schema).held(topic.needs_key) for found in absent}
        if any(held.values()):
            held_versions[name] = {version: why for version, why in held.items() if why is not None}
    return Drift(
        env,
        uncatalogued=tuple(p for p in parsed if isinstance(p, TopicName)),
        off_convention=tuple(p for p in parsed if isinstance(p, OffConvention) and p.other_env is None),
        missing_topics=tuple(sorted(set(known) - set(view.topics))),
        missing_versions=missing_versions,
        held_versions=held_versions,
    )


def metric_data(drift: Drift, now: datetime) -> list[dict[str, Any]]:
    """The comparison as CloudWatch data, per environment."""
    values = {
        SchemaDriftMetric.UNCATALOGUED_TOPICS: len(drift.uncatalogued),
        SchemaDriftMetric.OFF_CONVENTION_TOPICS: len(drift.off_convention),
        SchemaDriftMetric.MISSING_TOPICS: len(drift.missing_topics),
        SchemaDriftMetric.MISSING_SCHEMA_VERSIONS: sum(len(v) for v in drift.missing_versions.values()),
    }
    return [
        {
            "MetricName": name.value,
            "Dimensions": [{"Name": ENVIRONMENT_DIMENSION, "Value": drift.env}],
            "Timestamp": now,
            "Value": value,
            "Unit": "Count",
        }
        for name, value in values.items()
    ]
