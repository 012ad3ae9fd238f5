"""A topic's local workload, whatever its shape: a Debezium topic's is a change stream of a table
(``change_stream``), every other topic's the generic workload of its schemas (``workload``). The demo and the checks
that look for what was produced come through here."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from kafkalake.registry import RegistryClient
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import Envelope
from kafkalake_dev.local.change_stream import images, plan_changes, produce_changes, tally_changes
from kafkalake_dev.local.workload import Produced, plan_workload, produce_topic, tally


def produce(
    topic: Topic,
    bootstrap: str,
    registry: RegistryClient,
    records: int,
    *,
    start: datetime,
    hours: int,
    progress: Callable[[int], None] = lambda _: None,
) -> Produced:
    """Produce the topic's workload unless the topic already holds it; either way, say what it holds."""
    shaped = produce_changes if topic.spec.envelope == Envelope.DEBEZIUM else produce_topic
    return shaped(topic, bootstrap, registry, records, start=start, hours=hours, progress=progress)


def workload_tally(topic: Topic, records: int, *, start: datetime, hours: int) -> Produced:
    """What the topic's workload holds, decided without producing it."""
    if topic.spec.envelope == Envelope.DEBEZIUM:
        return tally_changes(topic, plan_changes(topic, records, start=start, hours=hours))
    return tally(topic, plan_workload(topic, records, start=start, hours=hours))


def workload_records(topic: Topic, records: int, *, start: datetime, hours: int) -> list[dict[str, Any]]:
    """The values the workload gives the topic's records (a change stream's: each of its ``before`` and ``after``
    images, under its name), for checks that look for them."""
    if topic.spec.envelope == Envelope.DEBEZIUM:
        return images(topic, records, start=start, hours=hours)
    return [p.record for p in plan_workload(topic, records, start=start, hours=hours)]
