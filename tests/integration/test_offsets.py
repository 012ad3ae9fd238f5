"""The archiver's Kafka offsets on the local broker: every topic of a run reads and commits through the run's one pair
of clients (``OffsetClients``), and a group's commit never moves a partition backwards."""

from __future__ import annotations

import os
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kafkalake.endpoints import Endpoints
from kafkalake_dev.local.workload import ensure_topic
from spark_jobs.archiver.offsets import OffsetClients, Offsets
from spark_jobs.archiver.topic_run import run_access

TOPICS = 40


def open_descriptors() -> int:
    return len(os.listdir(f"/proc/{os.getpid()}/fd"))


def test_topics_commit_their_own_groups_through_the_runs_clients_forward_only(local_stack: Endpoints) -> None:
    admin = AdminClient({"bootstrap.servers": local_stack.kafka_bootstrap})
    names = [f"offsets-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    producer = Producer({"bootstrap.servers": local_stack.kafka_bootstrap})
    for name in names:
        ensure_topic(admin, name, 2)
        for i in range(10):
            producer.produce(name, value=b"x", partition=i % 2)
    assert producer.flush(30) == 0
    clients = OffsetClients(run_access(local_stack))
    try:
        first, second = (Offsets(clients, name) for name in names)
        assert first.state() == ({0: None, 1: None}, {0: 0, 1: 0}, {0: 5, 1: 5})
        first.commit({0: (0, 3), 1: (0, 5)})
        first.commit({0: (0, 2)})  # behind the group's commit: left as it is
        assert first.committed([0, 1]) == {0: 3, 1: 5}
        assert second.committed([0, 1]) == {0: None, 1: None}, "a commit reached another topic's group"
    finally:
        clients.close()


def test_a_topic_of_the_run_holds_no_kafka_client_of_its_own(local_stack: Endpoints) -> None:
    """A client per topic held 8 file descriptors while its topic was in the run: 160 topics passed the 1,024 that
    ``select()`` takes."""
    admin = AdminClient({"bootstrap.servers": local_stack.kafka_bootstrap})
    names = [f"offsets-fd-{uuid.uuid4().hex[:8]}" for _ in range(TOPICS)]
    for name in names:
        ensure_topic(admin, name, 3)
    clients = OffsetClients(run_access(local_stack))
    try:
        Offsets(clients, names[0]).state()  # the clients' connections made
        before = open_descriptors()
        topics = [Offsets(clients, name) for name in names]
        for topic in topics:
            topic.state()
        assert open_descriptors() - before < TOPICS
    finally:
        clients.close()
