"""The ``kafkalake`` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kafkalake import stack
from kafkalake.catalog import CatalogInvalid, load_catalog
from kafkalake.config import repo_root

app = typer.Typer(help="kafkalake: cool Kafka topics down into a queryable S3 data lake.", no_args_is_help=True)
catalog_app = typer.Typer(help="Validate and inspect the topic catalog.", no_args_is_help=True)
stack_app = typer.Typer(help="The local stack: Kafka, schema registry, moto (AWS), Spark jars.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
app.add_typer(stack_app, name="stack")

CatalogOption = Annotated[Path, typer.Option("--catalog", help="Topic catalog folder.")]
DEFAULT_CATALOG = repo_root() / "catalog"


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
) -> None:
    """Run the metastore maintainer's Lambda handler once against the configured endpoints."""
    import os

    from kafkalake.config import Endpoints
    from kafkalake.environments import load_environments
    from lambdas.maintainer.local import invoke_locally

    if not once:
        raise typer.BadParameter("only --once is supported locally; in AWS the schedule runs it every 10 minutes")
    settings = load_environments()[env]
    report = invoke_locally(Endpoints.from_env(), settings, load_catalog(catalog), os.environ)
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

    from rich.console import Console
    from rich.progress import Progress, TaskID
    from rich.table import Table

    from kafkalake.config import Endpoints
    from kafkalake.registry import RegistryClient
    from kafkalake.workload import produce_topic

    console = Console()
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
    maintain(once=True, env=env, catalog=catalog)
    console.print(
        "[bold yellow]Not built yet, so not run:[/] the archiver (Kafka → S3 Parquet, issue #4), the compactor "
        "(issue #5). Nothing has been archived; the maintainer above ran against whatever objects exist."
    )
    console.print("Next: `kafkalake catalog show <topic>`, `kafkalake maintain --once`, `make status`.")
