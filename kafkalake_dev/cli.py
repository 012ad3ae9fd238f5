"""The ``kafkalake`` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from infra.repo import catalog_dir, environments_file
from kafkalake.catalog import CatalogInvalid, Topic, load_catalog
from kafkalake.environments import EnvironmentSettings, load_environments
from kafkalake_dev import stack
from kafkalake_dev.local import local_endpoints

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console
    from rich.table import Table

    from kafkalake_dev.demo import DemoReport
    from kafkalake_dev.inventory import TableInventory

app = typer.Typer(help="kafkalake: cool Kafka topics down into a queryable S3 data lake.", no_args_is_help=True)
catalog_app = typer.Typer(help="Validate and inspect the topic catalog.", no_args_is_help=True)
stack_app = typer.Typer(help="The local stack: Kafka, schema registry, moto (AWS), Spark jars.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
app.add_typer(stack_app, name="stack")

CatalogOption = Annotated[Path, typer.Option("--catalog", help="Topic catalog folder.")]
DEFAULT_CATALOG = catalog_dir()


def environment(name: str) -> EnvironmentSettings:
    """One entry of environments.yaml (or of the file KAFKALAKE_ENVIRONMENTS names)."""
    found = load_environments(environments_file())
    if name not in found:
        raise typer.BadParameter(f"unknown environment {name!r}; {environments_file()} has: {', '.join(sorted(found))}")
    return found[name]


def wide_console() -> Console:
    """Rich output that stays readable when piped (rich assumes 80 columns without a terminal)."""
    import shutil

    from rich.console import Console

    return Console(width=max(160, shutil.get_terminal_size((160, 40)).columns))


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
    from kafkalake_dev.provision import provision

    endpoints = local_endpoints()
    clients = {s: make_client(endpoints, s) for s in ("s3", "sqs", "glue", "events")}
    done = provision(clients, endpoints.region, environment(env), load_catalog(catalog))
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
    from kafkalake_dev.maintainer import invoke_locally

    if not once:
        raise typer.BadParameter("only --once is supported locally; in AWS the schedule runs it every 10 minutes")
    settings = environment(env)
    report = invoke_locally(local_endpoints(), settings, load_catalog(catalog), native=native)
    for name, value in sorted(report["counts"].items()):
        typer.echo(f"  {name:<32} {value}")
    for error in report["errors"]:
        typer.echo(f"  error: {error}", err=True)
    typer.echo(f"maintainer run done: {len(report['events'])} events published to bus {settings.event_bus_name}")


@app.command("reconcile")
def reconcile(env: EnvOption = "staging", catalog: CatalogOption = DEFAULT_CATALOG) -> None:
    """Add the partitions S3 has and Glue lacks (lost notifications); report Glue partitions with no objects."""
    from kafkalake.aws import make_client
    from kafkalake.catalog import tables_document
    from lambdas.reconciler.logic import reconcile_tables
    from lambdas.tables import tables_from_document

    endpoints = local_endpoints(environment(env).bucket)
    s3, glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
    tables = tables_from_document(tables_document(load_catalog(catalog).for_env(env)))  # as the Lambda reads them
    results = reconcile_tables(s3, glue, endpoints.bucket, tables)
    for done in results:
        added, empty = len(done.added), len(done.empty_locations)
        state = done.failed or done.skipped or f"{added} partitions added, {empty} with no objects"
        typer.echo(f"  {done.table:<45} {'FAILED ' if done.failed else ''}{state}")
        for values in done.added:
            typer.echo(f"    added {'/'.join(values)} (its S3 events were lost)")
        for values in done.empty_locations:
            typer.echo(f"    EMPTY {'/'.join(values)}: the Glue partition's location holds no object")
    if any(done.failed for done in results):
        raise typer.Exit(1)


@app.command("audit")
def audit_offsets(
    topic: Annotated[str, typer.Option("--topic", help="Topic name, Kafka topic or database.table.")],
    env: EnvOption = "staging",
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Show, per Kafka partition, that every offset from the first archived to the committed one is accounted for
    once (a data row, a quarantined record or a dropped tombstone); exit 1 on any gap or overlap."""
    from rich.table import Table

    from kafkalake.aws import make_client
    from kafkalake_dev.audit import audit, committed_offsets, read_lake

    found = load_catalog(catalog).get(topic, env)
    endpoints = local_endpoints(environment(env).bucket)
    console = wide_console()
    with console.status(f"reading receipts, manifests and footers of {found.kafka_topic} ..."):
        lake = read_lake(make_client(endpoints, "s3"), endpoints.bucket, found)
    results = audit(lake, committed_offsets(endpoints.kafka_bootstrap, found.kafka_topic))
    summary = Table(title=f"offset audit of {found.kafka_topic} ({len(lake.receipts)} receipts)")
    columns = ("partition", "offsets", "committed", "read", "stored", "quarantined", "tombstones", "found", "status")
    for column in columns:
        summary.add_column(column)
    for r in results:
        span = f"{r.first}-{r.end - 1}" if r.first is not None and r.end is not None else "-"
        status = "ok" if not r.problems else f"{len(r.problems)} problems"
        values = (r.committed, r.read, r.stored, r.quarantined, r.dropped_tombstones, r.found)
        summary.add_row(str(r.kafka_partition), span, *(str(v) for v in values), status)
    console.print(summary)
    problems = [p for r in results for p in r.problems]
    for problem in problems:
        console.print(f"  {problem}", markup=False)
    console.print(f"receipts under s3://{endpoints.bucket}/{found.prefix.state_prefix()}receipts/")
    if problems:
        raise typer.Exit(1)


