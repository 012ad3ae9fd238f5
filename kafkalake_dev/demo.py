"""The whole pipeline on the local stack, as ``make demo`` runs it and the end-to-end test checks it.

provision (what ``cdk deploy`` creates, from the same catalog and settings) → workload → archiver for every topic →
maintainer (native inference) → compactor on the closed partitions → maintainer again → erasure (the tombstones of
``erasure: by_key`` topics, and one explicit request for a subject found in every table with ``subject_fields``)
→ maintainer again → rows read through the partition locations Glue holds, compared with what was produced less
what was erased → inventory (terminal table and HTML page) and the erasure receipts. ``run_interop`` runs the same
pipeline with Trino counting every table before, during and after compaction and after erasure (``make interop``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.environments import EnvironmentConfig
from kafkalake.iceberg import table_catalog
from kafkalake.job_runs import archiver_run, compactor_run, erasure_run
from kafkalake.jobspec import JobArtifacts, JobRun
from kafkalake.layout import parse_data_key
from kafkalake.topic_catalog import Topic, TopicCatalog, load_topic_catalog
from kafkalake.topic_spec import TableFormat, TableMode
from kafkalake_dev.checks.interop import (
    Check,
    Counted,
    InteropReport,
    checks_for,
    count,
    count_after_erasure,
    qualified,
    removed_rows,
    sampled_during,
)
from kafkalake_dev.checks.inventory import TableInventory, table_objects, take_inventory
from kafkalake_dev.checks.query import Queried, query_table
from kafkalake_dev.local.change_stream import STATE_COLUMNS
from kafkalake_dev.local.runner import JobOutcome, LocalAssets, Submit, run_job
from kafkalake_dev.local.stack import state_dir
from kafkalake_dev.local.trino import TrinoClient, server_version, trino_service
from kafkalake_dev.local.workload import WORKLOAD_SHAPE, Produced

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.compaction.work import PartitionResult

HOURS = 6
MIN_INPUT_FILES = 2
"""The demo's partitions hold a few files each; in production the compactor's default applies
(``kafkalake.jobspec.COMPACTOR_MIN_INPUT_FILES``)."""


@dataclass
class TableResult:
    topic: Topic
    produced: Produced
    queried: Queried
    """What a reader finds through the locations Glue holds."""
    partitions_with_data: set[tuple[str, ...]]
    compaction: list[PartitionResult]
    inventory: TableInventory
    erased: set[int] = field(default_factory=set)
    """The workload's records erased from this table (by their index)."""

    @property
    def partitions_in_glue(self) -> set[tuple[str, ...]]:
        return {p.values for p in self.inventory.partitions}

    @property
    def expected(self) -> dict[tuple[str, ...], int]:
        return {tuple(p.values()): n for p, n in self.produced.without(self.erased).items()}

    @property
    def expected_tombstone_rows(self) -> int:
        return self.produced.counts["tombstones"] if self.topic.spec.tombstones == "keep" else 0

    @property
    def matches(self) -> bool:
        return (
            self.queried.rows == self.expected
            and self.queried.duplicates == 0
            and self.queried.tombstones == self.expected_tombstone_rows
            and self.queried.state == self.produced.state
        )

    @property
    def quarantine_matches(self) -> bool:
        return self.inventory.quarantined_rows == self.produced.counts["poison"]


@dataclass
class DemoReport:
    env: str
    bucket: str
    tables: list[TableResult] = field(default_factory=list)
    archived: list[dict[str, Any]] = field(default_factory=list)
    """The archiver job's JSON lines, one per topic."""
    maintainer_runs: list[dict[str, Any]] = field(default_factory=list)
    erasure: Erasure | None = None


@dataclass
class Erasure:
    """The demo's erasure: its explicit request, and every receipt of the environment (request id → receipt)."""

    request_id: str
    recorded: bool
    """False when an earlier demo run had already recorded it."""
    erased: dict[str, set[int]]
    """Per Kafka topic, the workload's records the requests cover (tombstoned keys, the subject's record)."""
    receipts: dict[str, dict[str, Any]] = field(default_factory=dict)


def demo_subject(produced: dict[str, Produced], topics: list[Topic]) -> tuple[int, str] | None:
    """The first record (its index, its subject value) good in every table with ``subject_fields``, under the same
    subject value in each, and not tombstoned in any: the person the demo's explicit request erases."""
    tables = [produced[t.kafka_topic] for t in topics if t.spec.subject_fields]
    if not tables:
        return None
    for index, value in sorted(tables[0].subjects.items()):
        if all(t.subjects.get(index) == value and index not in t.tombstoned for t in tables):
            return index, value
    return None


