"""Many plans in one pass (``spark_jobs.archiver.records.prepared``; chispa-style, on a bare session): each row is
classified, decoded, timed and protected as its own topic says, and topics that decode alike share one value
column."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafkalake.naming import SHARED_READ_GROUP, consumer_group
from kafkalake.personal import PseudonymKey
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TopicSpec
from kafkalake.wire import encode
from spark_jobs.archiver.light import Member, passes
from spark_jobs.archiver.plan import Plan
from spark_jobs.archiver.records import PassMember, pass_columns, prepared
from spark_jobs.archiver.transform import VersionSchema

KEY = PseudonymKey("k-2026", bytes(range(40)))
T0 = datetime(2026, 11, 20, 10, 30, tzinfo=UTC)
NOW = datetime(2026, 11, 21, tzinfo=UTC)
ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "string"}, {"name": "at", "type": ["null", "string"]}],
}
READING = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"}],
}
AT = [{"path": "at", "format": "iso8601"}]


def topic(name: str, schema: dict[str, Any], **spec: Any) -> Topic:
    policy = TopicSpec.model_validate({"kafka_topic": f"t.{name}", **spec})
    return Topic(name, "acme", "shop", "staging", policy, (json.dumps(schema),), Path(f"{name}.yaml"))


def member(found: Topic, *versions: VersionSchema, now: datetime = NOW) -> PassMember:
    return PassMember(found, Plan(found.kafka_topic, now.isoformat(), {}), versions)


ORDERS = topic("orders", ORDER, time_fields=AT)
ORDERS_TOO = topic("orders-too", ORDER, time_fields=AT)
RETURNS = topic("returns", ORDER, pii={"id": "hmac"})
READINGS = topic("readings", READING, value_format="json")
MEMBERS = [
    member(ORDERS, VersionSchema(1, 7, json.dumps(ORDER))),
    member(ORDERS_TOO, VersionSchema(1, 7, json.dumps(ORDER))),
    member(RETURNS, VersionSchema(1, 7, json.dumps(ORDER), {"id": RETURNS.personal_fields["id"]})),
    member(READINGS, VersionSchema(1, None, json.dumps(READING))),
]


def raw(spark: SparkSession) -> DataFrame:
    order = encode(7, json.dumps(ORDER), {"id": "o-1", "at": "2026-11-20T08:15:00Z"})
    rows = [
        ("t.orders", order),
        ("t.orders", encode(9, json.dumps(ORDER), {"id": "o-2", "at": None})),
        ("t.orders-too", order),
        ("t.returns", order),
        ("t.readings", b'{"id": "r-1", "n": 4}'),
        ("t.readings", b"{not json"),
        ("t.readings", order),
    ]
    return spark.createDataFrame(
        [(t, b"cust", v, 0, offset, T0) for offset, (t, v) in enumerate(rows)],
        "topic string, key binary, value binary, partition int, offset long, timestamp timestamp",
    )


def test_topics_that_decode_alike_share_a_column_and_a_different_protection_gets_its_own() -> None:
    assert pass_columns(MEMBERS) == [{1: "_value_v1"}, {1: "_value_v1"}, {1: "_value_v2"}, {1: "_value_v3"}]


def test_each_row_is_classified_decoded_timed_and_protected_as_its_own_topic_says(bare_spark: SparkSession) -> None:
    rows = prepared(raw(bare_spark), MEMBERS, key=KEY).orderBy("_kafka_offset").collect()
    found = [
        (r["_member"], r["_error"], r["_schema_version"], r["_time_source"], r["_business_time"].hour) for r in rows
    ]
    assert found == [
        (0, None, 1, "at", 8),
        (0, "unknown_schema_id", None, "kafka_timestamp", 10),  # id 9 is no version of this topic
        (1, None, 1, "at", 8),
        (2, None, 1, "kafka_timestamp", 10),  # the same schema, but this topic has no time fields
        (3, None, 1, "kafka_timestamp", 10),
        (3, "bad_json", 1, "kafka_timestamp", 10),
        (3, "bad_json", 1, "kafka_timestamp", 10),  # an Avro frame is no JSON to a JSON topic
    ]
    assert [r["_value_v1"]["id"] if r["_value_v1"] else None for r in rows] == ["o-1", None, "o-1", *[None] * 4]
    assert rows[3]["_value_v2"]["id"] == KEY.digest("o-1")  # hashed in its own column only
    assert rows[4]["_value_v3"].asDict() == {"id": "r-1", "n": 4}
    keys = [r["_key"] for r in rows]  # none of these topics keeps the key: only the quarantined rows carry it
    assert keys == [None, b"cust", None, None, None, b"cust", b"cust"]


def test_the_kafka_key_reaches_the_writer_with_the_data_rows_of_the_topics_that_keep_it(
    bare_spark: SparkSession,
) -> None:
    keeping = member(topic("orders-too", ORDER, archive={"key": "clear"}), VersionSchema(1, 7, json.dumps(ORDER)))
    raw_rows = raw(bare_spark).where("topic in ('t.orders', 't.orders-too')")
    rows = prepared(raw_rows, [MEMBERS[0], keeping], key=KEY).orderBy("_kafka_offset").collect()
    assert [(r["_member"], r["_error"], r["_key"]) for r in rows] == [
        (0, None, None),
        (0, "unknown_schema_id", b"cust"),
        (1, None, b"cust"),
    ]


def test_plans_that_hash_different_kafka_columns_never_share_a_pass(bare_spark: SparkSession) -> None:
    """A hashed Kafka key is text and a clear one bytes: one column cannot hold both."""
    hashing = member(topic("keys", ORDER, archive={"key": "hmac"}), VersionSchema(1, 7, json.dumps(ORDER)))
    with pytest.raises(ValueError, match="must hash the same Kafka columns"):
        prepared(raw(bare_spark), [*MEMBERS[:1], hashing], key=KEY)


def test_a_pass_of_one_plan_is_the_plan_alone(bare_spark: SparkSession) -> None:
    """No row of a pass of one depends on its topic's name (a plan alone reads one topic): the same rows whatever
    the ``topic`` column holds."""
    alone = prepared(raw(bare_spark).where("topic = 't.orders'"), MEMBERS[:1], key=KEY)
    renamed = prepared(
        raw(bare_spark).where("topic = 't.orders'").withColumn("topic", F.lit("x")), MEMBERS[:1], key=KEY
    )
    assert alone.collect() == renamed.collect()


def test_a_round_is_split_into_passes_by_kafka_columns_and_width() -> None:
    """Members that hash the key apart from those that keep it clear; at most ``width`` distinct decodings a pass,
    topics of one schema counted once."""
    hashing = member(topic("keys", ORDER, archive={"key": "hmac"}), VersionSchema(1, 7, json.dumps(ORDER)))
    round_ = [Member(cast(Any, None), cast(Any, None), m) for m in [*MEMBERS, hashing]]
    found = [[m.member.topic.name for m in one] for one in passes(round_, width=2)]
    assert found == [["orders", "orders-too", "returns"], ["readings"], ["keys"]]
    assert [len(p) for p in passes(round_)] == [4, 1]


def test_the_shared_read_group_is_under_the_archivers_prefix_and_no_topics_own() -> None:
    """One prefixed Kafka ACL (``kafkalake-archiver.``) covers every group the archiver reads with; no Kafka topic's
    name (letters, digits, ``.``, ``_``, ``-``) gives the shared group's name."""
    assert SHARED_READ_GROUP.startswith(consumer_group(""))
    assert re.fullmatch(r"[A-Za-z0-9._-]+", SHARED_READ_GROUP.removeprefix(consumer_group(""))) is None


