"""The compactor on the local stack: moto S3 through S3A, moto Glue, local Spark.

Past 400 lines: its scenarios (target sizes, a SIGKILL rolled forward, late files, the legacy layout, a reader during
the swap, an output that does not match its inputs) share one ``Lake`` and the ``compactor`` builder with its clock."""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import math
import os
import random
import subprocess
import sys
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from infra.repo import catalog_dir
from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.jobspec import EMR_ICEBERG_JAR
from kafkalake.layout import DataKey, Partition, TablePrefix, is_compaction_output
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.local.principals import not_recorded
from kafkalake_dev.local.sandbox import isolated_env, register_complete_partitions, with_bucket
from spark_jobs.compaction.job import Compactor, main
from spark_jobs.compaction.manifest import ManifestState
from spark_jobs.compaction.verify import VERIFICATION_FAILED
from spark_jobs.compaction.work import Knobs
from tests.cli_args import compact_submit
from tests.crashes import DeletesThenCrash, crash_after_saving, kill_on_progress, random_kills
from tests.integration.lake_files import small_file

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-compactor-tests"
CATALOG = load_topic_catalog(catalog_dir())
PARTITION = Partition(1, date(2026, 11, 20), 7)
NOW = datetime(2026, 11, 21, 12, tzinfo=UTC)
ROWS_PER_FILE = 40
LEASE_TTL_SECONDS = 3
"""Short, so a run after a SIGKILL takes the killed run's tables over within seconds."""


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, BUCKET)


