"""The Protobuf archiver benchmark's parts (``bench.protobuf``): its topic is B1's records, and each child reads it as
the format the benchmark names."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pyspark.sql import SparkSession

from bench import protobuf
from bench.archiver import SCHEMA
from bench.archiver_run import bench_topic
from bench.hashing import VARIANT
from bench.spark_alone import decoded
from kafkalake.protobuf_schema import ProtoSchema
from kafkalake.registered_formats import ROOT_NAME
from kafkalake.topic_spec import ValueFormat
from kafkalake.wire import encode, frame


def test_the_protobuf_payment_has_b1s_columns() -> None:
    """Same records, same columns: the comparison with B1's Avro topic is of the format alone."""
    columns, decoding = protobuf.payment()
    assert json.loads(columns)["fields"] == json.loads(SCHEMA)["fields"]
    assert (decoding.message, decoding.index) == ("bench.Payment", b"\x00")


def test_a_child_reads_the_topic_in_the_format_the_benchmark_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(protobuf.FORMAT, raising=False)
    assert bench_topic("t", 100).spec.value_format == ValueFormat.AVRO
    monkeypatch.setenv(protobuf.FORMAT, "protobuf")
    topic = bench_topic("t", 100)
    assert topic.spec.value_format == ValueFormat.PROTOBUF
    assert topic.schemas == (protobuf.payment()[0],)  # the catalog declares the registered version: none is held


def test_spark_alone_decodes_the_protobuf_topic_past_header_and_index_into_the_avro_topics_rows(
    bare_spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The baseline's decode: the archiver's JVM decoder past the 5-byte header and the message index, giving the
    rows ``from_avro`` gives for the same record on B1's topic."""
    record = {"id": "p-000000000007", "amount_cents": 49, "currency": "EUR", "created_at_ms": 1_764_000_000_000}
    record["note"] = "n" * 140
    _, decoding = protobuf.payment()
    message = ProtoSchema(decoding.descriptor_set, ROOT_NAME).message_class(decoding.message)(**record)
    framed = {"protobuf": frame(9, message.SerializeToString(), decoding.index), "avro": encode(9, SCHEMA, record)}
    at = datetime(2026, 11, 28, tzinfo=UTC)
    monkeypatch.delenv(VARIANT, raising=False)
    rows = {}
    for value_format, value in framed.items():
        monkeypatch.setenv(protobuf.FORMAT, value_format)
        raw = bare_spark.createDataFrame(
            [(bytearray(value), 2, 41, at)], "value binary, partition int, offset long, timestamp timestamp"
        )
        rows[value_format] = [row.asDict() for row in decoded(raw).collect()]
    assert rows["protobuf"] == rows["avro"]
    assert [{**row, "timestamp": None} for row in rows["avro"]] == [
        {**record, "_kafka_partition": 2, "_kafka_offset": 41, "timestamp": None}  # collected naive, in local time
    ]
