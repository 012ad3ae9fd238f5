"""Personal fields inside arrays and maps protected in the archiver's rows, on a bare local session (chispa-style:
DataFrames in, rows out), and the canonical text of non-string leaves, the same in the archiver's hash and the
erasure scan's (issue #35, finding 2)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafkalake.personal import PiiAction, PseudonymKey
from kafkalake.topic_catalog import load_topic_catalog
from spark_jobs.archiver.pseudonyms import pseudonymise
from spark_jobs.erasure.subjects import subject_columns

KEY = PseudonymKey("k-2026", bytes(range(40)))
CONTACT = "struct<kind:string, email:string, phone:string>"
ROWS = (
    "_kafka_offset long, "
    f"_value_v1 struct<id:long, contacts:array<{CONTACT}>, by_channel:map<string,{CONTACT}>, "
    f"history:array<map<string,{CONTACT}>>, tags:array<string>>"
)
FIELDS = {
    "contacts[].email": PiiAction.HMAC,
    "contacts[].phone": PiiAction.DROP,
    "by_channel{}.email": PiiAction.HMAC,
    "by_channel{}.phone": PiiAction.DROP,
    "history[]{}.phone": PiiAction.MASK_LAST4,
    "tags[]": PiiAction.HMAC,
}


def plan(spark: SparkSession) -> DataFrame:
    """Contacts in an array and in a map, an array of maps, an array of strings; nulls at every level."""
    ann = ("home", "ann@example.com", "+4412345678")
    bob = ("work", "bob@example.com", None)
    return spark.createDataFrame(
        [
            (0, (1, [ann, bob], {"sms": ann}, [{"old": bob}], ["vip", None])),
            (1, (2, [None], {"sms": None}, [None, {}], [])),
            (2, (3, None, None, None, None)),
            (3, None),
        ],
        ROWS,
    )


def values(frame: DataFrame) -> list[Any]:
    rows = frame.orderBy("_kafka_offset").collect()
    return [r["_value_v1"].asDict(recursive=True) if r["_value_v1"] is not None else None for r in rows]


def test_fields_inside_arrays_and_maps_of_records_are_hashed_dropped_and_masked(bare_spark: SparkSession) -> None:
    ann = {"kind": "home", "email": KEY.digest("ann@example.com")}
    bob = {"kind": "work", "email": KEY.digest("bob@example.com")}
    assert values(pseudonymise(plan(bare_spark), {"_value_v1": FIELDS}, KEY)) == [
        {
            "id": 1,
            "contacts": [ann, bob],
            "by_channel": {"sms": ann},
            "history": [{"old": {"kind": "work", "email": "bob@example.com", "phone": None}}],
            "tags": [KEY.digest("vip"), None],
        },
        {"id": 2, "contacts": [None], "by_channel": {"sms": None}, "history": [None, {}], "tags": []},
        {"id": 3, "contacts": None, "by_channel": None, "history": None, "tags": None},
        None,
    ]


def test_a_masked_field_inside_an_array_of_maps_keeps_its_last_four(bare_spark: SparkSession) -> None:
    rows = plan(bare_spark).withColumn(
        "_value_v1", F.col("_value_v1").withField("history", F.array(F.col("_value_v1.by_channel")))
    )
    protected = values(pseudonymise(rows, {"_value_v1": FIELDS}, KEY))
    assert protected[0]["history"] == [{"sms": {"kind": "home", "email": "ann@example.com", "phone": "*******5678"}}]


def test_dropped_fields_leave_the_element_schema(bare_spark: SparkSession) -> None:
    protected = pseudonymise(plan(bare_spark), {"_value_v1": FIELDS}, KEY)
    assert protected.schema["_value_v1"].dataType.simpleString() == (
        "struct<id:bigint,contacts:array<struct<kind:string,email:string>>,"
        "by_channel:map<string,struct<kind:string,email:string>>,"
        "history:array<map<string,struct<kind:string,email:string,phone:string>>>,tags:array<string>>"
    )


LEAVES = (
    "_kafka_offset long, _value_v1 struct<n:long, flag:boolean, amount:decimal(10,2), tiny:decimal(10,8), "
    "at:timestamp, day:date, ratio:double, raw:binary, items:array<struct<n:int>>>"
)
AT = datetime(2026, 1, 2, 3, 4, 5, 600_007, tzinfo=UTC)
CANONICAL = {
    "n": "-42",
    "flag": "true",
    "amount": "12.50",
    "tiny": "0.00000010",
    "at": "1767323045600007",
    "day": "2026-01-31",
    "ratio": "1.0E10",
}


def leaves(spark: SparkSession) -> DataFrame:
    row = (-42, True, Decimal("12.5"), Decimal("1E-7"), AT, date(2026, 1, 31), 1e10, b"\xff\x00k", [(7,)])
    return spark.createDataFrame([(0, row)], LEAVES)


def test_non_string_leaves_are_hashed_as_their_canonical_text(bare_spark: SparkSession) -> None:
    fields = {name: PiiAction.HMAC for name in (*CANONICAL, "raw", "items[].n")}
    previous = str(bare_spark.conf.get("spark.sql.session.timeZone"))
    bare_spark.conf.set("spark.sql.session.timeZone", "America/New_York")  # the text of an instant is zone-free
    try:
        (protected,) = values(pseudonymise(leaves(bare_spark), {"_value_v1": fields}, KEY))
    finally:
        bare_spark.conf.set("spark.sql.session.timeZone", previous)
    assert protected == {
        **{name: KEY.digest(text) for name, text in CANONICAL.items()},
        "raw": KEY.digest_bytes(b"\xff\x00k"),
        "items": [{"n": KEY.digest("7")}],
    }


def test_the_erasure_scan_digests_a_subject_field_as_the_archiver_hashes_it(
    bare_spark: SparkSession, tmp_path: Path
) -> None:
    folder = tmp_path / "acme" / "crm" / "staging"
    folder.mkdir(parents=True)
    fields = [
        {"name": "customer_id", "type": "long"},
        {"name": "seen_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ]
    (folder / "seen.v1.avsc").write_text(json.dumps({"type": "record", "name": "Seen", "fields": fields}))
    (folder / "seen.yaml").write_text("subject_fields: [customer_id, seen_at]\n")
    topic = load_topic_catalog(tmp_path).topics[0]
    frame = bare_spark.createDataFrame([(-42, AT)], "customer_id long, seen_at timestamp")
    digests = frame.select(*subject_columns(frame, topic).hashed(KEY)).collect()[0]
    assert list(digests) == [KEY.digest("-42"), KEY.digest(CANONICAL["at"])]