class Lake:
    def __init__(self, endpoints: Endpoints, topic: Topic | None = None) -> None:
        if topic is None:
            template = CATALOG.get("sensor-readings", "staging")
            suffix = uuid.uuid4().hex[:8]
            spec = template.spec.model_copy(update={"database": f"compact_{suffix}"})
            topic = dataclasses.replace(template, env=f"t{suffix}", spec=spec)
        self.topic: Topic = topic
        self.endpoints, self.bucket = endpoints, endpoints.bucket
        self.s3, self.glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
        self.next_offset = {0: 0, 1: 0, 2: 0}

    def put_files(self, count: int, partition: Partition = PARTITION) -> int:
        for i in range(count):
            kafka_partition = i % 3
            first = self.next_offset[kafka_partition]
            body = small_file(kafka_partition, first, ROWS_PER_FILE)
            key = DataKey(self.topic.prefix, partition, kafka_partition, first, first + ROWS_PER_FILE - 1).key()
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=body)
            self.next_offset[kafka_partition] += ROWS_PER_FILE
        return count * ROWS_PER_FILE

    def register(self, partitions: list[Partition] | None = None) -> None:
        sample = pq.read_schema(io.BytesIO(small_file(0, 0, 1)))
        register_complete_partitions(self.glue, self.topic, self.bucket, sample, partitions or [PARTITION])

    def manifest(self) -> Any:
        [key] = [k for k in self.keys(self.topic.prefix.state_prefix()) if k.endswith("manifest.json")]
        return json.loads(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def location(self, partition: Partition = PARTITION) -> str:
        part = self.glue.get_partition(
            DatabaseName=self.topic.database, TableName=self.topic.table, PartitionValues=partition.values()
        )["Partition"]
        return str(part["StorageDescriptor"]["Location"])

    def keys(self, prefix: str) -> dict[str, int]:
        return list_objects(self.s3, self.bucket, prefix)

    def steps(self) -> int:
        """How far compaction got here: each partition's manifest counts its state's place (planned 1 … cleaned 5)."""
        order = list(ManifestState)
        keys = [k for k in self.keys(self.topic.prefix.state_prefix()) if k.endswith("manifest.json")]
        states = [json.loads(self.s3.get_object(Bucket=self.bucket, Key=k)["Body"].read())["state"] for k in keys]
        return sum(order.index(ManifestState(state)) + 1 for state in states)

    def raw(self) -> dict[str, int]:
        return {k: v for k, v in self.keys(self.topic.prefix.data_prefix()).items() if not is_compaction_output(k)}

    def read_current(self, spark: SparkSession, partition: Partition = PARTITION) -> Any:
        """What a reader sees: the files at the location Glue holds."""
        return spark.read.parquet(self.location(partition).replace("s3://", "s3a://"))


def compactor(spark: SparkSession, lake: Lake, now: datetime = NOW, **knobs: Any) -> Compactor:
    settings = {"target_file_bytes": 64 * 1024, "min_input_files": 10, "grace_period": timedelta(hours=1), **knobs}
    return Compactor(spark, lake.endpoints, [lake.topic], Knobs(**settings), now=lambda: now)


def assert_exact(spark: SparkSession, lake: Lake, rows: int) -> None:
    frame = lake.read_current(spark)
    assert frame.count() == rows
    assert frame.select("_kafka_partition", "_kafka_offset").distinct().count() == rows
    assert lake.location().endswith("/")
    assert lake.keys(lake.location().split(f"{lake.bucket}/", 1)[1]), "the partition points at a missing location"


def test_500_small_files_become_target_sized_files(spark: SparkSession, endpoints: Endpoints) -> None:
    lake = Lake(endpoints)
    rows = lake.put_files(500)
    lake.register()
    before = lake.raw()
    input_bytes = sum(before.values())
    [result] = compactor(spark, lake).run()
    assert (result.action, result.files_before, result.rows) == ("compacted", 500, rows)
    outputs = {k: v for k, v in lake.keys(lake.topic.prefix.compacted_prefix()).items() if k.endswith(".parquet")}
    assert len(outputs) == round(sum(outputs.values()) / (64 * 1024)) < math.ceil(input_bytes / (64 * 1024))
    for size in outputs.values():
        assert 0.75 * 64 * 1024 <= size <= 1.25 * 64 * 1024, sorted(outputs.values())
    assert lake.location().startswith(f"s3://{BUCKET}/{lake.topic.prefix.compacted_prefix()}")
    assert_exact(spark, lake, rows)
    covered = sorted(r for ranges in lake.manifest()["output_ranges"].values() for r in ranges)
    for kafka_partition in range(3):  # the recorded ranges tile each Kafka partition's offsets without a gap
        mine = [(first, last) for p, first, last, _ in covered if p == kafka_partition]
        assert mine[0][0] == 0 and mine[-1][1] == lake.next_offset[kafka_partition] - 1
        assert all(later[0] == earlier[1] + 1 for earlier, later in itertools.pairwise(mine))
    assert set(lake.manifest()["output_ranges"]) == set(outputs)
    assert lake.raw() == before  # inputs stay through the grace period
    compactor(spark, lake, now=NOW + timedelta(minutes=30)).run()
    assert lake.raw() == before
    compactor(spark, lake, now=NOW + timedelta(hours=2)).run()
    assert lake.raw() == {}
    assert_exact(spark, lake, rows)


AFTER = {
    "after_write": ManifestState.WRITTEN,
    "after_verify": ManifestState.VERIFIED,
    "after_swap": ManifestState.SWAPPED,
}


@pytest.mark.parametrize("crash_at", ["after_write", "after_verify", "after_swap", "mid_delete"])
def test_killed_compactor_rolls_forward(
    spark: SparkSession, endpoints: Endpoints, crash_at: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = Lake(endpoints)
    rows = lake.put_files(60)
    lake.register()
    later = NOW + timedelta(hours=2)
    if crash_at == "mid_delete":
        compactor(spark, lake).run()
        cleaner = compactor(spark, lake, now=later)
        cleaner.s3 = DeletesThenCrash(cleaner.s3, deletes=30)  # half of the 60 inputs
        [crashed] = cleaner.run()
    else:
        with monkeypatch.context() as patch:
            crash_after_saving(patch, AFTER[crash_at])
            [crashed] = compactor(spark, lake).run()
    assert crashed.action == "failed" and "injected crash" in crashed.reason, crashed
    assert_exact(spark, lake, rows)  # readers are fine at every step
    compactor(spark, lake).run()
    compactor(spark, lake, now=later).run()
    assert_exact(spark, lake, rows)
    runs = {k.split("/run-")[1].split("/")[0] for k in lake.keys(lake.topic.prefix.compacted_prefix())}
    assert len(runs) == 1, "orphaned compaction output"
    assert lake.raw() == {}


def test_late_files_become_visible_after_one_more_cycle(spark: SparkSession, endpoints: Endpoints) -> None:
    lake = Lake(endpoints)
    rows = lake.put_files(30)
    lake.register()
    compactor(spark, lake).run()
    late_rows = lake.put_files(5)  # arrive after the swap, in the raw directory
    assert lake.read_current(spark).count() == rows  # not visible yet, and nothing counted twice
    [result] = compactor(spark, lake, now=NOW + timedelta(minutes=10)).run()
    assert result.action == "compacted"
    assert_exact(spark, lake, rows + late_rows)
    compactor(spark, lake, now=NOW + timedelta(hours=3)).run()
    assert_exact(spark, lake, rows + late_rows)
    assert lake.raw() == {}


def test_partitions_compacted_under_the_legacy_layout_are_read_and_moved_under_the_table(
    spark: SparkSession, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lake compacted before the output moved under the tables (``compacted/<topic path>/…/run=<id>/``): readers
    of Glue's locations still read it exactly; the next run moves each such partition under the table's location
    (one with a late file, one without), and the clean-up deletes the legacy files after the grace period."""
    lake = Lake(endpoints)
    hours = [PARTITION, Partition(1, PARTITION.dt, 8)]
    rows = {hour: lake.put_files(12, hour) for hour in hours}
    lake.register(hours)
    legacy = lake.topic.prefix.legacy_compacted_prefix()

    def legacy_output(self: TablePrefix, partition: Partition, run_id: str) -> str:  # the layout before the move
        return f"{self.legacy_compacted_prefix()}{partition.path()}run={run_id}/"

    with monkeypatch.context() as patch, not_recorded("the lake as an older release's compactor left it"):
        patch.setattr(TablePrefix, "compaction_output_prefix", legacy_output)
        compactor(spark, lake).run()
        compactor(spark, lake, now=NOW + timedelta(hours=2)).run()
    assert lake.raw() == {} and all(lake.location(h).startswith(f"s3://{BUCKET}/{legacy}") for h in hours)
    for hour in hours:
        assert lake.read_current(spark, hour).count() == rows[hour]
    rows[PARTITION] += lake.put_files(1)  # a late file in the first hour only
    results = compactor(spark, lake, now=NOW + timedelta(hours=3)).run()
    assert sorted((r.partition, r.action) for r in results) == sorted((h.values(), "compacted") for h in hours)
    for hour in hours:
        assert lake.location(hour).startswith(f"s3://{BUCKET}/{lake.topic.prefix.compacted_prefix()}")
        frame = lake.read_current(spark, hour).select("_kafka_partition", "_kafka_offset")
        assert frame.count() == frame.distinct().count() == rows[hour]
    assert lake.keys(legacy), "legacy files stay through the grace period"
    compactor(spark, lake, now=NOW + timedelta(hours=5)).run()
    assert lake.keys(legacy) == {} and lake.raw() == {}
    for hour in hours:
        assert lake.read_current(spark, hour).count() == rows[hour]


def test_compact_submit_sends_the_job_run_request(local_stack: Endpoints) -> None:
    """The command uses boto3's default chain and endpoint configuration (as in AWS); boto3's own endpoint variable
    points it at the local stack here."""
    from typer.testing import CliRunner

    from kafkalake_dev.cli.app import app

    emr = make_client(local_stack, "emr-serverless")
    application = emr.create_application(
        name=f"kafkalake-{uuid.uuid4().hex[:6]}", releaseLabel="emr-7.7.0", type="SPARK"
    )["applicationId"]
    role = "arn:aws:iam::123456789012:role/kafkalake-staging-compactor"
    result = CliRunner(env={"AWS_ENDPOINT_URL_EMR_SERVERLESS": local_stack.aws_endpoint_url}).invoke(
        app,
        [*compact_submit(application, role), "--jar", "s3://assets/avro.jar", "--target-file-mb", "256", "--wait"],
    )
    assert result.exit_code == 0, result.output
    run_id = result.output.split("started job run ", 1)[1].split()[0]
    assert "SUCCESS" in result.output
    run = emr.get_job_run(applicationId=application, jobRunId=run_id)["jobRun"]
    assert run["executionRole"] == role
    submit = run["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == "s3://assets/entrypoint.py"
    assert submit["entryPointArguments"] == [
        "compact",
        "--env",
        "staging",
        "--catalog",
        "catalog",
        "--table",
        "sensor-readings",
        "--target-file-mb",
        "256",
    ]
    parameters = submit["sparkSubmitParameters"]
    assert parameters.startswith(
        "--py-files s3://assets/jobs.zip --conf spark.archives=s3://assets/catalog.zip#catalog,"
        "s3://assets/environment.tgz#environment "
    )
    assert "--conf spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python" in parameters
    assert "--conf spark.emr-serverless.driverEnv.KAFKALAKE_BUCKET=kafkalake-staging-lake" in parameters
    # the shipped jars, and EMR's own Iceberg runtime (kafkalake.jobspec.EMR_ICEBERG_JAR)
    assert f"--conf spark.jars=s3://assets/kafka.jar,s3://assets/avro.jar,{EMR_ICEBERG_JAR} " in parameters
    assert "spark.jars.packages" not in parameters  # nothing is resolved at run time (private subnets)


def test_reader_during_compaction_with_50_late_files(spark: SparkSession, endpoints: Endpoints) -> None:
    import threading

    lake = Lake(endpoints)
    rows = lake.put_files(60)
    lake.register()
    done = threading.Event()
    late_rows: list[int] = []

    def compact_while_late_files_arrive() -> None:
        try:
            writer = threading.Thread(target=lambda: late_rows.append(lake.put_files(50)))
            writer.start()
            compactor(spark, lake).run()
            writer.join()
        finally:
            done.set()

    worker = threading.Thread(target=compact_while_late_files_arrive)
    worker.start()
    seen = []
    while not done.is_set():
        frame = lake.read_current(spark).select("_kafka_partition", "_kafka_offset")
        total, distinct = frame.count(), frame.distinct().count()
        seen.append(total)
        assert total == distinct, "a reader saw duplicate rows"
        assert total >= rows, "a reader saw fewer rows than were committed"
    worker.join()
    assert seen, "the reader never ran during compaction"
    compactor(spark, lake, now=NOW + timedelta(minutes=10)).run()  # the next cycle takes the late files
    assert_exact(spark, lake, rows + late_rows[0])


def test_output_that_does_not_match_the_inputs_is_never_swapped_in(
    spark: SparkSession, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = Lake(endpoints)
    rows = lake.put_files(30)
    lake.register()
    raw_location = lake.location()
    with monkeypatch.context() as patch:
        crash_after_saving(patch, ManifestState.WRITTEN)
        [crashed] = compactor(spark, lake).run()
    assert "injected crash" in crashed.reason
    [output, *_] = lake.manifest()["outputs"]
    lake.s3.copy_object(Bucket=BUCKET, Key=output.replace(".parquet", "-copy.parquet"), CopySource=f"{BUCKET}/{output}")
    [refused] = compactor(spark, lake).run()
    assert refused.action == "failed" and VERIFICATION_FAILED in refused.reason, refused
    assert "-copy.parquet" in refused.reason and "duplicates" in refused.reason, refused
    assert lake.location() == raw_location  # readers never see the bad output
    assert lake.manifest()["state"] == "planned"  # rolled back: the next run writes the output again
    compactor(spark, lake).run()
    assert_exact(spark, lake, rows)


def hive_topics(catalog_folder: Path, env: str) -> list[Topic]:
    """The isolated environment's Hive topics (its Iceberg topic's compaction is tests/integration/
    test_iceberg_compaction.py's)."""
    return [t for t in load_topic_catalog(catalog_folder).for_env(env) if t.spec.table_format == TableFormat.HIVE]


def test_one_run_over_three_tables_compacts_the_good_one_and_reports_the_others(
    spark: SparkSession,
    endpoints: Endpoints,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The job's own entry point over three tables of an isolated environment: one has data on S3 but no table in
    Glue, one's output fails verification (an extra copy of a file appears in its run directory), one is fine."""
    env, catalog_folder, _ = isolated_env(tmp_path)
    missing, refused, good = (Lake(endpoints, topic) for topic in hive_topics(catalog_folder, env.name)[:3])
    rows = {lake.topic.name: lake.put_files(30) for lake in (missing, refused, good)}
    refused.register()
    good.register()
    refused_location = refused.location()
    with monkeypatch.context() as patch:
        crash_after_saving(patch, ManifestState.WRITTEN)
        compactor(spark, refused).run()
    [output, *_] = refused.manifest()["outputs"]
    refused.s3.copy_object(
        Bucket=BUCKET, Key=output.replace(".parquet", "-copy.parquet"), CopySource=f"{BUCKET}/{output}"
    )
    for name, value in endpoints.to_env().items():
        monkeypatch.setenv(name, value)
    tables = [a for lake in (missing, refused, good) for a in ("--table", lake.topic.name)]
    with pytest.raises(SystemExit) as exited:
        main(["--env", env.name, "--catalog", str(catalog_folder), "--target-file-mb", "1", *tables])
    assert exited.value.code == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    by_table = {line["table"]: line for line in lines}
    assert by_table[f"{good.topic.database}.{good.topic.table}"]["action"] == "compacted"
    assert_exact(spark, good, rows[good.topic.name])
    assert good.location().startswith(f"s3://{BUCKET}/{good.topic.prefix.compacted_prefix()}")
    reported = by_table[f"{missing.topic.database}.{missing.topic.table}"]
    assert reported["action"] == "failed" and "is not in Glue" in reported["reason"], reported
    assert missing.keys(missing.topic.prefix.compacted_prefix()) == {}
    reported = by_table[f"{refused.topic.database}.{refused.topic.table}"]
    assert reported["action"] == "failed" and VERIFICATION_FAILED in reported["reason"], reported
    assert refused.location() == refused_location  # left as it was
    assert refused.read_current(spark).count() == rows[refused.topic.name]


def test_sigkill_at_random_moments_then_a_clean_run(
    spark: SparkSession, local_stack: Endpoints, tmp_path: Path
) -> None:
    """`kafkalake compact run` over three tables of six partitions each is killed with SIGKILL (its whole process group)
    up to three times (until a run ends by itself, having done all that was left), each at a random point of its own
    progress, then left to finish; inputs are deleted as soon as a run allows (--grace-minutes 0), so kills land while
    writing, verifying, swapping and cleaning."""
    env, catalog_folder, environments = isolated_env(tmp_path)
    endpoints = with_bucket(local_stack, env.bucket)
    hours = [Partition(1, date(2026, 11, 20), hour) for hour in range(6)]
    lakes = [Lake(endpoints, topic) for topic in hive_topics(catalog_folder, env.name)[:3]]
    rows = {}
    for lake in lakes:
        rows[lake.topic.name] = {hour: lake.put_files(40, hour) for hour in hours}
        lake.register(hours)
    kafkalake = str(Path(sys.executable).parent / "kafkalake")
    command = [
        kafkalake,
        "compact",
        "run",
        "--env",
        env.name,
        "--catalog",
        str(catalog_folder),
        "--lease-ttl-seconds",
        str(LEASE_TTL_SECONDS),
    ]
    command += ["--target-file-mb", "1", "--grace-minutes", "0", "--min-input-files", "2"]
    environ = {**os.environ, "KAFKALAKE_ENVIRONMENTS": str(environments)}
    seed = random.randrange(1_000_000)
    # a step is one partition's manifest moving on (planned, written, verified, swapped, cleaned): a run from scratch
    # plans all 18 partitions at once, then writes, verifies and swaps them; each kill comes 1-18 steps into its own
    # run and up to 2 s later, wherever Spark's start left the run by then
    kills = random_kills(seed, range(1, 19))
    steps = lambda: sum(lake.steps() for lake in lakes)  # noqa: E731
    killed = kill_on_progress(command, environ, steps, kills, lease_ttl=LEASE_TTL_SECONDS)
    assert killed >= 1, f"seed {seed}: none of the kills {kills} found the compactor still running"
    for _ in range(2):  # the first finishes what the kills left; the second deletes inputs swapped by the first
        final = subprocess.run(command, check=False, env=environ, capture_output=True, text=True)
        assert final.returncode == 0, f"seed {seed}, kills {kills}: {final.stdout[-3000:]}{final.stderr[-3000:]}"
    for lake in lakes:
        for hour in hours:
            frame = lake.read_current(spark, hour).select("_kafka_partition", "_kafka_offset")
            assert (frame.count(), frame.distinct().count()) == (rows[lake.topic.name][hour],) * 2, (seed, kills)
            output = f"s3://{lake.bucket}/{lake.topic.prefix.compacted_prefix()}"
            assert lake.location(hour).startswith(output), (seed, kills)
        assert lake.raw() == {}, f"seed {seed}: inputs left behind"
        runs = {k.rsplit("/", 1)[0] for k in lake.keys(lake.topic.prefix.compacted_prefix())}
        assert runs == {lake.location(hour).split(f"{lake.bucket}/", 1)[1].rstrip("/") for hour in hours}, seed
