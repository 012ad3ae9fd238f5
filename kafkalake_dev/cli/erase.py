"""``kafkalake erase``: record an erasure request (``--subject``), list requests with their state (``status``), and run
the erasure job on local Spark (``run``). The subject is hashed with the environment's pseudonym key before anything
is stored or printed; locally against the local stack, with ``--no-local`` in the environment's AWS account (your
credentials, the environment's region)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from kafkalake.aws import make_client
from kafkalake.erasure import RequestStore, status
from kafkalake.jobspec import COMPACTOR_GRACE_MINUTES, LEASE_TTL_SECONDS
from kafkalake.topic_catalog import Topic, load_topic_catalog
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
from kafkalake_dev.local.erase_requests import record_request

if TYPE_CHECKING:
    from kafkalake.endpoints import Endpoints

erase_app = typer.Typer(
    help="Erase a person's rows from every table: record a request, show the requests' state, run the job.",
    invoke_without_command=True,
)
LocalOption = Annotated[
    bool, typer.Option("--local/--no-local", help="The local stack, or the environment's AWS account.")
]


def _endpoints(ctx: typer.Context, env: str, local: bool) -> Endpoints:
    return on_local_stack(ctx, environment(env).bucket) if local else environment(env).endpoints()


def erasable_tables(topics: list[Topic], names: list[str] | None) -> list[Topic]:
    """The tables named (each must declare erasure), or every erasable table of the environment."""
    if not names:
        return [t for t in topics if t.erasable]
    chosen = []
    for name in names:
        found = [t for t in topics if name in (t.name, t.kafka_topic, f"{t.database}.{t.table}")]
        if not found or not found[0].erasable:
            raise typer.BadParameter(
                f"{name!r} is not a table of the environment that declares erasure (subject_fields or erasure: by_key)"
            )
        chosen.append(found[0])
    return chosen


@erase_app.callback()
def erase(
    ctx: typer.Context,
    subject: Annotated[
        str | None, typer.Option(help="The subject's identifier; stored only as its keyed hash.", show_default=False)
    ] = None,
    table: Annotated[
        list[str] | None, typer.Option("--table", help="Only these tables; repeat; every erasable one when omitted.")
    ] = None,
    env: EnvOption = LOCAL_ENV,
    local: LocalOption = True,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Record a request to erase ``--subject`` from every erasable table (or the ``--table``s); the erasure job
    carries it out."""
    if ctx.invoked_subcommand is not None:
        return
    if subject is None:
        raise typer.BadParameter("pass --subject <identifier>, or a command (status, run)")
    topics = erasable_tables(load_topic_catalog(catalog).for_env(env), table)
    if not topics:
        raise typer.BadParameter(f"no table of {env!r} declares erasure (subject_fields or erasure: by_key)")
    endpoints = _endpoints(ctx, env, local)
    recorded = record_request(endpoints, env, topics, subject, named=bool(table))
    request = recorded.request
    typer.echo(f"erasure request {request.request_id} recorded at s3://{endpoints.bucket}/{recorded.key}")
    typer.echo(
        f"  tables: {', '.join(f'{t.database}.{t.table}' for t in topics)}; deadline {request.deadline.isoformat()}"
    )


@erase_app.command("status")
def erase_status(ctx: typer.Context, env: EnvOption = LOCAL_ENV, local: LocalOption = True) -> None:
    """Every request of the environment: pending, done or late (against its deadline); exit 1 when any is late."""
    endpoints = _endpoints(ctx, env, local)
    store = RequestStore(make_client(endpoints, "s3"), endpoints.bucket, env)
    requests, problems = store.requests()
    receipts = store.receipts()
    now = datetime.now(UTC)
    late = 0
    typer.echo(f"{'request':<58} {'source':<10} {'subjects':>8} {'deadline':<25} {'state':<8} rows removed")
    for request in sorted(requests, key=lambda r: r.created_at):
        receipt = receipts.get(request.request_id)
        state = status(request, receipt, now)
        late += state == "late"
        removed = sum(t["rows_removed"] for t in receipt["tables"].values()) if receipt else ""
        typer.echo(
            f"{request.request_id:<58} {request.source:<10} {len(request.subjects):>8} "
            f"{request.deadline.isoformat(timespec='seconds'):<25} {state:<8} {removed}"
        )
    for problem in problems:
        typer.echo(f"not a request: {problem}", err=True)
    if late or problems:
        raise typer.Exit(1)


@erase_app.command("run")
def erase_run(
    ctx: typer.Context,
    env: EnvOption = LOCAL_ENV,
    grace_minutes: Annotated[
        int, typer.Option(help="Delete replaced objects this long after the swap.")
    ] = COMPACTOR_GRACE_MINUTES,
    lease_ttl_seconds: LeaseTtlOption = LEASE_TTL_SECONDS,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Carry out every pending request of the environment on local Spark; exit 1 when any table failed."""
    from kafkalake_dev.local.spark import principal_session
    from spark_jobs.common import Run
    from spark_jobs.compaction.work import Knobs
    from spark_jobs.erasure.job import Eraser

    endpoints = with_restricted_key(on_local_stack(ctx, environment(env).bucket))
    spark = principal_session(endpoints, "kafkalake-erasure")
    spark.sparkContext.setLogLevel("ERROR")
    knobs = dataclasses.replace(Knobs(), grace_period=timedelta(minutes=grace_minutes))
    run = Run.new(spark, timedelta(seconds=lease_ttl_seconds))
    outcome = Eraser(
        spark, endpoints, env, load_topic_catalog(catalog).for_env(env), knobs, run=run, say=typer.echo
    ).run()
    if outcome.failed:
        raise typer.Exit(1)
