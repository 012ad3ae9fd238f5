"""The ``kafkalake catalog`` commands that compare the catalog with a cluster or check its schemas: ``import``
(``kafkalake_dev.onboarding.importer``), ``drift`` (``kafkalake.drift``) and ``check``
(``kafkalake_dev.checks.compatibility``). Thin: options in, the pure logic's findings out; the cluster is the local
stack's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from kafkalake.kafka_access import kafka_access
from kafkalake.registry import value_subject
from kafkalake.topic_catalog import TopicCatalog, TopicCatalogInvalid, load_topic_catalog
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.checks.compatibility import Mode, check_versions, glue_refusals, registry_differences
from kafkalake_dev.cli.options import DEFAULT_CATALOG, CatalogOption, EnvOption, environment, on_local_stack
from kafkalake_dev.local.endpoints import LOCAL_ENV


def catalog_import(
    ctx: typer.Context,
    env: EnvOption = LOCAL_ENV,
    match: Annotated[str, typer.Option(help="Only Kafka topics matching this glob (e.g. 'staging.acme.*').")] = "*",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write nothing; print what would be written.")] = False,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Write the catalog files for the cluster's topics (Kafka + registry) for review; never overwrite a file."""
    from kafkalake.drift import observe
    from kafkalake_dev.onboarding.importer import WriteOutcome, import_topics, off_convention_lines, write_proposals

    access = kafka_access(on_local_stack(ctx))
    settings = environment(env)
    existing = _loaded(catalog)
    view = observe(access)
    found = import_topics(
        access, view, env=env, convention=settings.topic_naming, root=catalog, catalog=existing, match=match
    )
    changed = 0
    for proposal in found.proposals:
        times = ", ".join(t.candidate.path for t in proposal.times) or "none (Kafka time)"
        typer.echo(
            f"{proposal.name.kafka_topic}: {proposal.value_format} ({proposal.format_evidence}), business time: {times}"
        )
        for path, action, diff in write_proposals([proposal], dry_run=dry_run):
            typer.echo(f"  {action:<26} {path}")
            if diff:
                changed += 1
                typer.echo(diff)
    for flagged in found.flagged:
        typer.echo(f"not imported: {flagged.kafka_topic}: {flagged.reason}")
    for line in off_convention_lines(found.off_convention):
        typer.echo(line)
    imported = "would be imported (dry run: nothing written)" if dry_run else "imported"
    typer.echo(
        f"{len(found.proposals)} topics {imported} into {catalog}, {len(found.flagged)} flagged, "
        f"{len(found.off_convention)} off the naming convention; {changed} existing files {WriteOutcome.WOULD_CHANGE}"
    )


def catalog_drift(ctx: typer.Context, env: EnvOption = LOCAL_ENV, catalog: CatalogOption = DEFAULT_CATALOG) -> None:
    """Compare Kafka and the registry with the catalog; publish the counts as metrics; exit 1 on drift."""
    from kafkalake.aws import make_client
    from kafkalake.drift import compare, metric_data, observe
    from kafkalake.metrics import NAMESPACE

    endpoints = on_local_stack(ctx)
    topics = _loaded(catalog).topics
    drift = compare(observe(kafka_access(endpoints), topics), topics, env, environment(env).topic_naming)
    for line in drift.lines():
        typer.echo(f"  {line}")
    data = metric_data(drift, datetime.now(UTC))
    make_client(endpoints, "cloudwatch").put_metric_data(Namespace=NAMESPACE, MetricData=data)
    typer.echo(f"drift of {env}: {'none' if drift.clean else 'FOUND'}; metrics sent to {endpoints.aws_endpoint_url}")
    if not drift.clean:
        raise typer.Exit(1)


def catalog_check(
    ctx: typer.Context,
    env: Annotated[str | None, typer.Option(help="Only this environment's topics.")] = None,
    mode: Annotated[Mode, typer.Option(help="Avro compatibility between consecutive versions.")] = Mode.BACKWARD,
    registry: Annotated[bool, typer.Option(help="Also compare with the local stack's schema registry.")] = False,
    catalog: CatalogOption = DEFAULT_CATALOG,
) -> None:
    """Check each topic's consecutive schema versions (Avro resolution) and which changes Glue refuses; exit 1 on
    any refusal."""
    topics = [t for t in _loaded(catalog).topics if env is None or t.env == env]
    client = kafka_access(on_local_stack(ctx)).registry() if registry else None
    refused = 0
    for topic in topics:
        where = f"{topic.source.parent}/{topic.name}.v*.avsc"
        iceberg = topic.spec.table_format == TableFormat.ICEBERG
        refusals = [*check_versions(topic.schemas, mode), *glue_refusals(topic.schemas, iceberg=iceberg)]
        problems = [str(r) for r in refusals]
        if client is not None:
            problems += registry_differences(
                topic.schemas, client.versions(value_subject(topic.kafka_topic), topic.spec.message)
            )
        refused += len(problems)
        typer.echo(f"{topic.env:<11} {topic.kafka_topic:<45} {'ok' if not problems else 'REFUSED'}")
        for problem in problems:
            typer.echo(f"  {where}: {problem}")
    typer.echo(f"{len(topics)} topics checked ({mode}): {refused} refusals")
    if refused:
        raise typer.Exit(1)


def _loaded(catalog: CatalogOption) -> TopicCatalog:
    try:
        return load_topic_catalog(catalog)
    except TopicCatalogInvalid as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
