"""The Protobuf archiver benchmark's parts (``bench.protobuf``): its topic is B1's records, and each child reads it as
the format the benchmark names."""

from __future__ import annotations

import json

import pytest

from bench import protobuf
from bench.archiver import SCHEMA
from bench.archiver_run import bench_topic
from kafkalake.topic_spec import ValueFormat


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
