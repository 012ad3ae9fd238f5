"""Archiver fleets (``python -m bench archiver-fleet``):

B-fleet: BENCH_FLEET_TOPICS (100) topics of BENCH_FLEET_RECORDS (2,000) records each (spread over 3 partitions)
archived by one run, against one run archiving one such topic (cycle time reported).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from bench.archiver import archive, produce
from bench.common import write_result
from kafkalake.settings import Endpoints
from kafkalake_dev import stack
from kafkalake_dev.local import local_endpoints

FLEET_TOPICS = int(os.environ.get("BENCH_FLEET_TOPICS", "100"))
FLEET_RECORDS = int(os.environ.get("BENCH_FLEET_RECORDS", "2000"))
FLEET_CONCURRENCY = int(os.environ.get("BENCH_FLEET_CONCURRENCY", "8"))


def b_fleet(endpoints: Endpoints) -> dict[str, Any]:
    """B-fleet: FLEET_TOPICS topics of FLEET_RECORDS records each (over 3 partitions) archived in one run, against
    one run archiving one such topic."""
    topics = [f"bench.fleet.{uuid.uuid4().hex[:8]}" for _ in range(FLEET_TOPICS + 1)]
    for index, topic in enumerate(topics):
        produce(endpoints, topic, FLEET_RECORDS, quiet=True)
        if index % 20 == 0:
            print(f"[bench] fleet: produced {index + 1}/{len(topics)} topics", flush=True)
    one = archive(topics[:1], FLEET_RECORDS, FLEET_CONCURRENCY)
    print(f"[bench] one topic: {one}", flush=True)
    many = archive(topics[1:], FLEET_RECORDS, FLEET_CONCURRENCY)
    print(f"[bench] {FLEET_TOPICS} topics: {many}", flush=True)
    return {
        "topics": FLEET_TOPICS,
        "records_per_topic": FLEET_RECORDS,
        "concurrency": FLEET_CONCURRENCY,
        "one_topic": one,
        "fleet": many,
        "fleet_cycle_seconds": many["seconds"],
        "B_fleet_ratio": many["seconds"] / one["seconds"],
        "B_fleet_ratio_after_start": many["run_seconds"] / one["run_seconds"],
    }


def main() -> None:
    endpoints = local_endpoints()
    with stack.running():
        write_result("archiver-fleet", b_fleet(endpoints))
