"""The ``kafkalake`` commands that run the jobs: ``demo`` (the whole pipeline), ``interop`` (the pipeline counted
through Trino, and pyiceberg and Spark SQL after erasure), ``archive`` (the archiver job's run) and ``compact run``
on local Spark against the local stack, and ``compact submit`` to EMR Serverless in AWS, with the real credential
chain in the environment's region (never the local stack's endpoint or credentials)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kafkalake.jobspec import (
    ARCHIVER_BUDGET_MINUTES,
    ARCHIVER_CONCURRENCY,
    COMPACTOR_GRACE_MINUTES,
    COMPACTOR_MIN_INPUT_FILES,
    COMPACTOR_TARGET_FILE_MB,
    LEASE_TTL_SECONDS,
    Job,
)
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev.cli import render
from kafkalake_dev.cli.options import (
    DEFAULT_CATALOG,
    CatalogOption,
    EnvOption,
    LeaseTtlOption,
    environment,
    on_local_stack,
    with_restricted_key,
)
from kafkalake_dev.local.endpoints import LOCAL_ENV

if TYPE_CHECKING:
    from collections.abc import Callable

DEMO_RECORDS = 5000
"""Records per topic the demo produces."""


def demo(
    ctx: typer.Context,
    env: EnvOption = LOCAL_ENV,
    records: Annotated[int, typer.Option(help="Records per topic.")] = DEMO_RECORDS,
    html: Annotated[Path | None, typer.Option(help="Where to write the inventory page.")] = None,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """The whole pipeline on the local stack: workload → archiver → maintainer → compactor → queried tables."""
    import time

    from rich.progress import Progress

    from kafkalake_dev.demo import default_html_path, run_demo

    console = render.wide_console()
    endpoints = on_local_stack(ctx)
    started = time.monotonic()
    with Progress(console=console) as progress:

        def producing(topic: Topic) -> Callable[[int], None]:
            task = progress.add_task(f"producing {topic.kafka_topic}", total=records)
            return lambda done: progress.update(task, completed=done)

        def say(message: str) -> None:
            if progress.tasks and progress.finished:
                progress.stop()
            console.print(message)

        report = run_demo(
            endpoints,
            environment(env),
            load_topic_catalog(catalog),
            records=records,
            say=say,
            producing=producing,
        )
    console.print(render.archive_summary(report.archived, report.bucket))
    for line in render.maintainer_lines(report):
        console.print(line)
    for line in render.erasure_lines(report):
        console.print(line)
    console.print(render.demo_results(report))
    inventories, page = [t.inventory for t in report.tables], html or default_html_path(env)
    console.print(render.inventory_table(inventories, f"Inventory of {env}"))
    render.write_inventory_page(inventories, f"kafkalake inventory: {env}", page)
    console.print(
        f"inventory page: {page}\nNext: `kafkalake inventory --env {env}`, `kafkalake catalog show <topic>`, "
        f"`kafkalake compact run --table <topic>`, `kafkalake maintain --once`.\n"
        f"S3 (moto at {endpoints.aws_endpoint_url}): s3://{report.bucket}/data/ (raw files; compacted ones in each "
        f"table's _compacted/), /quarantine/, /state/ (plans, receipts for `kafkalake audit`, compaction manifests, "
        f"late-data markers), /erasure/{env}/ (requests, receipts for `kafkalake erase status`, the tables' subject "
        f"indexes).\n{log_files()}"
    )
    ok = all(t.matches and t.quarantine_matches for t in report.tables)
    console.print(f"demo {'done' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s")
    if not ok:
        raise typer.Exit(1)


def log_files() -> str:
    """Where the demo's structured and raw log lines went, never between its own."""
    from kafkalake_dev.local.maintainer import lambda_log
    from kafkalake_dev.local.spark import spark_log
    from kafkalake_dev.local.workload import kafka_client_log

    return (
        f"Logs: the Lambdas' structured logs and metrics (what CloudWatch would hold) {lambda_log()}; Spark's and the "
        f"JVM's lines of this process {spark_log()}; the workload's Kafka clients' {kafka_client_log()}."
    )


