"""The erasure job's lookups keep the digests they look for out of its plans: a plan shows a filter's literal values,
and EMR Serverless keeps every run's plans in its event log and Spark UI. A digest there links an erased subject's
pseudonym to the run that erased it, long after its rows are gone."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafkalake.personal import PseudonymKey
from spark_jobs.erasure.index import index_digest, partitions_holding
from spark_jobs.erasure.matching import subject_matches
from tests.plans import plan_renderings

KEY = PseudonymKey("k1", bytes(range(32)))
ERASED, KEPT = KEY.digest("customer-1"), KEY.digest("customer-2")


def plans(frame: DataFrame, capsys: pytest.CaptureFixture[str]) -> str:
    """Every rendering of ``frame``'s plan once it has run: as the event log records it (the executed plan, the
    optimized plan as JSON) and as ``explain`` prints it in each mode."""
    frame.collect()
    return "\n".join(plan_renderings(frame, capsys).values())


def test_the_scan_joins_the_digests_it_looks_for(bare_spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:
    rows = bare_spark.createDataFrame(
        [("f1", 0, 1, ERASED, None), ("f1", 0, 2, KEPT, None), ("f2", 1, 7, KEPT, ERASED)],
        "file string, _kafka_partition int, _kafka_offset long, a string, b string",
    )
    matched = subject_matches(bare_spark, rows, [F.col("a"), F.col("b")], [ERASED])
    assert sorted(tuple(r) for r in matched.select("file", "_kafka_offset", "subject").collect()) == [
        ("f1", 1, ERASED),
        ("f2", 7, ERASED),
    ]
    assert ERASED not in plans(matched, capsys)


def test_the_index_lookup_joins_the_digests_it_looks_for(
    bare_spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    erased, kept = index_digest(ERASED), index_digest(KEPT)
    entries = bare_spark.createDataFrame(
        [(erased, "dt=1/"), (kept, "dt=2/"), (erased, "dt=3/")], "digest long, partition string"
    )
    found = partitions_holding(bare_spark, entries, [erased])
    assert sorted(r["partition"] for r in found.collect()) == ["dt=1/", "dt=3/"]
    assert str(erased) not in plans(found, capsys)