dlq_app = typer.Typer(help="The notification dead-letter queue.", no_args_is_help=True)
app.add_typer(dlq_app, name="dlq")


@dlq_app.command("redrive")
def dlq_redrive(
    env: EnvOption = "staging",
    move_task: Annotated[bool, typer.Option(help="Use SQS's message-move task (else copy the messages).")] = True,
) -> None:
    """Move the dead-letter queue's messages back to the notification queue; the next drain registers them."""
    from kafkalake.aws import make_client
    from kafkalake_dev.redrive import redrive

    settings = environment(env)
    sqs = make_client(local_endpoints(), "sqs")
    dlq_url = sqs.get_queue_url(QueueName=settings.dead_letter_queue_name)["QueueUrl"]
    queue_url = sqs.get_queue_url(QueueName=settings.queue_name)["QueueUrl"]
    done = redrive(sqs, dlq_url, queue_url, use_move_task=move_task, say=typer.echo)
    handle = f" (task {done.task_handle})" if done.task_handle else ""
    typer.echo(f"redrive by {done.method}{handle}: {done.moved} messages from {dlq_url} to {queue_url}")


@app.command("demo")
def demo(
    env: EnvOption = "staging",
    records: Annotated[int, typer.Option(help="Records per topic.")] = 5000,
    html: Annotated[Path | None, typer.Option(help="Where to write the inventory page.")] = None,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """The whole pipeline on the local stack: workload → archiver → maintainer → compactor → queried tables."""
    import time

    from rich.progress import Progress

    from kafkalake_dev.demo import default_html_path, run_demo

    console = wide_console()
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
            local_endpoints(),
            environment(env),
            load_catalog(catalog),
            records=records,
            say=say,
            producing=producing,
        )
    print_archive_summary(report.archived, report.bucket)
    for run, counts in enumerate(report.maintainer_runs, 1):
        line = ", ".join(f"{k}={v}" for k, v in sorted(counts["counts"].items()) if v)
        console.print(f"maintainer run {run}: {line or 'nothing to do'}")
    print_demo_results(report)
    inventories = [t.inventory for t in report.tables]
    console.print(inventory_table(inventories, f"Inventory of {env}"))
    page = html or default_html_path(env)
    write_inventory_page(inventories, f"kafkalake inventory: {env}", page)
    console.print(f"inventory page: {page}")
    console.print(
        f"Next: `kafkalake inventory --env {env}`, `kafkalake catalog show <topic>`, "
        f"`kafkalake compact run --table <topic>`, `kafkalake maintain --once`.\n"
        f"S3 (moto at {local_endpoints().aws_endpoint_url}): s3://{report.bucket}/data/ (raw), /compacted/, "
        f"/quarantine/, /state/ (plans, receipts for `kafkalake audit`, compaction manifests, late-data markers)."
    )
    ok = all(t.matches and t.quarantine_matches for t in report.tables)
    console.print(f"demo {'done' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s")
    if not ok:
        raise typer.Exit(1)


