"""A Debezium change stream of a ``customers`` table on the local stack, for the upsert tests: its Envelope schemas
(the row gains ``phone`` in the second), its key schema, and a producer that computes the state it leaves."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

from confluent_kafka import Producer

from kafkalake.endpoints import Endpoints
from kafkalake.registry import RegistryClient, key_subject
from kafkalake.topic_catalog import Topic
from kafkalake.wire import encode
from tests.integration.archive_helpers import topic_with_schema

NAMESPACE = "dbserver1.inventory.customers"
ROW = {
    "type": "record",
    "name": "Value",
    "namespace": NAMESPACE,
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "email", "type": ["null", "string"], "default": None},
        {"name": "tier", "type": "int"},
    ],
}
ROW_V2 = {**ROW, "fields": [*ROW["fields"], {"name": "phone", "type": ["null", "string"], "default": None}]}


def envelope(row: dict[str, Any]) -> dict[str, Any]:
    """A Debezium Envelope of ``row``'s record (PostgreSQL's source, without its other fields)."""
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": NAMESPACE,
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", f"{NAMESPACE}.Value"], "default": None},
            {
                "name": "source",
                "type": {
                    "type": "record",
                    "name": "Source",
                    "namespace": "io.debezium.connector.postgresql",
                    "fields": [
                        {"name": "ts_ms", "type": "long"},
                        {"name": "lsn", "type": ["null", "long"], "default": None},
                        {"name": "db", "type": "string"},
                    ],
                },
            },
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


ENVELOPE, ENVELOPE_V2 = envelope(ROW), envelope(ROW_V2)
KEY = {"type": "record", "name": "Key", "namespace": NAMESPACE, "fields": [{"name": "id", "type": "long"}]}


@dataclasses.dataclass
class ChangeStream:
    """Debezium events produced to the topic, keyed by ``id`` (each id in partition ``id % 3``), and the table's state
    they leave (id → row), computed from the stream as produced."""

    topic: Topic
    endpoints: Endpoints
    state: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    produced: int = 0
    lsn: int = 0

    def __post_init__(self) -> None:
        self.envelope = ENVELOPE
        self.value_id = topic_with_schema(self.endpoints, self.topic, json.dumps(ENVELOPE))
        registry = RegistryClient(self.endpoints.schema_registry_url)
        self.key_id = registry.register(key_subject(self.topic.kafka_topic), json.dumps(KEY))
        self.producer = Producer({"bootstrap.servers": self.endpoints.kafka_bootstrap})

    def send(self, key: int, op: str | None, row: dict[str, Any] | None = None, **extra: Any) -> None:
        """One event: ``op`` c/r/u with ``row``, d (its before from the state), None a tombstone."""
        self.lsn += 1
        value = None
        if op is not None:
            event = {
                "before": self.state.get(key) if op in ("u", "d") else None,
                "after": row if op != "d" else None,
                "source": {"ts_ms": 1_700_000_000_000 + self.lsn, "lsn": self.lsn, "db": "inventory"},
                "op": op,
                "ts_ms": None,
            }
            value = encode(self.value_id, json.dumps(self.envelope), event)
        framed_key = encode(self.key_id, json.dumps(KEY), {"id": key})
        self.producer.produce(
            self.topic.kafka_topic, key=framed_key, value=value, partition=extra.get("partition", key % 3)
        )
        self.produced += 1
        if op in ("c", "r", "u"):
            assert row is not None
            self.state[key] = row
        else:
            self.state.pop(key, None)

    def evolve(self, envelope: dict[str, Any]) -> None:
        """Later events in ``envelope``, registered as the value subject's next version."""
        self.envelope = envelope
        self.value_id = topic_with_schema(self.endpoints, self.topic, json.dumps(envelope))

    def random_changes(self, count: int, seed: int) -> None:
        chosen = random.Random(seed)
        for _ in range(count):
            key = chosen.randint(1, 40)
            if key not in self.state:
                self.send(key, "c", customer(key, chosen.randint(0, 999)))
            elif chosen.random() < 0.7:
                self.send(key, "u", customer(key, chosen.randint(0, 999)))
            elif chosen.random() < 0.5:
                self.send(key, "d")
                if chosen.random() < 0.6:  # Debezium's tombstone after the delete
                    self.send(key, None)
            else:
                self.send(key, None)  # a tombstone alone (log compaction's delete)
        assert self.producer.flush(30) == 0


def customer(key: int, tier: int) -> dict[str, Any]:
    return {"id": key, "name": f"customer {key} tier {tier}", "email": f"c{key}-{tier}@example.com", "tier": tier}