def erased_records(topics: list[Topic], produced: dict[str, Produced], subject: int | None) -> dict[str, set[int]]:
    """Per Kafka topic, the records the demo's requests erase: tombstoned keys (``by_key``) and the subject's."""
    erased: dict[str, set[int]] = {}
    for topic in topics:
        mine = set(produced[topic.kafka_topic].tombstoned) if topic.spec.erasure == "by_key" else set()
        if subject is not None and topic.spec.subject_fields:
            mine.add(subject)
        erased[topic.kafka_topic] = mine
    return erased


def workload_start(env: str, records: int, now: datetime) -> datetime:
    """The business-time start of the env's workload: recorded next to Kafka's data the first time, so a re-run
    plans exactly the records the topics already hold."""
    record = state_dir() / "workloads" / f"{env}.json"
    if record.exists():
        saved = json.loads(record.read_text())
        if saved.get("shape", 1) != WORKLOAD_SHAPE:
            raise RuntimeError(
                f"the local stack holds the {env} workload of an earlier kafkalake (its tombstones delete no earlier "
                f"record, {record}): `make clean` removes the local stack's data, then run `make demo` again"
            )
        if saved["records"] == records:
            return datetime.fromisoformat(saved["start"])
    start = (now - timedelta(hours=HOURS)).replace(minute=0, second=0, microsecond=0)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"start": start.isoformat(), "records": records, "shape": WORKLOAD_SHAPE}))
    return start


def run_demo(
    endpoints: Endpoints,
    settings: EnvironmentConfig,
    catalog: TopicCatalog,
    *,
    records: int,
    say: Callable[[str], None],
    producing: Callable[[Topic], Callable[[int], None]],
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    before_compaction: Callable[[dict[str, Produced]], None] = lambda _produced: None,
    compacting: Callable[[], AbstractContextManager[None]] = nullcontext,
    erase: bool = True,
    submit: Submit = run_job,
) -> DemoReport:
    """Every step of the pipeline once; each step skips what an earlier run already did. The archiver, the
    compactor and the erasure job run their job-run specifications through ``submit``: as EMR Serverless runs them
    by default, ``run_in_process`` for checks whose subject is not the jobs' packaging.
    ``before_compaction`` gets what the workload planned per Kafka topic once the maintainer made the tables;
    ``compacting`` wraps the compaction step (its job, then the maintainer); ``erase=False`` leaves erasure out."""
    from kafkalake.registry import RegistryClient
    from kafkalake_dev.local.maintainer import invoke_locally
    from kafkalake_dev.local.provision import PROVISIONED_SERVICES, provision
    from kafkalake_dev.local.spark import local_session
    from kafkalake_dev.local.topic_workload import produce

    endpoints = dataclasses.replace(endpoints, bucket=settings.bucket)
    clients = {s: make_client(endpoints, s) for s in PROVISIONED_SERVICES}
    say(f"[1/7] provisioning {settings.name} as `cdk deploy` would, from the catalog and environments.yaml")
    provisioned = provision(clients, endpoints.region, settings, catalog)
    endpoints = dataclasses.replace(endpoints, restricted_key_arn=provisioned.restricted_key_arn)
    topics = catalog.for_env(settings.name)
    start = workload_start(settings.name, records, now())
    say(f"[2/7] workload: {records} records per topic, business times from {start:%Y-%m-%d %H:00} UTC")
    registry = RegistryClient(endpoints.schema_registry_url)
    produced = {
        t.kafka_topic: produce(
            t, endpoints.kafka_bootstrap, registry, records, start=start, hours=HOURS, progress=producing(t)
        )
        for t in topics
    }
    report = DemoReport(settings.name, settings.bucket)
    spark = local_session(endpoints, "kafkalake-demo")
    spark.sparkContext.setLogLevel("ERROR")
    say("[3/7] archiver: every topic, exactly once (spark-submit of the archiver's job-run specification)")
    assets = LocalAssets.build(state_dir() / "assets" / settings.name, catalog.root)
    report.archived = run_checked(submit, archiver_run(settings, assets.artifacts), endpoints, say).lines
    say("[4/7] maintainer: Glue tables and partitions from the S3 events (native inference)")
    report.maintainer_runs.append(invoke_locally(endpoints, settings, catalog, native=True))
    before_compaction(produced)
    say("[5/7] compactor on the closed partitions (its job-run specification), then the maintainer again")
    job = compactor_run(settings, assets.artifacts, [t.name for t in topics], min_input_files=MIN_INPUT_FILES)
    with compacting():
        compaction = compaction_results(run_checked(submit, job, endpoints, say).lines, topics)
        report.maintainer_runs.append(invoke_locally(endpoints, settings, catalog, native=True))
    if erase:
        report.erasure = erase_step(endpoints, settings, topics, produced, assets.artifacts, say, submit)
        report.maintainer_runs.append(invoke_locally(endpoints, settings, catalog, native=True))
    say("[7/7] reading every table through the partition locations Glue holds")
    report.tables = table_results(spark, clients, endpoints, topics, produced, compaction, report.erasure)
    return report