def print_demo_results(report: DemoReport) -> None:
    from rich.table import Table

    table = Table(title=f"Queried through the Glue catalog ({report.env})")
    columns = (
        "table",
        "versions",
        "partitions Glue / data",
        "compacted",
        "files before → now",
        "rows read",
        "rows expected",
        "dups",
        "quarantined / poison",
        "tombstones (kept)",
        "ok",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for result in report.tables:
        inventory = result.inventory
        table.add_row(
            f"{inventory.database}.{inventory.table}",
            ", ".join(str(v) for v in inventory.schema_versions),
            f"{len(result.partitions_in_glue)} / {len(result.partitions_with_data)}",
            str(inventory.compacted),
            f"{inventory.files_before} → {inventory.files}",
            str(sum(result.queried.rows.values())),
            str(sum(result.expected.values())),
            str(result.queried.duplicates),
            f"{inventory.quarantined_rows} / {result.produced.counts['poison']}",
            f"{result.produced.counts['tombstones']} ({result.queried.tombstones} kept)",
            "yes" if result.matches and result.quarantine_matches else "NO",
        )
    wide_console().print(table)


def inventory_table(inventories: list[TableInventory], title: str) -> Table:
    from rich.table import Table

    from kafkalake_dev.inventory import COLUMNS, rows

    table = Table(title=title)
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for row in rows(inventories):
        table.add_row(*row)
    return table


def write_inventory_page(inventories: list[TableInventory], title: str, path: Path) -> None:
    from kafkalake_dev.inventory import render_html

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(inventories, title))


