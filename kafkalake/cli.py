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
