"""The local Spark sessions and the workload's Kafka clients keep their log lines out of what a person reads: Spark's
and the JVM's go to the stack's ``logs/spark.log`` (``kafkalake_dev.local.spark``), librdkafka's to
``logs/kafka-clients.log`` (``kafkalake_dev.local.workload``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kafkalake_dev.local.spark import log_option, spark_log
from kafkalake_dev.local.workload import client_settings, kafka_client_log


def test_a_producers_librdkafka_lines_go_to_the_log_file_not_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKALAKE_STACK_DIR", str(tmp_path))
    producer = Producer(client_settings("127.0.0.1:9", {"reconnect.backoff.ms": 10}))  # nothing listens there
    deadline = time.monotonic() + 10
    while not kafka_client_log().read_text() and time.monotonic() < deadline:
        producer.poll(0.1)
    assert kafka_client_log() == tmp_path / "logs" / "kafka-clients.log"
    assert "127.0.0.1:9" in kafka_client_log().read_text()  # librdkafka's failed connection, logged
    assert capfd.readouterr().err == ""  # librdkafka writes to file descriptor 2 itself when given no logger


def test_a_sessions_jvm_logs_to_the_stacks_spark_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKALAKE_STACK_DIR", str(tmp_path))
    option = log_option(spark_log())
    config = tmp_path / "logs" / "spark-log4j2.properties"
    assert option == f"-Dlog4j2.configurationFile=file:{config}"
    assert f"appender.file.fileName = {tmp_path / 'logs' / 'spark.log'}\n" in config.read_text()
    assert "Console" not in config.read_text()