@app.command("inventory")
def inventory(
    env: EnvOption = "staging",
    html: Annotated[Path | None, typer.Option(help="Also write a self-contained HTML page here.")] = None,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Every table: schema versions, columns per version, partitions, freshness, files, bytes, quarantine."""
    from kafkalake.aws import make_client
    from kafkalake_dev.inventory import take_inventory

    endpoints = local_endpoints()
    bucket = environment(env).bucket
    topics = load_catalog(catalog).for_env(env)
    found = take_inventory(make_client(endpoints, "s3"), make_client(endpoints, "glue"), bucket, topics)
    wide_console().print(inventory_table(found, f"Inventory of {env} (s3://{bucket})"))
    if html is not None:
        write_inventory_page(found, f"kafkalake inventory: {env}", html)
        typer.echo(f"inventory page: {html}")


@app.command("archive")
def archive(
    topic: Annotated[list[str] | None, typer.Option("--topic", help="Topic to archive (default: all).")] = None,
    env: EnvOption = "staging",
    local: Annotated[bool, typer.Option("--local", help="Run on local Spark against the local stack.")] = True,
    concurrency: Annotated[int, typer.Option(help="Topics in flight at once.")] = 4,
    budget_minutes: Annotated[float, typer.Option(help="No new plan starts after this.")] = 15.0,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Archive topics from Kafka to S3 Parquet, each caught up and exactly once, several at a time; exits 1 when
    any topic failed."""
    from kafkalake_dev.demo import archive_topics
    from kafkalake_dev.spark import local_session
    from spark_jobs.fleet import resolve

    if not local:
        raise typer.BadParameter("in AWS the archiver runs on EMR Serverless (spark_jobs/fleet.py)")
    bucket = environment(env).bucket
    topics, unknown = resolve(load_catalog(catalog), env, topic or [])
    endpoints = local_endpoints(bucket)
    spark = local_session(endpoints, "kafkalake-archiver")
    spark.sparkContext.setLogLevel("ERROR")
    console = wide_console()
    results = [
        *unknown,
        *archive_topics(
            spark, endpoints, topics, console.print, concurrency=concurrency, budget_minutes=budget_minutes
        ),
    ]
    print_archive_summary([r.as_dict() for r in results], bucket)
    failed = [r.name for r in results if not r.ok]
    if failed:
        console.print(f"{len(failed)} of {len(results)} topics FAILED: {', '.join(failed)}")
        raise typer.Exit(1)


def print_archive_summary(lines: list[dict[str, Any]], bucket: str) -> None:
    """The archiver's per-topic summary (its JSON lines, ``TopicResult.as_dict``) as a table."""
    from rich.table import Table

    table = Table(title=f"archived to s3://{bucket}/")
    columns = ("topic", "status", "plans", "read", "written", "files", "quarantined", "tombstones", "lag", "seconds")
    phases = " / ".join(lines[0]["timings"]) if lines else "phases"
    for column in (*columns, f"{phases} s (task-seconds for read_decode and write)", "error"):
        table.add_column(column, overflow="fold")
    for line in lines:
        reasons = sorted(line["quarantine_by_reason"].items())
        table.add_row(
            line["kafka_topic"],
            line["status"],
            *(str(line[k]) for k in ("plans", "read", "written", "objects")),
            " ".join([str(line["quarantined"]), *(f"{k}={v}" for k, v in reasons)]),
            str(line["tombstones"]),
            str(sum(line["lag"].values())),
            f"{line['seconds']:.1f}",
            " / ".join(f"{v:.1f}" for v in line["timings"].values()),
            line["error"] or "",
        )
    wide_console().print(table)


compact_app = typer.Typer(
    help="Compact closed partitions: run locally, or submit to EMR Serverless.", no_args_is_help=True
)
app.add_typer(compact_app, name="compact")
TableArgument = Annotated[str, typer.Option("--table", help="Topic name, Kafka topic or database.table.")]


@compact_app.command("run")
def compact_run(
    table: Annotated[
        list[str] | None, typer.Option("--table", help="Topic, Kafka topic or db.table; repeat; all when omitted.")
    ] = None,
    env: EnvOption = "staging",
    local: Annotated[bool, typer.Option("--local", help="Run on local Spark against the local stack.")] = True,
    target_file_mb: Annotated[int, typer.Option(help="Target size of merged files.")] = 128,
    min_input_files: Annotated[int, typer.Option(help="Compact partitions with at least this many files.")] = 10,
    grace_minutes: Annotated[int, typer.Option(help="Keep inputs this long after the swap.")] = 60,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Compact the closed partitions of the tables (every table of the env by default) on local Spark, in one run;
    print files, bytes, rows and seconds per partition, and exit 1 if any table or partition failed."""
    from datetime import timedelta

    from rich.table import Table

    from kafkalake_dev.spark import local_session
    from spark_jobs.compactor import Action, Compactor, Knobs

    if not local:
        raise typer.BadParameter("use `kafkalake compact submit` to run on EMR Serverless")
    found = load_catalog(catalog)
    topics = [found.get(name, env) for name in table] if table else found.for_env(env)
    endpoints = local_endpoints(environment(env).bucket)
    console = wide_console()
    spark = local_session(endpoints, "kafkalake-compactor")
    spark.sparkContext.setLogLevel("ERROR")
    knobs = Knobs(
        target_file_bytes=target_file_mb * 1024 * 1024,
        min_input_files=min_input_files,
        grace_period=timedelta(minutes=grace_minutes),
    )
    with console.status(f"compacting {len(topics)} tables ..."):
        results = Compactor(spark, endpoints, topics, knobs, say=console.print).run()
    summary = Table(title=f"compaction of {len(topics)} tables in {env}")
    for column in ("table", "partition", "action", "files before → after", "MiB before → after", "rows", "why"):
        summary.add_column(column)
    for result in (r for r in results if r.action != Action.SKIPPED):
        summary.add_row(
            result.table,
            "/".join(result.partition),
            result.action,
            f"{result.files_before} → {result.files_after}",
            f"{result.bytes_before / 2**20:.1f} → {result.bytes_after / 2**20:.1f}",
            str(result.rows),
            result.reason,
        )
    console.print(summary)
    skipped = sum(r.action == Action.SKIPPED for r in results)
    console.print(f"{skipped} partitions skipped (too few new files, or nothing new since their last compaction)")
    console.print(f"compacted files are under s3://{endpoints.bucket}/compacted/ (manifests under /state/)")
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
    jar: Annotated[list[str], typer.Option("--jar", help="s3:// URI of a connector jar; repeat for each.")],
    target_file_mb: Annotated[int, typer.Option()] = 128,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends.")] = False,
) -> None:
    """Start a compaction job run on EMR Serverless and print its id (and, with --wait, its states)."""
    import time
    import uuid

    from kafkalake.aws import make_client
    from kafkalake.jobspec import JobArtifacts, compactor_run, terminal

    artifacts = JobArtifacts(entry_point, py_files, catalog_archive, environment_archive, tuple(jar))
    job = compactor_run(environment(env), artifacts, [table], target_file_mb)
    client = make_client(local_endpoints(), "emr-serverless")
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
