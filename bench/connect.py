"""The peer ``bench.peer`` measures kafkalake against: the Apache Iceberg Kafka Connect sink on a Kafka Connect worker
(distributed mode, one worker, as MSK Connect runs it) of the local broker's Kafka version, writing to the local Glue
catalog and S3 (moto). Dev tooling: never shipped.

- The sink's jars: ``org.apache.iceberg:iceberg-kafka-connect`` and its dependencies, resolved by Maven from Maven
  Central into a plugin folder in the cache (the runtime zip is not published). SINK_VERSION is 1.9.2, not the
  project's ICEBERG_VERSION (1.7.1): ``iceberg-kafka-connect-events``, which the sink needs, is published for 1.5.2,
  1.9.2 and later only. Parquet needs Hadoop's ``Configuration``: hadoop-common and the few jars it loads are added
  without the rest of Hadoop's tree (as the sink's own runtime distribution does, with exclusions).
- The worker: ``org.apache.kafka.connect.cli.ConnectDistributed`` from the stack's Kafka jars (``stack.kafka_libs``,
  connect-runtime among them), its REST API on a free loopback port, its config/offset/status topics and the sink's
  control topic named per worker, so that each run starts afresh.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka.admin import AdminClient

from infra.assets import cached_folder, maven
from infra.repo import cache_dir
from kafkalake.endpoints import Endpoints
from kafkalake_dev.local import stack
from kafkalake_dev.local.workload import ensure_topic

SINK_VERSION = "1.9.2"
HADOOP = "3.3.4"
SINK_CLASS = "org.apache.iceberg.connect.IcebergSinkConnector"
METADATA_TRANSFORM = "org.apache.iceberg.connect.transforms.KafkaMetadataTransform"
"""Adds each record's Kafka partition, offset and timestamp as ``_kafka_metadata_*`` columns (flat)."""
REGION = "eu-west-1"
TASKS = 2
"""The sink's tasks: one per core of this machine, as the archiver's local Spark has."""
NO_TRANSITIVE = "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>"
PLUGIN_JARS = (
    ("org.apache.iceberg", "iceberg-kafka-connect", SINK_VERSION, ""),
    ("org.apache.iceberg", "iceberg-kafka-connect-transforms", SINK_VERSION, ""),
    ("org.apache.iceberg", "iceberg-parquet", SINK_VERSION, ""),
    ("org.apache.iceberg", "iceberg-aws", SINK_VERSION, ""),
    ("org.apache.iceberg", "iceberg-aws-bundle", SINK_VERSION, ""),
    ("org.apache.hadoop", "hadoop-common", HADOOP, NO_TRANSITIVE),
    ("org.apache.hadoop", "hadoop-auth", HADOOP, NO_TRANSITIVE),
    ("org.apache.hadoop.thirdparty", "hadoop-shaded-guava", "1.1.1", ""),
    ("com.fasterxml.woodstox", "woodstox-core", "5.3.0", ""),
    ("commons-collections", "commons-collections", "3.2.2", ""),
    ("org.apache.commons", "commons-configuration2", "2.1.1", ""),
    ("com.google.re2j", "re2j", "1.1", ""),
    ("commons-logging", "commons-logging", "1.1.3", ""),
    ("org.apache.commons", "commons-lang3", "3.12.0", ""),
)
"""The sink and what its Parquet writer, Glue catalog and S3 client load (hadoop-common's runtime needs, listed)."""
LOG4J = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File={log}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients=WARN
log4j.logger.org.apache.iceberg=INFO
log4j.logger.org.apache.kafka.connect.runtime.rest=WARN
log4j.logger.org.apache.kafka.clients.consumer.internals.ConsumerCoordinator=INFO
log4j.logger.org.apache.kafka.clients.consumer.internals.SubscriptionState=INFO
"""
"""The consumers' group joins, assignments and offset resets at INFO (the sink's control-topic consumers among them:
where each one starts reading shows in the log)."""
CONNECT_DEFAULTS = os.environ.get("BENCH_PEER_CONNECT_DEFAULTS", "1") == "1"
"""The worker at Connect's default ``scheduled.rebalance.max.delay.ms`` (5 min) and the sink's task consumers at
Kafka's default ``session.timeout.ms`` (45 s). BENCH_PEER_CONNECT_DEFAULTS=0: 0 and 10 s instead (a restarted
worker's tasks resume within seconds), under which the sink 1.9.2 lost every record of a kill run: its tasks came
back before its coordinator's control-topic consumer, whose group (``connect-<name>-coord``) holds no offset until
a commit completes and which then starts at the topic's end, after the DATA_WRITTEN events the tasks had sent with
their source offsets (docs/benchmarks.md)."""


def plugin_pom() -> str:
    dependencies = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>{x}</dependency>"
        for g, a, v, x in PLUGIN_JARS
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>kafkalake.bench</groupId><artifactId>iceberg-sink</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{dependencies}</dependencies></project>"
    )


def plugin_path() -> Path:
    """The worker's ``plugin.path``: a folder holding the sink's folder of jars (downloaded once into the cache)."""

    def fill(folder: Path) -> None:
        print(f"[bench] resolving the Iceberg Kafka Connect sink {SINK_VERSION} from Maven Central into {folder}")
        pom = folder.parent.parent / "pom.xml"
        pom.write_text(plugin_pom())
        maven(
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={folder}",
            "-DincludeScope=runtime",
            "-DexcludeArtifactIds=slf4j-api",  # the worker's own, as Connect loads org.slf4j from its classpath
        )

    return cached_folder(cache_dir() / f"iceberg-kafka-connect-{SINK_VERSION}" / "plugins" / "iceberg", fill).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def control_kind(value: bytes, topic: str, table: str) -> str:
    """A control-topic event's kind, from the names its Avro strings hold (raw UTF-8 in Avro's binary encoding)."""
    if b"s3://" in value:
        return "data_written"
    if topic.encode() in value:
        return "data_complete"
    if table.rsplit(".", maxsplit=1)[-1].encode() in value:
        return "commit_to_table"
    return "other"


@dataclass
class Worker:
    """One Connect worker in distributed mode, its files under ``folder``; ``start`` and ``stop``, or a ``with``."""

    endpoints: Endpoints
    folder: Path
    name: str = field(default_factory=lambda: f"bench-connect-{uuid.uuid4().hex[:8]}")
    port: int = field(default_factory=free_port)
    connect_defaults: bool = CONNECT_DEFAULTS
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.folder / f"{self.name}.log"

    @property
    def control_topic(self) -> str:
        return f"{self.name}-control"

    def properties(self) -> str:
        settings = {
            "bootstrap.servers": self.endpoints.kafka_bootstrap,
            "group.id": self.name,
            "config.storage.topic": f"{self.name}-configs",
            "offset.storage.topic": f"{self.name}-offsets",
            "status.storage.topic": f"{self.name}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "listeners": self.url,
            "plugin.path": str(plugin_path()),
            "plugin.discovery": "only_scan",
            # A sink task sees the control topic only in put(), which Connect calls after each poll; an idle poll
            # waits until the next offset flush (60 s by default), so a drained sink would answer a commit late.
            "offset.flush.interval.ms": "1000",
        }
        if not self.connect_defaults:
            # A worker restarted after a crash gets its tasks back at once, not after the 5 minutes Connect waits by
            # default for a lost worker to return (it is the only one).
            settings["scheduled.rebalance.max.delay.ms"] = "0"
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def start(self, wait_seconds: float = 120) -> None:
        """Start the worker's JVM (the sink's control topic made first) and wait until its REST API lists the sink."""
        self.folder.mkdir(parents=True, exist_ok=True)
        ensure_topic(AdminClient({"bootstrap.servers": self.endpoints.kafka_bootstrap}), self.control_topic, 1)
        config, log4j = self.folder / f"{self.name}.properties", self.folder / f"{self.name}.log4j.properties"
        config.write_text(self.properties())
        log4j.write_text(LOG4J.format(log=self.log))
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION}
        command = ["java", "-Xmx1g", f"-Dlog4j.configuration=file:{log4j}", "-cp", f"{stack.kafka_libs()}/*"]
        command += ["org.apache.kafka.connect.cli.ConnectDistributed", str(config)]
        with (self.folder / f"{self.name}.out").open("wb") as out:
            self.process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + wait_seconds
        while not self.lists_sink():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Connect worker {self.name} did not come up; see {self.log}")
            time.sleep(1)

    def lists_sink(self) -> bool:
        try:
            plugins = self.request("GET", "/connector-plugins")
        except (OSError, json.JSONDecodeError):
            return False
        return any(p.get("class") == SINK_CLASS for p in plugins)

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
        return json.loads(text) if text else None

    def sink(self, connector: str, topic: str, table: str, *, commit_seconds: float, tasks: int) -> None:
        """Create an Iceberg sink ``connector`` from ``topic`` to the Glue table ``table`` (``db.name``), created by
        the sink from the first records, committed every ``commit_seconds``."""
        bucket, endpoint = self.endpoints.bucket, self.endpoints.aws_endpoint_url
        config = {
            "connector.class": SINK_CLASS,
            "tasks.max": str(tasks),
            "topics": topic,
            "transforms": "kafka",
            "transforms.kafka.type": METADATA_TRANSFORM,
            "iceberg.tables": table,
            "iceberg.tables.auto-create-enabled": "true",
            "iceberg.tables.auto-create-props.format-version": "2",
            "iceberg.control.topic": self.control_topic,
            "iceberg.control.commit.interval-ms": str(int(commit_seconds * 1000)),
            "iceberg.catalog.catalog-impl": "org.apache.iceberg.aws.glue.GlueCatalog",
            "iceberg.catalog.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "iceberg.catalog.warehouse": f"s3://{bucket}/peer-warehouse",
            "iceberg.catalog.glue.endpoint": endpoint,
            "iceberg.catalog.s3.endpoint": endpoint,
            "iceberg.catalog.s3.path-style-access": "true",
            "iceberg.catalog.s3.access-key-id": "testing",
            "iceberg.catalog.s3.secret-access-key": "testing",
            "iceberg.catalog.client.region": REGION,
        }
        if not self.connect_defaults:
            # A task's consumer killed with its worker leaves the group after this, not Kafka's default 45 s. The
            # sink's own control-topic consumers (iceberg.kafka.*) keep the default.
            config["consumer.override.session.timeout.ms"] = "10000"
        self.request("PUT", f"/connectors/{connector}/config", config)

    def failures(self, connector: str) -> list[str]:
        """The traces of the connector's failed parts (none while it runs)."""
        try:
            status = self.request("GET", f"/connectors/{connector}/status")
        except urllib.error.HTTPError:  # not created yet
            return []
        parts = [status["connector"], *status.get("tasks", [])]
        return [p.get("trace", "") for p in parts if p.get("state") == "FAILED"]

    def control_state(self, connector: str, topic: str, table: str) -> dict[str, Any]:
        """What the sink's consumer groups committed and what its control topic holds, to explain a commit: the
        Connect group's offsets of ``topic`` (``connect-<connector>``, which the workers commit with their
        DATA_WRITTEN events), the coordinator's control-topic offset (``connect-<connector>-coord``, committed after
        each of its commits) and the control topic's committed records (offset, broker time, kind: ``data_written``
        names data files, ``data_complete`` names ``topic``, ``commit_to_table`` names ``table``, ``other`` is a
        START_COMMIT or COMMIT_COMPLETE)."""
        bootstrap = self.endpoints.kafka_bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        groups = {"source": f"connect-{connector}", "coordinator": f"connect-{connector}-coord"}
        committed: dict[str, dict[str, int]] = {}
        for role, group in groups.items():
            found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=15)
            committed[role] = {f"{p.topic}[{p.partition}]": p.offset for p in found.topic_partitions or []}
        reader = KafkaConsumer(
            {"bootstrap.servers": bootstrap, "group.id": f"{self.name}-reader", "isolation.level": "read_committed"}
        )
        records: list[dict[str, Any]] = []
        try:
            reader.assign([TopicPartition(self.control_topic, 0, OFFSET_BEGINNING)])
            end = reader.get_watermark_offsets(TopicPartition(self.control_topic, 0), timeout=10)[1]
            deadline = time.monotonic() + 20
            while (not records or records[-1]["offset"] < end - 1) and time.monotonic() < deadline:
                message = reader.poll(1)
                if message is None or message.error():
                    continue
                kind = control_kind(message.value() or b"", topic, table)
                records.append({"offset": message.offset(), "ms": message.timestamp()[1], "kind": kind})
        finally:
            reader.close()
        return {"groups": groups, "committed": committed, "control_end_offset": end, "control_records": records}

    def kill(self) -> None:
        """SIGKILL the worker's JVM, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """Stop the worker (SIGTERM, SIGKILL after 30 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
