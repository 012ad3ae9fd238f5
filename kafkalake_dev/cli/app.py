"""The ``kafkalake`` command line: a thin shell that parses options and calls the dev tooling and the jobs;
``kafkalake_dev.cli.render`` makes what it prints. The commands that run the jobs are in ``kafkalake_dev.cli.jobs``,
the catalog commands that talk to a cluster in ``kafkalake_dev.cli.catalog``, the options they share (and their
defaults) in ``kafkalake_dev.cli.options``. Every local command reaches the local
stack with moto's credentials, asked for explicitly (``on_local_stack``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kafkalake.topic_catalog import Topic, TopicCatalogInvalid, load_topic_catalog
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.cli import catalog as cli_catalog
from kafkalake_dev.cli import erase as cli_erase
from kafkalake_dev.cli import jobs as cli_jobs
from kafkalake_dev.cli import render
from kafkalake_dev.cli.options import DEFAULT_CATALOG, CatalogOption, EnvOption, environment, on_local_stack
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import LOCAL_ENV

if TYPE_CHECKING:
    from rich.console import Console

    from kafkalake.endpoints import Endpoints

app = typer.Typer(help="kafkalake: cool Kafka topics down into a queryable S3 data lake.", no_args_is_help=True)
catalog_app = typer.Typer(
    help="Validate and inspect the topic catalog; import it from a cluster, compare it with one, check its schemas.",
    no_args_is_help=True,
)
stack_app = typer.Typer(help="The local stack: Kafka, schema registry, moto (AWS), Spark jars.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
app.add_typer(stack_app, name="stack")
app.command("interop")(cli_jobs.interop)


@catalog_app.command("validate")
def catalog_validate(catalog: CatalogOption = DEFAULT_CATALOG) -> None:
    """Check every topic file; list every problem with its file, field and fix; then every table with its personal
    fields (action, where declared) and the fields whose names suggest personal data (reported, never applied)."""
    try:
        loaded = load_topic_catalog(catalog)
    except TopicCatalogInvalid as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"catalog {catalog}: {len(loaded.topics)} topics in environments {', '.join(loaded.environments())}: OK")
    for topic in loaded.topics:
        typer.echo(f"  {topic.env:<11} {topic.kafka_topic:<45} -> {topic.database}.{topic.table}")
        for line in render.personal_data_lines(topic):
            typer.echo(line)


@catalog_app.command("show")
def catalog_show(
    topic: Annotated[str, typer.Argument(help="Topic name, Kafka topic or database.table.")],
    env: Annotated[str | None, typer.Option(help="Environment, when the topic exists in several.")] = None,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Print the full derived configuration of one topic."""
    try:
        found = load_topic_catalog(catalog).get(topic, env)
    except (TopicCatalogInvalid, KeyError) as exc:
        typer.echo(str(exc).strip('"'), err=True)
        raise typer.Exit(1) from exc
    typer.echo(json.dumps(found.derived(), indent=2))


catalog_app.command("import")(cli_catalog.catalog_import)
catalog_app.command("drift")(cli_catalog.catalog_drift)
catalog_app.command("check")(cli_catalog.catalog_check)


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


@app.command("provision")
def provision_cmd(ctx: typer.Context, env: EnvOption = LOCAL_ENV, catalog: CatalogOption = DEFAULT_CATALOG) -> None:
    """Create on the local AWS endpoint what `cdk deploy` would: versioned bucket with the template's lifecycle rules
    and KMS keys, queue + DLQ, notifications, Glue."""
    from kafkalake.aws import make_client
    from kafkalake_dev.local.provision import PROVISIONED_SERVICES, provision

    endpoints = on_local_stack(ctx)
    clients = {s: make_client(endpoints, s) for s in PROVISIONED_SERVICES}
    done = provision(clients, endpoints.region, environment(env), load_topic_catalog(catalog))
    typer.echo(f"provisioned {env} on {endpoints.aws_endpoint_url}:")
    typer.echo(f"  bucket     s3://{done.bucket}\n  queue      {done.queue_url}\n  dlq        {done.dlq_url}")
    typer.echo(f"  databases  {', '.join(done.databases)}\n  crawlers   {', '.join(done.crawlers) or '-'}")
    typer.echo(f"  restricted {done.restricted_key_arn} (KMS key of restricted quarantine objects)")


