"""Schema versions the registry holds and the catalog lacks (``kafkalake.undeclared``): their own tags are honoured at
any depth, the catalog's overrides still win, a version with a field no one vetted is held, one that only removes
fields is archived; on a bare local session (chispa-style: DataFrame in, DataFrame out) the archiver's records of
such versions are hashed or quarantined, never left in clear; held records are counted where an alarm sees them."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafkalake.metrics import ENVIRONMENT_DIMENSION, ArchiverMetric
from kafkalake.personal import KEY_ID_COLUMN, PiiAction, PseudonymKey
from kafkalake.registry import RegisteredSchema
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TopicSpec
from kafkalake.undeclared import UNDECLARED_VERSION, protection
from kafkalake.wire import encode
from spark_jobs.archiver.metrics import metric_data
from spark_jobs.archiver.plan import Plan
from spark_jobs.archiver.records import PassMember, prepared, version_schemas
from spark_jobs.archiver.summary import Summary, TopicResult

KEY = PseudonymKey("k-2026", bytes(range(40)))
NOW = datetime(2026, 11, 21, tzinfo=UTC)
V1: dict[str, Any] = {
    "type": "record",
    "name": "Visit",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "customer_id", "type": "string", "pii": True},
        {"name": "card", "type": "string"},
    ],
}
V2 = copy.deepcopy(V1)  # new fields, every one tagged: an email, and phones inside an array of records
V2["fields"][2]["pii"] = "hmac"  # the catalog's override (mask_last4) wins
V2["fields"] += [
    {"name": "email", "type": ["null", "string"], "default": None, "confluent:tags": ["PII"]},
    {
        "name": "contacts",
        "type": {
            "type": "array",
            "items": {
                "type": "record",
                "name": "Contact",
                "fields": [{"name": "phone", "type": "string", "pii": "mask_last4"}],
            },
        },
        "default": [],
    },
]
V3 = copy.deepcopy(V1)  # a new field no one tagged
V3["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
V4 = {**V1, "fields": V1["fields"][:2]}  # only removes a field
TOPIC = Topic(
    "visits", "acme", "shop", "staging", TopicSpec(pii={"card": PiiAction.MASK_LAST4}), (json.dumps(V1),), Path("v")
)


def test_the_catalogs_version_is_declared_however_it_is_spelled() -> None:
    rule = protection(TOPIC, json.dumps(V1, indent=2, sort_keys=True))
    assert rule.declared and rule.personal == TOPIC.personal_fields and rule.held(key_at_hand=False) is None


def test_a_versions_own_tags_are_honoured_at_any_depth_under_the_catalogs_overrides() -> None:
    rule = protection(TOPIC, json.dumps(V2))
    assert not rule.declared and rule.unvetted == ()
    assert rule.personal == {
        "customer_id": PiiAction.HMAC,
        "card": PiiAction.MASK_LAST4,
        "email": PiiAction.HMAC,
        "contacts[].phone": PiiAction.MASK_LAST4,
    }
    assert rule.held(key_at_hand=True) is None


def test_a_version_with_a_field_no_one_vetted_is_held_and_the_reason_names_only_paths() -> None:
    rule = protection(TOPIC, json.dumps(V3))
    assert rule.unvetted == ("note",)
    assert rule.held(key_at_hand=True) == (
        "fields note are neither tagged personal nor in a version the catalog declares"
    )


def test_a_version_that_only_removes_fields_is_archived_with_the_catalogs_protection() -> None:
    rule = protection(TOPIC, json.dumps(V4))
    assert not rule.declared and rule.unvetted == () and rule.held(key_at_hand=True) is None
    assert rule.personal == TOPIC.personal_fields


def test_a_version_asking_for_the_hash_is_held_when_the_run_has_no_key() -> None:
    """The key is read only for topics whose catalog hashes a field: without it the tag cannot be honoured."""
    untagged = {**V4, "fields": [*V4["fields"][:1], {"name": "customer_id", "type": "string"}]}
    unhashed = Topic("visits", "acme", "shop", "staging", TopicSpec(), (json.dumps(untagged),), Path("v"))
    rule = protection(unhashed, json.dumps(V4))
    assert rule.unvetted == () and "no pseudonym key" in (rule.held(key_at_hand=False) or "")
    assert rule.held(key_at_hand=True) is None


class Registry:
    """The registry's versions of the topic's subject: v1 (the catalog's), v2 (tagged), v3 (untagged field)."""

    url = "http://registry"

    def versions(self, subject: str, message: str | None = None) -> list[RegisteredSchema]:
        return [RegisteredSchema(subject, n, 10 + n, json.dumps(s)) for n, s in ((1, V1), (2, V2), (3, V3))]


def raw_records(spark: SparkSession) -> DataFrame:
    """One record of each registered version, as the Kafka source gives them."""
    v1 = {"id": "a", "customer_id": "cust-1", "card": "4111111111111111"}
    v2 = {**v1, "id": "b", "email": "ann@example.com", "contacts": [{"phone": "+447700900123"}]}
    v3 = {**v1, "id": "c", "note": "lives at 1 High St"}
    values = [encode(11, json.dumps(V1), v1), encode(12, json.dumps(V2), v2), encode(13, json.dumps(V3), v3)]
    rows = [(b"k", value, 0, offset, NOW) for offset, value in enumerate(values)]
    return spark.createDataFrame(rows, "key binary, value binary, partition int, offset long, timestamp timestamp")


def test_records_of_undeclared_versions_are_hashed_by_their_tags_or_held_never_clear(
    bare_spark: SparkSession,
) -> None:
    versions = version_schemas(TOPIC, Registry(), key_at_hand=True)  # type: ignore[arg-type]
    assert [v.held is not None for v in versions] == [False, False, True]
    plan = Plan(TOPIC.kafka_topic, NOW.isoformat(), {})
    rows = prepared(raw_records(bare_spark), [PassMember(TOPIC, plan, tuple(versions))], key=KEY)
    actual = rows.select(
        "_kafka_offset",
        "_schema_version",
        "_error",
        F.coalesce("_value_v1.customer_id", "_value_v2.customer_id").alias("customer_id"),
        F.coalesce("_value_v1.card", "_value_v2.card").alias("card"),
        F.col("_value_v2.email").alias("email"),
        F.col("_value_v2.contacts.phone").alias("phones"),
        F.col("_value_v3").isNull().alias("nothing_of_v3"),
        F.col("_raw_value").isNotNull().alias("raw_kept"),
        KEY_ID_COLUMN,
    ).orderBy("_kafka_offset")
    expected = bare_spark.createDataFrame(
        [
            (0, 1, None, KEY.digest("cust-1"), "*" * 12 + "1111", None, None, True, False, KEY.key_id),
            (1, 2, None, KEY.digest("cust-1"), "*" * 12 + "1111", KEY.digest("ann@example.com"), ["*" * 9 + "0123"],
             True, False, KEY.key_id),
            (2, 3, UNDECLARED_VERSION, None, None, None, None, True, True, KEY.key_id),
        ],
        "_kafka_offset long, _schema_version int, _error string, customer_id string, card string, email string, "
        "phones array<string>, nothing_of_v3 boolean, raw_kept boolean, _pseudonym_key_id string",
    )  # fmt: skip
    assert actual.schema.simpleString() == expected.schema.simpleString()
    assert actual.collect() == expected.collect()


def test_held_records_are_counted_in_the_topics_line_and_the_environments_alarmed_metric() -> None:
    plan = Summary("t", {0: (0, 10)}, read=10, written=6, quarantined=4)
    plan.quarantine_by_reason = {UNDECLARED_VERSION: 3, "corrupt_avro": 1}
    result = TopicResult("visits", "t", plans=[plan])
    assert (result.as_dict()["held"], result.as_dict()["quarantined"]) == (3, 4)
    data = metric_data([result, TopicResult("other", "u", plans=[Summary("u", {})])], "staging", NOW)
    (held,) = [d for d in data if d["MetricName"] == ArchiverMetric.RECORDS_HELD]
    assert (held["Value"], held["Dimensions"]) == (3, [{"Name": ENVIRONMENT_DIMENSION, "Value": "staging"}])
