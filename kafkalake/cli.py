"""The ``kafkalake`` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kafkalake import stack
from kafkalake.catalog import CatalogInvalid, Topic, load_catalog
from kafkalake.config import repo_root

if TYPE_CHECKING:
    from rich.console import Console

    from spark_jobs.archiver import Summary

app = typer.Typer(help="kafkalake: cool Kafka topics down into a queryable S3 data lake.", no_args_is_help=True)
catalog_app = typer.Typer(help="Validate and inspect the topic catalog.", no_args_is_help=True)
stack_app = typer.Typer(help="The local stack: Kafka, schema registry, moto (AWS), Spark jars.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
app.add_typer(stack_app, name="stack")

CatalogOption = Annotated[Path, typer.Option("--catalog", help="Topic catalog folder.")]
DEFAULT_CATALOG = repo_root() / "catalog"


def wide_console() -> Console:
    """Rich output that stays readable when piped (rich assumes 80 columns without a terminal)."""
    import shutil

    from rich.console import Console

    return Console(width=max(140, shutil.get_terminal_size((140, 40)).columns))


@catalog_app.command("validate")
def catalog_validate(catalog: CatalogOption = DEFAULT_CATALOG) -> None:
    """Check every topic file; list every problem with its file, field and fix."""
    try:
        loaded = load_catalog(catalog)
    except CatalogInvalid as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"catalog {catalog}: {len(loaded.topics)} topics in environments {', '.join(loaded.environments())}: OK")
    for topic in loaded.topics:
        typer.echo(f"  {topic.env:<11} {topic.kafka_topic:<45} -> {topic.database}.{topic.table}")


@catalog_app.command("show")
def catalog_show(
    topic: Annotated[str, typer.Argument(help="Topic name, Kafka topic or database.table.")],
    env: Annotated[str | None, typer.Option(help="Environment, when the topic exists in several.")] = None,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Print the full derived configuration of one topic."""
    try:
        found = load_catalog(catalog).get(topic, env)
    except (CatalogInvalid, KeyError) as exc:
        typer.echo(str(exc).strip('"'), err=True)
        raise typer.Exit(1) from exc
    typer.echo(json.dumps(found.derived(), indent=2))


@stack_app.command("up")
def stack_up() -> None:
    """Download (once, into the cache), start and health-check the local stack."""
    started = stack.up()
    typer.echo(f"local stack up (started now: {', '.join(started) or 'nothing, all were running'})")
    for name, state in stack.status().items():
        typer.echo(f"  {name:<9} {state}")


@stack_app.command("down")
def stack_down() -> None:
    """Stop every process of the local stack that its pid files name."""
    stack.down()
    typer.echo("local stack down")


@stack_app.command("status")
def stack_status() -> None:
    """Show each service's pid and health."""
    states = stack.status()
    for name, state in states.items():
        typer.echo(f"  {name:<9} {state}")
    if any(not s.startswith("healthy") for s in states.values()):
        raise typer.Exit(1)


EnvOption = Annotated[str, typer.Option("--env", help="Environment from environments.yaml.")]


@app.command("provision")
def provision_cmd(env: EnvOption = "staging", catalog: CatalogOption = DEFAULT_CATALOG) -> None:
    """Create on the local AWS endpoint what `cdk deploy` would: bucket, queue + DLQ, notifications, Glue."""
    from kafkalake.aws import make_client
    from kafkalake.config import Endpoints
    from kafkalake.environments import load_environments
    from kafkalake.provision import provision

    endpoints = Endpoints.from_env()
    clients = {s: make_client(endpoints, s) for s in ("s3", "sqs", "glue", "events")}
    done = provision(clients, endpoints.region, load_environments()[env], load_catalog(catalog))
    typer.echo(f"provisioned {env} on {endpoints.aws_endpoint_url}:")
    typer.echo(f"  bucket     s3://{done.bucket}\n  queue      {done.queue_url}\n  dlq        {done.dlq_url}")
    typer.echo(f"  databases  {', '.join(done.databases)}\n  crawlers   {', '.join(done.crawlers) or '-'}")


