"""``python -m bench peer``'s own parts on a small workload: the Connect worker starts and lists the Iceberg sink, the
sink drains a small JSON topic into its Glue table, the worker stops, and the table is counted (rows, duplicate
(partition, offset) pairs, data files, table-hours); the kill-and-restart loop's worker, killed once, comes back and
its table is counted (what the sink kept is the benchmark's finding, not asserted). No timing is asserted. The
archiver's side of the loop is not run here: a killed Spark start and its rerun take minutes."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from bench import peer, peer_kills, peer_tables
from bench.common import BUCKET
from kafkalake.endpoints import Endpoints
from kafkalake_dev.local.sandbox import with_bucket

pytestmark = pytest.mark.stack
RECORDS = 2000


def test_exactness_counts_rows_beyond_the_first_of_each_partition_offset_pair_and_hours_of_either_time() -> None:
    hour_ms = 3_600_000
    sink_rows = pa.table({"p": [0, 0, 1, 0], "o": [5, 5, 5, 6], "t": [hour_ms, hour_ms + 1, 2 * hour_ms, 10]})
    assert peer_tables.exactness(sink_rows, ("p", "o", "t")) == {
        "rows": 4,
        "duplicate_partition_offset_pairs": 1,
        "table_hours": 3,
    }
    stamps = pa.array([hour_ms * 1000, hour_ms * 1000 + 5], pa.timestamp("us", "UTC"))
    archived = pa.table({"p": [0, 1], "o": [1, 1], "t": stamps})
    assert peer_tables.exactness(archived, ("p", "o", "t")) == {
        "rows": 2,
        "duplicate_partition_offset_pairs": 0,
        "table_hours": 1,
    }


@pytest.fixture
def small_topic(local_stack: Endpoints) -> tuple[Endpoints, str]:
    """The benchmark's bucket and Glue database, and a JSON topic of ``RECORDS`` records."""
    endpoints = with_bucket(local_stack, BUCKET)
    topic = f"bench.peer.test.{uuid.uuid4().hex[:8]}"
    peer.produce_json(endpoints, topic, RECORDS)
    peer_tables.ensure_database(endpoints)
    return endpoints, topic


def test_the_sink_on_a_connect_worker_drains_a_small_topic_into_its_table(
    small_topic: tuple[Endpoints, str], tmp_path: Path
) -> None:
    endpoints, topic = small_topic
    run = peer.peer_run(endpoints, topic, RECORDS, tmp_path, commit_seconds=2, wait_seconds=150)
    assert run["worker_exit"] is not None  # stopped
    assert (run["rows"], run["duplicate_partition_offset_pairs"], run["table_hours"]) == (RECORDS, 0, 1)
    assert run["data_files"] >= 1
    assert 0 < run["start_cpu_seconds"] <= run["cpu_seconds"]


def test_the_sinks_worker_killed_and_restarted_resumes_and_its_table_is_counted(
    small_topic: tuple[Endpoints, str], tmp_path: Path
) -> None:
    endpoints, topic = small_topic
    run = peer_kills.peer_with_kills(
        endpoints, topic, RECORDS, tmp_path, kills=1, rng=random.Random(1), commit_seconds=2, wait_seconds=45
    )
    [killed] = run["kills"]
    assert peer_kills.KILL_AFTER[0] <= killed["after_seconds"] <= peer_kills.KILL_AFTER[1]
    assert Path(run["worker_log"]).read_text().count("Kafka Connect started") == 2  # restarted after the kill
    assert 0 <= run["rows"] - run["duplicate_partition_offset_pairs"] <= RECORDS  # what it kept is counted, not judged
