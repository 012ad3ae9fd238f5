"""The naming convention that maps a Kafka topic name to its catalog place (company, domain, topic).

Per environment (``topic_naming`` in environments.yaml): a regular expression with the named groups ``company``,
``domain`` and ``topic`` and, optionally, ``env`` (which must then equal the environment's name). A topic that does
not follow it is reported with the reason, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from kafkalake.layout import NAME_PATTERN

DEFAULT_TOPIC_NAMING: Final = r"^(?P<env>[^.]+)\.(?P<company>[^.]+)\.(?P<domain>[^.]+)\.(?P<topic>[^.]+)$"
"""``<env>.<company>.<domain>.<topic>``: the Kafka topic name the catalog derives by default."""
REQUIRED_GROUPS: Final = ("company", "domain", "topic")


def checked_convention(pattern: str) -> str:
    """``pattern`` when it compiles and names the required groups; a ValueError saying what to fix otherwise."""
    try:
        groups = re.compile(pattern).groupindex
    except re.error as exc:
        raise ValueError(f"topic_naming {pattern!r} is not a regular expression ({exc})") from exc
    missing = [g for g in REQUIRED_GROUPS if g not in groups]
    if missing:
        raise ValueError(f"topic_naming {pattern!r} lacks the named group(s) {', '.join(missing)}: add (?P<name>...)")
    return pattern


@dataclass(frozen=True)
class TopicName:
    """A Kafka topic that follows the convention: where its catalog file goes."""

    kafka_topic: str
    company: str
    domain: str
    topic: str


@dataclass(frozen=True)
class OffConvention:
    """A Kafka topic that does not follow the convention, and why."""

    kafka_topic: str
    reason: str
    other_env: str | None = None
    """The environment the name says, when it follows the convention for another one."""
    part: str | None = None
    """The convention's group (company, domain, topic) whose value is not a catalog name."""

    @property
    def kind(self) -> str:
        """The reason without this topic's particulars, which the topics off the convention for the same reason
        share (a summary's heading)."""
        if self.other_env is not None:
            return "belong to another environment"
        if self.part is not None:
            return f"have a {self.part} that is not a catalog name"
        return "do not match the naming convention"


def is_internal(kafka_topic: str) -> bool:
    """Kafka's and the tooling's own topics (``__consumer_offsets``, ``_schemas``): never data to archive."""
    return kafka_topic.startswith("_")


def parse_topic_name(kafka_topic: str, env: str, pattern: str = DEFAULT_TOPIC_NAMING) -> TopicName | OffConvention:
    """Company, domain and topic of ``kafka_topic`` in ``env`` by the convention ``pattern``, or why not."""
    found = re.fullmatch(pattern, kafka_topic)
    if found is None:
        return OffConvention(kafka_topic, f"does not match the naming convention {pattern}")
    groups = found.groupdict()
    if groups.get("env") not in (None, env):
        return OffConvention(kafka_topic, f"belongs to environment {groups['env']!r}, not {env!r}", groups["env"])
    for group in REQUIRED_GROUPS:
        if not re.fullmatch(NAME_PATTERN, groups[group] or ""):
            return OffConvention(
                kafka_topic,
                f"its {group} {groups[group]!r} is not a catalog name (lower case letters, digits, '-', '_')",
                part=group,
            )
    return TopicName(kafka_topic, groups["company"], groups["domain"], groups["topic"])