@app.command("maintain")
def maintain(
    ctx: typer.Context,
    once: Annotated[bool, typer.Option("--once", help="Run one scheduled invocation and exit.")] = True,
    env: EnvOption = LOCAL_ENV,
    catalog: CatalogOption = DEFAULT_CATALOG,
    native: Annotated[bool, typer.Option(help="Infer every table natively (local endpoints run no crawlers).")] = False,
) -> None:
    """Run the metastore maintainer's Lambda handler once against the configured endpoints."""
    from kafkalake_dev.local.maintainer import invoke_locally, lambda_log

    if not once:
        raise typer.BadParameter(
            "only --once is supported locally; in AWS its schedule runs it (maintainer_schedule_minutes)"
        )
    settings = environment(env)
    report = invoke_locally(on_local_stack(ctx), settings, load_topic_catalog(catalog), native=native)
    for name, value in sorted(report["counts"].items()):
        typer.echo(f"  {name:<32} {value}")
    for error in report["errors"]:
        typer.echo(f"  error: {error}", err=True)
    typer.echo(f"maintainer run done: {len(report['events'])} events published to bus {settings.event_bus_name}")
    typer.echo(f"its structured logs and metrics: {lambda_log()}")


@app.command("reconcile")
def reconcile(ctx: typer.Context, env: EnvOption = LOCAL_ENV, catalog: CatalogOption = DEFAULT_CATALOG) -> None:
    """Add the partitions S3 has and Glue lacks (lost notifications); report Glue partitions with no objects."""
    from kafkalake.aws import make_client
    from kafkalake.topic_catalog import tables_document
    from lambdas.reconciler.dal import GluePartitions, LakeFolders
    from lambdas.reconciler.logic import reconcile_tables
    from lambdas.tables import tables_from_document

    endpoints = on_local_stack(ctx, environment(env).bucket)
    lake, glue = (
        LakeFolders(make_client(endpoints, "s3"), endpoints.bucket),
        GluePartitions(make_client(endpoints, "glue")),
    )
    tables = tables_from_document(tables_document(load_topic_catalog(catalog).for_env(env)))  # as the Lambda reads them
    results = reconcile_tables(lake, glue, tables)
    for line in render.reconcile_lines(results):
        typer.echo(line)
    if any(done.failed for done in results):
        raise typer.Exit(1)


