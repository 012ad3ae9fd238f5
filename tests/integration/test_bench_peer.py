"""``python -m bench peer``'s own parts on a small workload: the Connect worker starts and lists the Iceberg sink, the
sink drains a small JSON topic into its Glue table, the worker stops, and the table is counted (rows, duplicate
(partition, offset) pairs, data files, table-hours) and each row's wait from produced to committed read
(``bench.peer_freshness``); the kill-and-restart loop's worker, killed once after the sink resumed, comes back and
its table is counted with what explains it (what the sink kept is the benchmark's finding, not asserted). No timing
is asserted. The archiver's side of the loop is not run here: a killed Spark start and its rerun take minutes."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from bench import connect, peer, peer_freshness, peer_kills, peer_tables
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


def test_control_events_are_told_apart_by_the_names_they_hold_and_the_commit_log_keeps_the_coordinators_lines(
    tmp_path: Path,
) -> None:
    kinds = [
        connect.control_kind(value, "bench.peer.t", "bench_peer.peer_x")
        for value in (b"..s3://b/f.parquet..peer_x..", b"..bench.peer.t..", b"..peer_x..", b"..uuid..")
    ]
    assert kinds == ["data_written", "data_complete", "commit_to_table", "other"]
    log = tmp_path / "w.log"
    log.write_text(
        "[t] INFO Kafka Connect started (x)\n"
        "[t] INFO [Consumer clientId=a, groupId=connect-w-coord] Resetting offset for partition c-0 to position 14\n"
        "[t] INFO [Consumer clientId=b, groupId=cg-control-1] Resetting offset for partition c-0 to position 14\n"
        "[t] INFO Commit 1 complete, committed to 0 table(s), valid-through null (y)\n"
        "[t] INFO unrelated\n"
    )
    assert [line.split("] ")[1][:25] for line in peer_kills.commit_log(log, "w")] == [
        "INFO Kafka Connect starte",
        "INFO [Consumer clientId=a",
        "INFO Commit 1 complete, c",
    ]


def test_freshness_derives_the_sinks_default_and_the_archivers_schedules_from_the_measured_runs() -> None:
    sink = [
        {"commit_interval_seconds": 1.0, "max_seconds": 4.0},
        {"commit_interval_seconds": 10.0, "max_seconds": 12.5},
    ]
    assert peer_freshness.derived(sink, {"commit_seconds": 20.0}) == {
        "sink_default_interval": {"commit_interval_seconds": 300.0, "worst_seconds": 303.0},
        "archiver": {
            "every_8_minutes": {"schedule_minutes": 8, "worst_seconds": 500.0, "best_seconds": 20.0},
            "every_5_minutes": {"schedule_minutes": 5, "worst_seconds": 320.0, "best_seconds": 20.0},
        },
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
    waits = peer_freshness.commit_latencies(endpoints, run["table"], peer_tables.PEER_COLUMNS[2])
    assert len(waits) == RECORDS and min(waits) > 0  # each row committed after it was produced


def test_the_sinks_worker_killed_and_restarted_resumes_and_its_table_is_counted(
    small_topic: tuple[Endpoints, str], tmp_path: Path
) -> None:
    endpoints, topic = small_topic
    run = peer_kills.peer_with_kills(
        endpoints, topic, RECORDS, tmp_path, kills=1, rng=random.Random(1), commit_seconds=2, wait_seconds=45
    )
    [killed] = run["kills"]
    assert peer_kills.KILL_AFTER[0] <= killed["after_seconds"] <= peer_kills.KILL_AFTER[1]
    assert killed["resumed_after_seconds"] is not None  # killed after its coordinator started
    assert Path(run["worker_log"]).read_text().count("Kafka Connect started") == 2  # restarted after the kill
    assert sum("Kafka Connect started" in line for line in run["commit_log"]) == 2
    control = run["control"]
    assert control["groups"]["coordinator"] == control["groups"]["source"] + "-coord"
    assert sum(control["committed"]["source"].values()) <= RECORDS  # the sink's source offsets, read back
    assert 0 <= run["rows"] - run["duplicate_partition_offset_pairs"] <= RECORDS  # what it kept is counted, not judged
