"""The hashing benchmark (``bench.hashing``): its variants rotated from round to round, each variant's paired ratio
and spread, its rows in the report once there is a result, and the topic each variant's child archives."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import rows


def test_the_hashing_benchmark_rotates_its_variants_from_round_to_round() -> None:
    from bench.hashing import rounds

    assert rounds(("jvm", "literals", "none"), 4) == [
        ("jvm", "literals", "none"),
        ("literals", "none", "jvm"),
        ("none", "jvm", "literals"),
        ("jvm", "literals", "none"),
    ]
    assert rounds(("jvm", "literals"), 3) == [("jvm", "literals"), ("literals", "jvm"), ("jvm", "literals")]


def child(records: int, run_seconds: float, cpu: float) -> dict[str, Any]:
    """A benchmark child's result as far as the ratios read it."""
    return {"records": records, "run_seconds": run_seconds, "run_cpu_seconds": cpu}


HASHING_RUNS = {  # records/s after the start: jvm 100, 80, 120 vs 200, 100, 200; literals 50, 100, 60 vs 100
    "jvm": [
        (child(1000, 10, 20), child(1000, 5, 10)),
        (child(1000, 12.5, 20), child(1000, 10, 10)),
        (child(1200, 10, 24), child(1000, 5, 10)),
    ],
    "literals": [
        (child(1000, 20, 40), child(1000, 10, 10)),
        (child(1000, 10, 30), child(1000, 10, 10)),
        (child(1200, 20, 36), child(1000, 10, 10)),
    ],
}


def test_the_hashing_benchmark_reports_each_variants_paired_ratio_its_spread_and_the_variants_round_by_round() -> None:
    from bench.hashing import summary

    result = summary(HASHING_RUNS)
    jvm, literals = result["variants"]["jvm"], result["variants"]["literals"]
    assert jvm["ratios_to_spark_alone"] == [0.5, 0.8, 0.6]
    assert jvm["ratio_to_spark_alone"] == 0.6 and jvm["ratio_to_spark_alone_spread"] == [0.5, 0.8]
    assert jvm["archiver"]["rates_after_start"] == [100, 80, 120] and jvm["archiver"]["run_seconds"] == 10
    assert jvm["cpu_seconds_per_million_records"] == 20_000 and jvm["cpu_ratio_to_spark_alone"] == 2
    assert literals["ratios_to_spark_alone"] == [0.5, 1.0, 0.6] and literals["ratio_to_spark_alone"] == 0.6
    direct = result["jvm_to_literals"]
    assert direct["rate_ratios"] == [2.0, 0.8, 2.0] and direct["rate_ratio"] == 2.0
    assert direct["rate_ratio_spread"] == [0.8, 2.0]
    assert direct["cpu_ratios"] == pytest.approx([0.5, 2 / 3, 2 / 3]) and direct["cpu_ratio"] == pytest.approx(2 / 3)
    assert set(result) == {"variants", "jvm_to_literals"}  # no control measured: nothing against it


def test_the_hashing_result_renders_its_rows_only_once_there_is_one() -> None:
    from bench.hashing import summary

    assert rows.hashing_rows({}) == []
    result = {
        "records": 500_000,
        "avg_value_bytes": 230.4,
        "records_per_plan": 1_000_000,
        "personal_fields": {"email": "hmac", "customer_name": "hmac"},
        **summary(HASHING_RUNS),
    }
    rendered = rows.hashing_rows({"hashing": result})
    assert [row[3].split(" ")[0] for row in rendered] == ["**0.60**", "**0.60**", "**2.00**"]
    assert "JVM function" in rendered[0][0] and "pre-#35" in rendered[1][0]
    assert "0.50-0.80" in rendered[0][3] and "0.80-2.00" in rendered[2][3]


def test_a_hashing_variant_gives_the_childs_topic_its_personal_fields_and_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench.archiver import SCHEMA
    from bench.archiver_run import bench_topic
    from bench.hashing import PERSONAL_FIELDS, PERSONAL_SCHEMA, VARIANT, personal, topic_schema

    plain = bench_topic("bench.x", 1000)
    assert plain.schemas == (SCHEMA,) and not plain.personal_fields and not plain.needs_key
    for name, hashes in (("jvm", True), ("literals", True), ("none", False)):
        monkeypatch.setenv(VARIANT, name)
        topic = bench_topic("bench.x", 1000)
        assert topic.schemas == (PERSONAL_SCHEMA,) == (topic_schema(),)
        assert topic.personal_fields == (PERSONAL_FIELDS if hashes else {}) and topic.needs_key == hashes
    monkeypatch.setenv(VARIANT, "nope")
    with pytest.raises(SystemExit, match="not one of"):
        topic_schema()
    names = [f["name"] for f in json.loads(PERSONAL_SCHEMA)["fields"]]
    assert names == [f["name"] for f in json.loads(SCHEMA)["fields"]] + list(PERSONAL_FIELDS)
    assert set(personal(7)) == set(PERSONAL_FIELDS) and any(
        not personal(i)["customer_name"].isascii() for i in range(9)
    )