def erase_step(  # noqa: PLR0917 - the demo's parts the step needs
    endpoints: Endpoints,
    settings: EnvironmentConfig,
    topics: list[Topic],
    produced: dict[str, Produced],
    artifacts: JobArtifacts,
    say: Callable[[str], None],
    submit: Submit,
) -> Erasure | None:
    """Record one explicit request for the demo's subject (once per environment: a re-run finds it), run the erasure
    job (its job-run specification) with no grace period, and collect the receipts; None without erasable tables."""
    from kafkalake.erasure import RequestStore
    from kafkalake_dev.local.erase_requests import record_request

    erasable = [t for t in topics if t.erasable]
    if not erasable:
        say("[6/7] erasure: no table declares erasure (subject_fields or erasure: by_key)")
        return None
    subject = demo_subject(produced, topics)
    keyed = [t.table for t in topics if t.spec.erasure == "by_key"]
    say(f"[6/7] erasure: the tombstones of {', '.join(keyed) or 'no by_key topic'}, and one person's request")
    request_id, recorded = "", False
    if subject is not None:
        tables = [t for t in erasable if t.spec.subject_fields]
        done = record_request(endpoints, settings.name, tables, subject[1], named=True, once=True)
        request_id, recorded = done.request.request_id, done.new
        names = ", ".join(f"{t.database}.{t.table}" for t in tables)
        say(f"      request {request_id} ({'recorded' if recorded else 'recorded by an earlier run'}): {names}")
    run_checked(submit, erasure_run(settings, artifacts, grace_minutes=0), endpoints, say)
    receipts = RequestStore(make_client(endpoints, "s3"), endpoints.bucket, settings.name).receipts()
    erased = erased_records(topics, produced, subject[0] if subject else None)
    return Erasure(request_id, recorded, erased, receipts)


def run_checked(submit: Submit, run: JobRun, endpoints: Endpoints, say: Callable[[str], None]) -> JobOutcome:
    outcome = submit(run, endpoints, say=say)
    if outcome.returncode != 0:
        raise RuntimeError(f"{run.name} exited with {outcome.returncode}:\n{outcome.output}")
    return outcome


def compaction_results(lines: list[dict[str, Any]], topics: list[Topic]) -> dict[str, list[PartitionResult]]:
    """The compactor job's JSON lines (one per partition, or per Iceberg table, naming its table), per Kafka topic."""
    from spark_jobs.compaction.table_maintenance import TableCompaction
    from spark_jobs.compaction.work import PartitionResult

    by_table = {f"{t.database}.{t.table}": t for t in topics}
    results: dict[str, list[PartitionResult]] = {t.kafka_topic: [] for t in topics}
    for line in lines:
        topic = by_table[line["table"]]
        kind = TableCompaction if topic.spec.table_format == TableFormat.ICEBERG else PartitionResult
        results[topic.kafka_topic].append(kind(**line))
    return results