def many(count: int) -> list[PassMember]:
    """``count`` topics of one schema and time field, each plan made a second after the one before."""
    version = VersionSchema(1, 7, json.dumps(ORDER))
    found = [topic(f"orders-{i}", ORDER, time_fields=AT) for i in range(count)]
    return [member(t, version, now=NOW.replace(second=i)) for i, t in enumerate(found)]


def test_each_plans_own_now_bounds_its_rows_business_time(bare_spark: SparkSession) -> None:
    """A business time more than a day after its plan's creation is out of bounds, each plan by its own 'now'."""
    early = member(ORDERS, VersionSchema(1, 7, json.dumps(ORDER)), now=datetime(2026, 11, 19, 8, tzinfo=UTC))
    rows = prepared(raw(bare_spark).where("offset in (0, 2)"), [early, MEMBERS[1]], key=KEY).collect()
    assert sorted((r["_member"], r["_error"]) for r in rows) == [(0, "time_out_of_bounds"), (1, None)]


def test_a_rows_tests_do_not_grow_with_its_pass(bare_spark: SparkSession) -> None:
    """Plans' 'now' all differ; a row's bound is looked up by its member, not tested member after member (a CASE
    WHEN of one branch per plan made every row of a pass of 156 light topics run through 156 branches)."""

    def branches(count: int) -> int:
        plan = prepared(raw(bare_spark), many(count), key=KEY)._jdf.queryExecution().optimizedPlan().toString()
        return len(re.findall(r"\bWHEN\b", plan))

    assert branches(40) == branches(2)


def test_topics_that_decode_alike_share_each_expression_built_once(
    bare_spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``pyspark.sql.functions`` call is a few Py4J round trips: what plans share is built once per pass."""
    from spark_jobs.archiver import transform

    calls: dict[str, int] = {}
    for name in ("framed_classification", "_business_time", "_undecodable", "_version_of"):
        real = getattr(transform, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args)

        monkeypatch.setattr(transform, name, counted)
    prepared(raw(bare_spark), many(30), key=KEY)
    assert calls == {"framed_classification": 1, "_business_time": 1, "_undecodable": 1, "_version_of": 1}