def archive(
    ctx: typer.Context,
    topic: Annotated[list[str] | None, typer.Option("--topic", help="Topic to archive (default: all).")] = None,
    env: EnvOption = LOCAL_ENV,
    local: Annotated[bool, typer.Option("--local", help="Run on local Spark against the local stack.")] = True,
    concurrency: Annotated[int, typer.Option(help="Heavy topics carried out at once.")] = ARCHIVER_CONCURRENCY,
    budget_minutes: Annotated[float, typer.Option(help="No new plan starts after this.")] = ARCHIVER_BUDGET_MINUTES,
    lease_ttl_seconds: LeaseTtlOption = LEASE_TTL_SECONDS,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Archive topics from Kafka to S3 Parquet, each caught up and exactly once, several at a time; exits 1 when
    any topic failed."""
    from kafkalake_dev.local.spark import principal_session
    from spark_jobs.archiver import job as archiver_job

    if not local:
        raise typer.BadParameter("in AWS the archiver runs on EMR Serverless (spark_jobs/archiver/job.py)")
    bucket = environment(env).bucket
    topics, unknown = archiver_job.resolve(load_topic_catalog(catalog), env, topic or [])
    endpoints = with_restricted_key(on_local_stack(ctx, bucket))
    spark = principal_session(endpoints, "kafkalake-archiver", Job.ARCHIVE)
    spark.sparkContext.setLogLevel("ERROR")
    console = render.wide_console()
    lease_ttl = timedelta(seconds=lease_ttl_seconds)
    archived = archiver_job.archive(
        spark,
        endpoints,
        topics,
        concurrency=concurrency,
        budget_minutes=budget_minutes,
        lease_ttl=lease_ttl,
        say=console.print,
    )
    results = [*unknown, *archived]
    console.print(render.archive_summary([r.as_dict() for r in results], bucket))
    failed = [r.name for r in results if not r.ok]
    if failed:
        console.print(f"{len(failed)} of {len(results)} topics FAILED: {', '.join(failed)}")
        raise typer.Exit(1)


def interop(
    ctx: typer.Context,
    records: Annotated[int, typer.Option(help="Records per topic.")] = 5000,
    template: Annotated[str, typer.Option(help="Environment whose catalog and settings the check copies.")] = "staging",
) -> None:
    """Trino (Athena's engine) counts every demo table before, during and after compaction and after erasure,
    against the workload's plan (less the erased records after erasure); pyiceberg and Spark SQL count the Iceberg
    table after erasure too."""
    import tempfile

    from kafkalake_dev.demo import run_interop
    from kafkalake_dev.local import stack
    from kafkalake_dev.local.sandbox import isolated_env

    console = render.wide_console()
    stack.up()
    with tempfile.TemporaryDirectory(prefix="kafkalake-interop-") as folder:
        settings, catalog_root, _ = isolated_env(Path(folder), template)
        console.print(f"interop: environment {settings.name} (a copy of {template}), {records} records per topic")
        report = run_interop(on_local_stack(ctx), settings, catalog_root, records=records, say=console.print)
    for results in render.interop_results(report):
        console.print(results)
    for counted in report.counted:
        for error in counted.errors:
            console.print(f"{counted.check.table}: {error}")
    samples = sum(len(c.during) for c in report.counted)
    console.print(f"interop: {samples} counts taken during compaction")
    console.print(f"interop {'done: every count matches the plan' if report.matches else 'FAILED'}")
    if not report.matches:
        raise typer.Exit(1)


compact_app = typer.Typer(
    help="Compact closed partitions: run locally, or submit to EMR Serverless.", no_args_is_help=True
)
TableArgument = Annotated[str, typer.Option("--table", help="Topic name, Kafka topic or database.table.")]
TargetFileOption = Annotated[int, typer.Option(help="Target size of merged files.")]


@compact_app.command("run")
def compact_run(
    ctx: typer.Context,
    table: Annotated[
        list[str] | None, typer.Option("--table", help="Topic, Kafka topic or db.table; repeat; all when omitted.")
    ] = None,
    env: EnvOption = LOCAL_ENV,
    local: Annotated[bool, typer.Option("--local", help="Run on local Spark against the local stack.")] = True,
    target_file_mb: TargetFileOption = COMPACTOR_TARGET_FILE_MB,
    min_input_files: Annotated[
        int, typer.Option(help="Compact partitions with at least this many files.")
    ] = COMPACTOR_MIN_INPUT_FILES,
    grace_minutes: Annotated[int, typer.Option(help="Keep inputs this long after the swap.")] = COMPACTOR_GRACE_MINUTES,
    lease_ttl_seconds: LeaseTtlOption = LEASE_TTL_SECONDS,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Compact the closed partitions of the tables (every table of the env by default) on local Spark, in one run;
    print files, bytes, rows and seconds per partition, and exit 1 if any table or partition failed."""
    from kafkalake_dev.local.spark import principal_session
    from spark_jobs.common import Run
    from spark_jobs.compaction.job import Compactor
    from spark_jobs.compaction.work import Action, Knobs

    if not local:
        raise typer.BadParameter("use `kafkalake compact submit` to run on EMR Serverless")
    found = load_topic_catalog(catalog)
    topics = [found.get(name, env) for name in table] if table else found.for_env(env)
    endpoints = on_local_stack(ctx, environment(env).bucket)
    console = render.wide_console()
    spark = principal_session(endpoints, "kafkalake-compactor")
    spark.sparkContext.setLogLevel("ERROR")
    knobs = Knobs(
        target_file_bytes=target_file_mb * 1024 * 1024,
        min_input_files=min_input_files,
        grace_period=timedelta(minutes=grace_minutes),
    )
    with console.status(f"compacting {len(topics)} tables ..."):
        run = Run.new(spark, timedelta(seconds=lease_ttl_seconds))
        results = Compactor(spark, endpoints, topics, knobs, run=run, say=console.print).run()
    console.print(render.compaction_summary(results, f"compaction of {len(topics)} tables in {env}"))
    skipped = sum(r.action == Action.SKIPPED for r in results)
    console.print(
        f"{skipped} partitions or tables skipped (too few new files, nothing new since their last compaction, "
        "or held by another run)"
    )
    console.print(
        f"compacted files are under s3://{endpoints.bucket}/data/<topic path>/_compacted/ (manifests under /state/)"
    )
    if any(result.action == Action.FAILED for result in results):
        raise typer.Exit(1)


@compact_app.command("submit")
def compact_submit(
    table: TableArgument,
    env: EnvOption,
    application_id: Annotated[str, typer.Option(help="EMR Serverless application id (stack output).")],
    role_arn: Annotated[str, typer.Option(help="Job execution role ARN.")],
    entry_point: Annotated[str, typer.Option(help="s3:// URI of spark_jobs/entrypoint.py.")],
    py_files: Annotated[str, typer.Option(help="s3:// URI of kafkalake_jobs.zip.")],
    catalog_archive: Annotated[str, typer.Option(help="s3:// URI of catalog.zip.")],
    environment_archive: Annotated[str, typer.Option(help="s3:// URI of environment.tgz.")],
    jar: Annotated[
        list[str], typer.Option("--jar", help="s3:// URI of a jar the jobs ship (connectors, KeyedHash.jar); repeat.")
    ],
    target_file_mb: TargetFileOption = COMPACTOR_TARGET_FILE_MB,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends.")] = False,
) -> None:
    """Start a compaction job run on EMR Serverless and print its id (and, with --wait, its states): with the AWS
    credentials of the default chain (variables, profile, SSO, role) in the environment's region."""
    import time
    import uuid

    from kafkalake.aws import make_client
    from kafkalake.job_runs import compactor_run
    from kafkalake.jobspec import JobArtifacts, terminal

    artifacts = JobArtifacts(entry_point, py_files, catalog_archive, environment_archive, tuple(jar))
    settings = environment(env)
    job = compactor_run(settings, artifacts, [table], target_file_mb)
    client = make_client(settings.endpoints(), "emr-serverless")
    run = client.start_job_run(**job.start_job_run(application_id, role_arn, str(uuid.uuid4())))
    typer.echo(f"started job run {run['jobRunId']} on application {application_id} ({run['arn']})")
    while wait:
        state = client.get_job_run(applicationId=application_id, jobRunId=run["jobRunId"])["jobRun"]["state"]
        typer.echo(f"  {time.strftime('%H:%M:%S')} {state}")
        if terminal(state):
            if state != "SUCCESS":
                raise typer.Exit(1)
            break
        time.sleep(10)
