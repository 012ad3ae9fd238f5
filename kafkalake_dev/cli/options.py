"""The options the ``kafkalake`` commands share, with their defaults, and how a command reaches its environment and
the local stack."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from infra.repo import catalog_dir, environments_file
from kafkalake.environments import EnvironmentConfig, EnvironmentsInvalid, load_environments
from kafkalake_dev.local.endpoints import local_credentials, local_endpoints

if TYPE_CHECKING:
    from kafkalake.endpoints import Endpoints

CatalogOption = Annotated[Path, typer.Option("--catalog", help="Topic catalog folder.")]
DEFAULT_CATALOG = catalog_dir()
EnvOption = Annotated[str, typer.Option("--env", help="Environment from environments.yaml.")]
LeaseTtlOption = Annotated[
    float, typer.Option(help="A run's lease on a topic or table is stale this long after its last renewal.")
]


def environment(name: str) -> EnvironmentConfig:
    """One entry of environments.yaml (or of the file KAFKALAKE_ENVIRONMENTS names)."""
    try:
        found = load_environments(environments_file())
    except EnvironmentsInvalid as exc:
        raise typer.BadParameter(str(exc)) from exc
    if name not in found:
        raise typer.BadParameter(f"unknown environment {name!r}; {environments_file()} has: {', '.join(sorted(found))}")
    return found[name]


def on_local_stack(ctx: typer.Context, bucket: str | None = None) -> Endpoints:
    """The local stack's endpoints (``bucket`` instead of the local one when given), with moto's credentials in
    the process environment until the command ``ctx`` runs ends (boto3's clients and the Spark started here read
    them)."""
    ctx.with_resource(local_credentials())
    return local_endpoints(bucket)


def with_restricted_key(endpoints: Endpoints) -> Endpoints:
    """``endpoints`` with the local stack's restricted key (made if missing), for the jobs that write restricted
    quarantine objects: locally they do it with that key as in AWS."""
    from kafkalake.aws import make_client
    from kafkalake_dev.local.provision import ensure_restricted_key

    return dataclasses.replace(endpoints, restricted_key_arn=ensure_restricted_key(make_client(endpoints, "kms")))