@app.command("audit")
def audit_offsets(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option("--topic", help="Topic name, Kafka topic or database.table.")],
    env: EnvOption = LOCAL_ENV,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Show, per Kafka partition, that every offset from the first archived to the committed one is accounted for
    once (a data row, a quarantined record or a dropped tombstone); exit 1 on any gap or overlap."""
    from kafkalake.aws import make_client
    from kafkalake_dev.checks.audit import audit, committed_offsets, read_lake

    found = load_topic_catalog(catalog).get(topic, env)
    endpoints = on_local_stack(ctx, environment(env).bucket)
    console = render.wide_console()
    if found.spec.table_format == TableFormat.ICEBERG:
        audit_iceberg_offsets(console, endpoints, found)
        return
    with console.status(f"reading receipts, manifests and footers of {found.kafka_topic} ..."):
        lake = read_lake(make_client(endpoints, "s3"), endpoints.bucket, found)
    results = audit(lake, committed_offsets(endpoints.kafka_bootstrap, found.kafka_topic))
    console.print(render.audit_summary(found, lake, results))
    problems = [p for r in results for p in r.problems]
    for problem in problems:
        console.print(f"  {problem}", markup=False)
    console.print(f"receipts under s3://{endpoints.bucket}/{found.prefix.receipts_prefix()}")
    if problems:
        raise typer.Exit(1)


def audit_iceberg_offsets(console: Console, endpoints: Endpoints, topic: Topic) -> None:
    """The offset audit of an Iceberg topic, from its snapshot summaries (``kafkalake_dev.checks.iceberg_audit``)."""
    from kafkalake_dev.checks.audit import committed_offsets
    from kafkalake_dev.checks.iceberg_audit import audit_topic

    with console.status(f"reading the snapshots and offsets of {topic.database}.{topic.table} ..."):
        problems = audit_topic(endpoints, topic, committed_offsets(endpoints.kafka_bootstrap, topic.kafka_topic))
    for problem in problems:
        console.print(f"  {problem}", markup=False)
    verdict = f"{len(problems)} problems" if problems else "every offset accounted for once"
    console.print(f"{topic.kafka_topic} (Iceberg table {topic.database}.{topic.table}): {verdict}")
    if problems:
        raise typer.Exit(1)


dlq_app = typer.Typer(help="The notification dead-letter queue.", no_args_is_help=True)
app.add_typer(dlq_app, name="dlq")


@dlq_app.command("redrive")
def dlq_redrive(
    ctx: typer.Context,
    env: EnvOption = LOCAL_ENV,
    move_task: Annotated[bool, typer.Option(help="Use SQS's message-move task (else copy the messages).")] = True,
) -> None:
    """Move the dead-letter queue's messages back to the notification queue; the next drain registers them."""
    from kafkalake.aws import make_client
    from kafkalake_dev.local.redrive import redrive

    settings = environment(env)
    sqs = make_client(on_local_stack(ctx), "sqs")
    dlq_url = sqs.get_queue_url(QueueName=settings.dead_letter_queue_name)["QueueUrl"]
    queue_url = sqs.get_queue_url(QueueName=settings.queue_name)["QueueUrl"]
    done = redrive(sqs, dlq_url, queue_url, use_move_task=move_task, say=typer.echo)
    handle = f" (task {done.task_handle})" if done.task_handle else ""
    typer.echo(f"redrive by {done.method}{handle}: {done.moved} messages from {dlq_url} to {queue_url}")


app.command("demo")(cli_jobs.demo)


@app.command("inventory")
def inventory(
    ctx: typer.Context,
    env: EnvOption = LOCAL_ENV,
    html: Annotated[Path | None, typer.Option(help="Also write a self-contained HTML page here.")] = None,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Every table: owner, schema versions, columns per version, partitions, freshness, drift, files, bytes,
    quarantine; then the catalog's drift from the cluster."""
    from kafkalake.aws import make_client
    from kafkalake.drift import compare, observe
    from kafkalake.iceberg import table_catalog
    from kafkalake.kafka_access import kafka_access
    from kafkalake_dev.checks.inventory import take_inventory

    endpoints = on_local_stack(ctx)
    settings = environment(env)
    loaded = load_topic_catalog(catalog)
    drift = compare(observe(kafka_access(endpoints), loaded.topics), loaded.topics, env, settings.topic_naming)
    s3, glue = make_client(endpoints, "s3"), make_client(endpoints, "glue")
    tables = table_catalog(dataclasses.replace(endpoints, bucket=settings.bucket))
    found = take_inventory(s3, glue, settings.bucket, loaded.for_env(env), drift=drift, tables=tables)
    render.wide_console().print(render.inventory_table(found, f"Inventory of {env} (s3://{settings.bucket})"))
    for line in drift.lines():
        typer.echo(f"  drift: {line}")
    if html is not None:
        render.write_inventory_page(found, f"kafkalake inventory: {env}", html, drift.lines())
        typer.echo(f"inventory page: {html}")


@app.command("access")
def access(env: EnvOption = LOCAL_ENV, catalog: CatalogOption = DEFAULT_CATALOG) -> None:
    """The access the stacks will enforce: per consumer role, each table's readable and hidden columns."""
    from kafkalake.permissions import access_model
    from kafkalake_dev.checks.lake_access import matrix_lines

    model = access_model(environment(env), load_topic_catalog(catalog).for_env(env))
    typer.echo("\n".join(matrix_lines(model)))


app.command("archive")(cli_jobs.archive)
app.add_typer(cli_jobs.compact_app, name="compact")
app.add_typer(cli_erase.erase_app, name="erase")


if __name__ == "__main__":
    app()