@app.command("maintain")
def maintain(
    once: Annotated[bool, typer.Option("--once", help="Run one scheduled invocation and exit.")] = True,
    env: EnvOption = "staging",
    catalog: CatalogOption = DEFAULT_CATALOG,
    native: Annotated[bool, typer.Option(help="Infer every table natively (local endpoints run no crawlers).")] = False,
) -> None:
    """Run the metastore maintainer's Lambda handler once against the configured endpoints."""
    import os

    from kafkalake.config import Endpoints
    from kafkalake.environments import load_environments
    from lambdas.maintainer.local import invoke_locally

    if not once:
        raise typer.BadParameter("only --once is supported locally; in AWS the schedule runs it every 10 minutes")
    settings = load_environments()[env]
    report = invoke_locally(Endpoints.from_env(), settings, load_catalog(catalog), os.environ, native=native)
    for name, value in sorted(report["counts"].items()):
        typer.echo(f"  {name:<32} {value}")
    for error in report["errors"]:
        typer.echo(f"  error: {error}", err=True)
    typer.echo(f"maintainer run done: {len(report['events'])} events published to bus {settings.event_bus_name}")


@app.command("demo")
def demo(
    env: EnvOption = "staging",
    records: Annotated[int, typer.Option(help="Records per topic.")] = 5000,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Run the pipeline's built parts end to end on the local stack, and say plainly which parts are not built."""
    from datetime import UTC, datetime, timedelta

    from rich.progress import Progress, TaskID
    from rich.table import Table

    from kafkalake.config import Endpoints
    from kafkalake.environments import load_environments
    from kafkalake.registry import RegistryClient
    from kafkalake.workload import produce_topic

    console = wide_console()
    endpoints = Endpoints.from_env()
    loaded = load_catalog(catalog)
    provision_cmd(env=env, catalog=catalog)
    start = (datetime.now(UTC) - timedelta(hours=6)).replace(minute=0, second=0, microsecond=0)
    registry = RegistryClient(endpoints.schema_registry_url)
    produced = []
    with Progress(console=console) as progress:
        for topic in loaded.for_env(env):
            task = progress.add_task(f"producing {topic.kafka_topic}", total=records)

            def advance(done: int, task: TaskID = task) -> None:
                progress.update(task, completed=done)

            produced.append(
                produce_topic(
                    topic, endpoints.kafka_bootstrap, registry, records, start=start, hours=6, progress=advance
                )
            )
    table = Table(title=f"Kafka workload ({env}) on {endpoints.kafka_bootstrap}")
    for column in ("topic", "status", "per schema version", "tombstones", "poison"):
        table.add_column(column)
    for item in produced:
        versions = ", ".join(f"{k[-1]}: {v}" for k, v in sorted(item.counts.items()) if k.startswith("schema"))
        table.add_row(
            item.topic,
            "already there, skipped" if item.skipped else "produced",
            versions or "-",
            str(item.counts["tombstones"]),
            str(item.counts["poison"]),
        )
    console.print(table)
    topics = loaded.for_env(env)
    bucket = load_environments()[env].bucket
    summaries = run_archiver(topics, bucket)
    maintain(once=True, env=env, catalog=catalog, native=True)
    show_catalog_rows(topics, summaries, bucket)
    console.print(
        "[bold yellow]Not built yet, so not run:[/] the compactor (issue #5); partitions keep the archiver's files."
    )
    console.print("Next: `kafkalake catalog show <topic>`, `kafkalake maintain --once`, `make status`.")


@app.command("archive")
def archive(
    topic: Annotated[list[str], typer.Option("--topic", help="Topic to archive; repeat for several.")],
    env: EnvOption = "staging",
    local: Annotated[bool, typer.Option("--local", help="Run on local Spark against the local stack.")] = True,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Archive topics from Kafka to S3 Parquet (one after another, each exactly once) and summarize."""
    from kafkalake.environments import load_environments

    if not local:
        raise typer.BadParameter("in AWS the archiver runs on EMR Serverless (spark_jobs/archiver.py)")
    loaded = load_catalog(catalog)
    run_archiver([loaded.get(name, env) for name in topic], load_environments()[env].bucket)


def run_archiver(topics: list[Topic], bucket: str) -> list[Summary]:
    import dataclasses

    from rich.table import Table

    from kafkalake.config import Endpoints
    from kafkalake.spark import local_session
    from spark_jobs.archiver import archive_topic

    console = wide_console()
    endpoints = dataclasses.replace(Endpoints.from_env(), bucket=bucket)
    spark = local_session(endpoints, "kafkalake-archiver")
    spark.sparkContext.setLogLevel("ERROR")
    summaries = []
    for topic in topics:
        with console.status(f"archiving {topic.kafka_topic} ..."):
            summaries.append(archive_topic(spark, endpoints, topic, say=console.print))
    table = Table(title=f"archived to s3://{bucket}/")
    for column in ("topic", "partition", "offsets", "read", "written", "files", "quarantined", "tombstones"):
        table.add_column(column)
    for summary in summaries:
        for partition, (start, end) in sorted(summary.plan.items()):
            counts = summary.per_partition.get(partition, {})
            table.add_row(
                summary.topic,
                str(partition),
                f"{start}-{end}",
                *(str(counts.get(k, 0)) for k in ("read", "written", "files", "quarantined", "tombstones")),
            )
        reasons = " ".join(f"{k}={v}" for k, v in sorted(summary.quarantine_by_reason.items()))
        table.add_row(
            summary.topic,
            "all",
            "nothing new" if not summary.plan else "",
            str(summary.read),
            str(summary.written),
            str(summary.objects),
            f"{summary.quarantined} {reasons}".strip(),
            str(summary.tombstones),
            end_section=True,
        )
    console.print(table)
    return summaries


def show_catalog_rows(topics: list[Topic], summaries: list[Summary], bucket: str) -> None:
    """Rows per table read through the locations Glue holds, next to what the archiver wrote in total."""
    import dataclasses

    from rich.table import Table

    from kafkalake.aws import make_client
    from kafkalake.config import Endpoints
    from kafkalake.query import partition_locations, read_locations
    from kafkalake.spark import local_session

    endpoints = dataclasses.replace(Endpoints.from_env(), bucket=bucket)
    spark, glue, s3 = local_session(endpoints), make_client(endpoints, "glue"), make_client(endpoints, "s3")
    table = Table(title="Queried through the Glue catalog")
    for column in ("table", "schema versions", "partitions", "files", "rows via catalog", "rows in S3", "match"):
        table.add_column(column)
    for topic in topics:
        locations = partition_locations(glue, topic.database, topic.table)
        frame = read_locations(spark, locations)
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=topic.prefix.data_prefix())
        files = [o["Key"] for page in pages for o in page.get("Contents", [])]
        in_s3 = spark.read.parquet(*[f"s3a://{bucket}/{k}" for k in files]).count() if files else 0
        if frame is None:
            table.add_row(
                f"{topic.database}.{topic.table}",
                "-",
                "0",
                str(len(files)),
                "0",
                str(in_s3),
                "yes" if in_s3 == 0 else "NO",
            )
            continue
        rows = frame.count()
        versions = sorted({k.split("schema_version=")[1].split("/")[0] for k in files})
        table.add_row(
            f"{topic.database}.{topic.table}",
            ", ".join(versions),
            str(len(locations)),
            str(len(files)),
            str(rows),
            str(in_s3),
            "yes" if rows == in_s3 else "NO",
        )
    wide_console().print(table)


compact_app = typer.Typer(
    help="Compact closed partitions: run locally, or submit to EMR Serverless.", no_args_is_help=True
)
app.add_typer(compact_app, name="compact")
TableArgument = Annotated[str, typer.Option("--table", help="Topic name, Kafka topic or database.table.")]


@compact_app.command("run")
def compact_run(
    table: TableArgument,
    env: EnvOption = "staging",
    local: Annotated[bool, typer.Option("--local", help="Run on local Spark against the local stack.")] = True,
    target_file_mb: Annotated[int, typer.Option(help="Target size of merged files.")] = 128,
    min_input_files: Annotated[int, typer.Option(help="Compact partitions with at least this many files.")] = 10,
    grace_minutes: Annotated[int, typer.Option(help="Keep inputs this long after the swap.")] = 60,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Compact a table's closed partitions on local Spark and print files, bytes and rows before/after."""
    import dataclasses
    from datetime import timedelta

    from rich.table import Table

    from kafkalake.config import Endpoints
    from kafkalake.environments import load_environments
    from kafkalake.spark import local_session
    from spark_jobs.compactor import Compactor, Knobs

    if not local:
        raise typer.BadParameter("use `kafkalake compact submit` to run on EMR Serverless")
    topic = load_catalog(catalog).get(table, env)
    endpoints = dataclasses.replace(Endpoints.from_env(), bucket=load_environments()[env].bucket)
    console = wide_console()
    spark = local_session(endpoints, "kafkalake-compactor")
    spark.sparkContext.setLogLevel("ERROR")
    knobs = Knobs(
        target_file_bytes=target_file_mb * 1024 * 1024,
        min_input_files=min_input_files,
        grace_period=timedelta(minutes=grace_minutes),
    )
    with console.status(f"compacting {topic.database}.{topic.table} ..."):
        results = Compactor(spark, endpoints, topic, knobs, say=console.print).run()
    summary = Table(title=f"compaction of {topic.database}.{topic.table}")
    for column in ("partition", "action", "files before → after", "bytes before → after", "rows"):
        summary.add_column(column)
    for result in results:
        summary.add_row(
            "/".join(result.partition),
            result.action,
            f"{result.files_before} → {result.files_after}",
            f"{result.bytes_before} → {result.bytes_after}",
            str(result.rows),
        )
    console.print(summary)


@compact_app.command("submit")
def compact_submit(
    table: TableArgument,
    env: EnvOption,
    application_id: Annotated[str, typer.Option(help="EMR Serverless application id (stack output).")],
    role_arn: Annotated[str, typer.Option(help="Job execution role ARN.")],
    entry_point: Annotated[str, typer.Option(help="s3:// URI of spark_jobs/entrypoint.py.")],
    py_files: Annotated[str, typer.Option(help="s3:// URI of kafkalake_jobs.zip.")],
    catalog_archive: Annotated[str, typer.Option(help="s3:// URI of catalog.zip.")],
    target_file_mb: Annotated[int, typer.Option()] = 128,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends.")] = False,
) -> None:
    """Start a compaction job run on EMR Serverless and print its id (and, with --wait, its states)."""
    import time

    from kafkalake.aws import make_client
    from kafkalake.config import Endpoints
    from kafkalake.environments import load_environments
    from spark_jobs.submit import compaction_job_request, terminal

    settings = load_environments()[env]
    client = make_client(Endpoints.from_env(), "emr-serverless")
    request = compaction_job_request(
        settings,
        application_id=application_id,
        role_arn=role_arn,
        entry_point=entry_point,
        py_files=py_files,
        catalog_archive=catalog_archive,
        table=table,
        target_file_mb=target_file_mb,
    )
    run = client.start_job_run(**request)
    typer.echo(f"started job run {run['jobRunId']} on application {application_id} ({run['arn']})")
    while wait:
        state = client.get_job_run(applicationId=application_id, jobRunId=run["jobRunId"])["jobRun"]["state"]
        typer.echo(f"  {time.strftime('%H:%M:%S')} {state}")
        if terminal(state):
            if state != "SUCCESS":
                raise typer.Exit(1)
            break
        time.sleep(10)
