"""Personal fields protected in the plan's rows, on a bare local session (chispa-style: DataFrames in, rows out):
hashed, dropped and masked, nested and under nullable parents, in every schema version that has the field."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from kafkalake.personal import KEY_ID_COLUMN, KeyInvalid, PiiAction, PseudonymKey
from spark_jobs.archiver.pseudonyms import pseudonymise

KEY = PseudonymKey("k-2026", bytes(range(40)))
ROWS = (
    "_kafka_offset long, "
    "_value_v1 struct<id:long, email:string, card:string, customer:struct<id:long, phone:string, city:string>>, "
    "_value_v2 struct<id:long, email:string, card:string, iban:string>"
)
FIELDS = {
    "id": PiiAction.HMAC,
    "email": PiiAction.HMAC,
    "card": PiiAction.MASK_LAST4,
    "customer.id": PiiAction.HMAC,
    "customer.phone": PiiAction.DROP,
    "iban": PiiAction.DROP,
}
COLUMNS = ("_value_v1", "_value_v2")


def each_version(fields: dict[str, PiiAction]) -> dict[str, dict[str, PiiAction]]:
    """The same personal fields for every version's value column."""
    return {column: fields for column in COLUMNS}


def plan(spark: SparkSession) -> DataFrame:
    """Version 1 with a nested customer (present, null), version 2 with a field only it has, a tombstone row."""
    return spark.createDataFrame(
        [
            (0, (7, "ann@example.com", "4111111111111111", (42, "+4412345678", "Leeds")), None),
            (1, (8, None, "123", None), None),
            (2, None, (9, "bob@example.com", "5500000000000004", "GB33BUKB20201555555555")),
            (3, None, None),
        ],
        ROWS,
    )


def values(frame: DataFrame, column: str) -> list[dict[str, Any] | None]:
    rows = frame.orderBy("_kafka_offset").collect()
    return [r[column].asDict(recursive=True) if r[column] is not None else None for r in rows]


def test_every_version_has_its_fields_hashed_masked_and_dropped(bare_spark: SparkSession) -> None:
    protected = pseudonymise(plan(bare_spark), each_version(FIELDS), KEY)
    assert values(protected, "_value_v1") == [
        {
            "id": KEY.digest("7"),
            "email": KEY.digest("ann@example.com"),
            "card": "************1111",
            "customer": {"id": KEY.digest("42"), "city": "Leeds"},
        },
        {"id": KEY.digest("8"), "email": None, "card": "123", "customer": None},
        None,
        None,
    ]
    assert values(protected, "_value_v2") == [
        None,
        None,
        {"id": KEY.digest("9"), "email": KEY.digest("bob@example.com"), "card": "************0004"},
        None,
    ]


def test_hashed_fields_become_strings_and_dropped_ones_leave_the_schema(bare_spark: SparkSession) -> None:
    protected = pseudonymise(plan(bare_spark), each_version(FIELDS), KEY)
    assert protected.schema["_value_v1"].dataType.simpleString() == (
        "struct<id:string,email:string,card:string,customer:struct<id:string,city:string>>"
    )
    assert protected.schema["_value_v2"].dataType.simpleString() == "struct<id:string,email:string,card:string>"


def test_the_key_id_stands_beside_the_pseudonyms(bare_spark: SparkSession) -> None:
    protected = pseudonymise(plan(bare_spark), each_version(FIELDS), KEY)
    assert {r[KEY_ID_COLUMN] for r in protected.collect()} == {"k-2026"}
    masked_only = pseudonymise(plan(bare_spark), each_version({"card": PiiAction.MASK_LAST4}), None)
    assert KEY_ID_COLUMN not in masked_only.columns


def test_a_dropped_parent_takes_its_children(bare_spark: SparkSession) -> None:
    fields = {"customer": PiiAction.DROP, "customer.phone": PiiAction.DROP, "customer.id": PiiAction.HMAC}
    protected = pseudonymise(plan(bare_spark), each_version(fields), KEY)
    assert protected.schema["_value_v1"].dataType.simpleString() == "struct<id:bigint,email:string,card:string>"


def test_no_personal_fields_leaves_the_rows_as_they_are(bare_spark: SparkSession) -> None:
    rows = plan(bare_spark)
    assert pseudonymise(rows, each_version({}), None) is rows


def test_hashing_without_a_key_is_refused() -> None:
    with pytest.raises(KeyInvalid, match="set pseudonym_secret_arn"):
        pseudonymise(None, each_version(FIELDS), None)  # type: ignore[arg-type]