def table_results(  # noqa: PLR0917 - what the comparison is made of
    spark: SparkSession,
    clients: dict[str, Any],
    endpoints: Endpoints,
    topics: list[Topic],
    produced: dict[str, Produced],
    compaction: dict[str, list[PartitionResult]],
    erasure: Erasure | None,
) -> list[TableResult]:
    """Per table: what was produced, what the demo erased, what a reader finds through Glue (an Iceberg table's
    snapshot through the Iceberg catalog), and the inventory."""
    bucket, erased = endpoints.bucket, erasure.erased if erasure else {}
    inventories = take_inventory(clients["s3"], clients["glue"], bucket, topics, tables=table_catalog(endpoints))
    results = []
    for topic, inventory in zip(topics, inventories, strict=True):
        raw, _ = table_objects(clients["s3"], bucket, topic.prefix)
        state_columns = STATE_COLUMNS if topic.spec.mode == TableMode.UPSERT else ()
        queried = query_table(spark, clients["glue"], topic, state_columns)
        with_data = (
            set(queried.rows)
            if topic.spec.table_format == TableFormat.ICEBERG
            else {tuple(parse_data_key(k).partition.values()) for k in raw}
        )
        results.append(
            TableResult(
                topic=topic,
                produced=produced[topic.kafka_topic],
                queried=queried,
                partitions_with_data=with_data,
                compaction=compaction[topic.kafka_topic],
                inventory=inventory,
                erased=erased.get(topic.kafka_topic, set()),
            )
        )
    return results


def default_html_path(env: str) -> Path:
    return Path(os.environ.get("KAFKALAKE_OUT", Path.cwd() / "out")) / f"inventory-{env}.html"


def compacted_after(table: TableResult) -> str:
    """What the compactor's run compacted of the table, as the interop check shows it."""
    from spark_jobs.compaction.table_maintenance import TableCompaction

    rewrites = [r for r in table.compaction if isinstance(r, TableCompaction)]
    if rewrites:
        return f"{sum(r.rewritten_files for r in rewrites)} files rewritten (Iceberg)"
    return f"{table.inventory.compacted}/{len(table.inventory.partitions)} partitions"


def planned_checks(topics: list[Topic], produced: dict[str, Produced]) -> list[Check]:
    """Every topic's interop checks, with what the plan says after the demo's erasure."""
    subject = demo_subject(produced, topics)
    erased = erased_records(topics, produced, subject[0] if subject else None)
    return [c for t in topics for c in checks_for(t, produced[t.kafka_topic], erased[t.kafka_topic])]


def run_interop(
    endpoints: Endpoints,
    settings: EnvironmentConfig,
    catalog_root: Path,
    *,
    records: int,
    say: Callable[[str], None],
) -> InteropReport:
    """The demo's pipeline in ``settings``' environment, with every table counted through Trino before, during and
    after compaction and after erasure, and the Iceberg tables through pyiceberg and Spark SQL after erasure too.
    Trino runs for the duration of the call only (unless another one already answers on its port)."""
    from kafkalake_dev.checks.readers import iceberg_spark_read, pyiceberg_read
    from kafkalake_dev.local.spark import local_session

    catalog = load_topic_catalog(catalog_root)
    topics = catalog.for_env(settings.name)
    client = TrinoClient()
    server = trino_service(endpoints)
    server.start()
    try:
        report = InteropReport(trino_version=server_version() or "unknown")

        def count_before(produced: dict[str, Produced]) -> None:
            say(f"interop: Trino {report.trino_version}: counting every table before compaction")
            report.counted += [Counted(c) for c in planned_checks(topics, produced)]
            for counted in report.counted:
                counted.before = count(client, counted)

        @contextmanager
        def compacting() -> Iterator[None]:
            say(f"interop: Trino {report.trino_version}: counting every table again and again while compacting")
            with sampled_during(client, report.counted):
                yield
            samples = sum(len(c.during) for c in report.counted)
            say(f"interop: {samples} counts taken during compaction; counting every table after compaction")
            for counted in report.counted:
                counted.after = count(client, counted)

        demo = run_demo(
            endpoints,
            settings,
            catalog,
            records=records,
            say=say,
            producing=lambda _topic: lambda _done: None,
            before_compaction=count_before,
            compacting=compacting,
        )
        say(f"interop: Trino {report.trino_version}, pyiceberg and Spark SQL: counting every table after erasure")
        removed = removed_rows(demo.erasure.receipts if demo.erasure else {})
        spark = local_session(dataclasses.replace(endpoints, bucket=settings.bucket), "kafkalake-demo")
        tables = table_catalog(endpoints)
        readers = {"pyiceberg": partial(pyiceberg_read, tables), "spark sql": partial(iceberg_spark_read, spark)}
        count_after_erasure(client, report.counted, removed, readers)
        for table in demo.tables:
            report.compacted[qualified(table.topic)] = compacted_after(table)
    finally:
        server.stop()
    return report
