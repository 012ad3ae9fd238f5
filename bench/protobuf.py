"""B1 on Protobuf (issue #51): the archiver on a topic of Confluent-framed Protobuf records against the fairest
Spark-alone pipeline with the same read, the same decoder and the same committer, in the same run: median of
BENCH_PAIRS (3) alternated pairs, with the spread; and in the same rounds Spark alone on the same records in Avro
(B1's topic and ``from_avro``), so the Protobuf decoder is measured against Avro's.

The records are B1's (``bench.archiver.SCHEMA``'s five fields) as a Protobuf message (``PAYMENT``), registered in the
registry with schemaType PROTOBUF. The archiver reads the topic as a ``value_format: protobuf`` topic
(``bench.archiver_run.bench_topic``); Spark alone (``bench.spark_alone``) decodes the payload past the header and the
message index with the archiver's own JVM decoder (``spark_jobs.protobuf_decoder``: Spark's ``from_protobuf`` is not
to be had for Spark 3.5 from Maven Central). Both children learn the format from ``FORMAT``."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from bench.archiver import PAIRS, PARTITIONS, archive, forget_offsets, median_run, payment_fields, spark_alone
from bench.archiver import produce as produce_avro
from bench.common import cpu_per_million, delivered, pair_ratios, rate_after_start, send, spread, write_result
from kafkalake.endpoints import Endpoints
from kafkalake.protobuf_schema import ProtoSchema, compile_files
from kafkalake.registered_formats import PROTOBUF, ROOT_NAME, ProtobufDecoding, protobuf_columns
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.wire import frame
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.workload import ensure_topic

FORMAT = "BENCH_VALUE_FORMAT"
"""The environment variable that makes a child read the Protobuf topic (``protobuf``)."""
RECORDS = int(os.environ.get("BENCH_PROTOBUF_RECORDS", "1000000"))
PAYMENT = """syntax = "proto3";
package bench;
message Payment {
  string id = 1;
  int64 amount_cents = 2;
  string currency = 3;
  int64 created_at_ms = 4;
  string note = 5;
}
"""


def protobuf_child() -> bool:
    """Whether this child reads the Protobuf topic (``FORMAT``)."""
    return os.environ.get(FORMAT) == "protobuf"


def payment() -> tuple[str, ProtobufDecoding]:
    """``PAYMENT`` as the archiver renders it (the table's columns) and decodes it."""
    return protobuf_columns(ProtoSchema(compile_files({ROOT_NAME: PAYMENT}, ROOT_NAME), ROOT_NAME), None)


def produce(endpoints: Endpoints, topic: str, records: int) -> float:
    """``records`` Payments (3 partitions), B1's values; their mean size."""

    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), topic, PARTITIONS)
    registry = RegistryClient(endpoints.schema_registry_url)
    schema_id = registry.register(value_subject(topic), PAYMENT, PROTOBUF)
    _, decoding = payment()
    message_class = ProtoSchema(decoding.descriptor_set, ROOT_NAME).message_class(decoding.message)
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "linger.ms": 50, "batch.size": 1_000_000})
    base_ms, sizes = int(time.time() * 1000) - 3_600_000, 0
    for i in range(records):
        record = message_class(**payment_fields(i, base_ms))
        value = frame(schema_id, record.SerializeToString(), decoding.index)
        sizes += len(value)
        send(producer, topic, str(i).encode(), value)
    delivered(producer, topic)
    return sizes / records


def measure(endpoints: Endpoints) -> dict[str, Any]:
    """BENCH_PAIRS rounds, each in turn: the archiver on the Protobuf topic, Spark alone on it, and Spark alone on the
    same records as B1's Avro topic (``from_avro``): the archiver against its baseline, and the Protobuf decoder
    against Avro's."""
    topic, avro_topic = (f"bench.{kind}.{uuid.uuid4().hex[:8]}" for kind in ("protobuf", "avro"))
    value_bytes = produce(endpoints, topic, RECORDS)
    avro_bytes = produce_avro(endpoints, avro_topic, RECORDS, quiet=True)
    per_plan, child = RECORDS, {FORMAT: "protobuf"}  # one plan, as B1 at the default limit
    ours, alone, avro = [], [], []
    for _ in range(PAIRS):
        forget_offsets(endpoints, topic)
        ours.append(archive([topic], per_plan, env=child))
        alone.append(spark_alone(topic, per_plan, env=child))
        avro.append(spark_alone(avro_topic, per_plan))
        latest = [round(rate_after_start(runs[-1])) for runs in (ours, alone, avro)]
        print(f"[bench] records/s after the start: archiver, Spark alone, Spark alone on Avro: {latest}", flush=True)
    rates = [[rate_after_start(r) for r in runs] for runs in (ours, alone, avro)]
    baseline, decoder = pair_ratios(rates[0], rates[1]), pair_ratios(rates[1], rates[2])
    return {
        "records": RECORDS,
        "avg_value_bytes": value_bytes,
        "avg_value_bytes_avro": avro_bytes,
        "archiver": median_run(ours),
        "spark_alone": median_run(alone),
        "spark_alone_avro": median_run(avro),
        "ratio_archiver_to_spark_alone_after_start": statistics.median(baseline),
        "ratio_pairs": baseline,
        "ratio_spread": spread(baseline),
        "ratio_protobuf_to_avro_spark_alone": statistics.median(decoder),
        "ratio_protobuf_to_avro_pairs": decoder,
        "archiver_cpu_seconds_per_million_records": statistics.median(cpu_per_million(r) for r in ours),
        "spark_alone_cpu_seconds_per_million_records": statistics.median(cpu_per_million(r) for r in alone),
        "spark_alone_avro_cpu_seconds_per_million_records": statistics.median(cpu_per_million(r) for r in avro),
    }


def main() -> None:
    endpoints = local_endpoints()
    with stack.running():
        result = measure(endpoints)
        path = write_result("archiver-protobuf", {"protobuf": result})
        ratio, (low, high) = result["ratio_archiver_to_spark_alone_after_start"], result["ratio_spread"]
        decoder = result["ratio_protobuf_to_avro_spark_alone"]
        print(f"[bench] archiver ÷ Spark alone on Protobuf: {ratio:.2f} (pairs {low:.2f}-{high:.2f}); Spark alone on")
        print(f"[bench] Protobuf ÷ on the same records in Avro: {decoder:.2f} → {path}")
