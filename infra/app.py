"""Build the CDK app: one stack per environment (``-c env=<name>`` picks one; default: all)."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from infra.repo import catalog_dir, environments_file
from infra.stack import KafkalakeStack
from kafkalake.environments import EnvironmentConfig, load_environments
from kafkalake.topic_catalog import TopicCatalog, load_topic_catalog


def build(
    app: App,
    environments: dict[str, EnvironmentConfig],
    catalog: TopicCatalog,
    build_dir: Path,
    only: str | None = None,
) -> dict[str, KafkalakeStack]:
    if only is not None and only not in environments:
        raise SystemExit(f"unknown environment {only!r}; environments.yaml has: {', '.join(sorted(environments))}")
    stacks = {}
    for name, settings in sorted(environments.items()):
        if only is None or name == only:
            stacks[name] = KafkalakeStack(
                app,
                f"kafkalake-{name}",
                settings=settings,
                topics=catalog.for_env(name),
                build_dir=build_dir,
                env=Environment(account=settings.account, region=settings.region),
            )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stacks


def main() -> None:
    app = App()
    only = app.node.try_get_context("env")
    environments = load_environments(environments_file())
    build(app, environments, load_topic_catalog(catalog_dir()), Path(app.outdir) / ".kafkalake-build", only)
    app.synth()
