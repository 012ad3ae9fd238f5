"""Readers while the compactor swaps a table's partitions: SDK for pandas with a partition filter and Spark SQL over
the Glue definition, read in a loop during a compaction run, count every row once at every moment."""

from __future__ import annotations

import dataclasses
import io
import threading
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from infra.repo import catalog_dir
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.layout import DataKey, Partition, is_compaction_output
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake_dev.checks.interop import Check, Read
from kafkalake_dev.checks.query import partition_locations
from kafkalake_dev.checks.readers import spark_read, wrangler_read, wrangler_session
from kafkalake_dev.local.sandbox import register_complete_partitions, with_bucket
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Knobs, PartitionResult
from tests.integration.lake_files import small_file

pytestmark = pytest.mark.stack
HOURS = [Partition(1, date(2026, 11, 20), hour) for hour in range(6)]
FILES, ROWS = 12, 40
SWAP_SECONDS = 2.0


class SlowSwaps:
    """The compactor's Glue client, each ``UpdatePartition`` after a pause: the run's swaps spread over seconds, so
    reads fall between them."""

    def __init__(self, glue: Any) -> None:
        self._glue = glue

    def update_partition(self, **request: Any) -> Any:
        time.sleep(SWAP_SECONDS)
        return self._glue.update_partition(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._glue, name)


def test_reads_during_a_compaction_run_count_every_row_once(spark: SparkSession, local_stack: Endpoints) -> None:
    endpoints = with_bucket(local_stack, "kafkalake-readers-tests")
    template = load_topic_catalog(catalog_dir()).get("sensor-readings", "staging")
    suffix = uuid.uuid4().hex[:8]
    spec = template.spec.model_copy(update={"database": f"readers_{suffix}"})
    topic = dataclasses.replace(template, env=f"t{suffix}", spec=spec)
    s3, glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
    for index, hour in enumerate(HOURS):
        for i in range(FILES):
            first = (index * FILES + i) * ROWS  # one Kafka partition's offsets, spread over the hours
            key = DataKey(topic.prefix, hour, 0, first, first + ROWS - 1).key()
            s3.put_object(Bucket=endpoints.bucket, Key=key, Body=small_file(0, first, ROWS))
    schema = pq.read_schema(io.BytesIO(small_file(0, 0, 1)))
    register_complete_partitions(glue, topic, endpoints.bucket, schema, HOURS)
    total = len(HOURS) * FILES * ROWS
    whole = Check(f"{topic.database}.{topic.table}", "count(*)", "", total, total)
    one_hour = dataclasses.replace(whole, partition=(("hour", "03"),), planned=FILES * ROWS)

    knobs = Knobs(target_file_bytes=64 * 1024, min_input_files=10, grace_period=timedelta(hours=1))
    compactor = Compactor(spark, endpoints, [topic], knobs, now=lambda: datetime.now(UTC), say=lambda _: None)
    compactor.glue = SlowSwaps(compactor.glue)
    results: list[PartitionResult] = []
    run = threading.Thread(target=lambda: results.extend(compactor.run()))
    seen: list[tuple[int, Read, Read, Read]] = []

    def swapped() -> int:
        locations = partition_locations(glue, topic.database, topic.table).values()
        return sum(is_compaction_output(parse_s3_uri(location).key) for location in locations)

    with wrangler_session(endpoints) as session:

        def read() -> tuple[int, Read, Read, Read]:
            before = swapped()
            wrangled = wrangler_read(session, whole), wrangler_read(session, one_hour)
            return before, *wrangled, spark_read(spark, glue, whole)

        run.start()
        while run.is_alive():
            seen.append(read())
        run.join()
        seen.append(read())
    assert sorted(r.action for r in results) == ["compacted"] * len(HOURS), results
    wrong = [s for s in seen if s[1:] != (Read(total, 0), Read(FILES * ROWS, 0), Read(total, 0))]
    assert wrong == [], wrong
    assert any(0 < n < len(HOURS) for n, *_ in seen), f"no read fell between two swaps: {[n for n, *_ in seen]}"
    assert seen[-1][0] == len(HOURS)
