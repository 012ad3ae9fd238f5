import os
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from pyspark.sql import SparkSession

from infra.assets import connector_jars


@pytest.fixture(scope="module")
def bare_spark() -> Iterator[SparkSession]:
    """A bare local session (no stack; only the shipped connectors, for ``from_avro``) for the pure transforms; an
    active session is reused (the transforms need nothing the stack's session lacks), one made here is stopped
    after the module."""
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers (mapInArrow) run this virtualenv
    session = (
        SparkSession.builder.master("local[1]")
        .appName("kafkalake-unit")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.jars", ",".join(str(p) for p in connector_jars()))
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture
def s3() -> Iterator[Any]:
    """In-process S3 with an empty bucket ``lake`` (a module with its own ``s3`` fixture overrides this one)."""
    with mock_aws():
        client = boto3.client("s3", region_name="eu-west-1")
        client.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        yield client


@pytest.fixture(scope="session")
def synthesized_templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every environment's template, synthesized once per worker with cdk.json's context as ``make synth`` and
    ``cdk deploy`` do (it minimizes policies): what the permission check's evaluators read."""
    import json

    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.app import build
    from infra.repo import REPO_ROOT, catalog_dir, environments_file
    from kafkalake.environments import load_environments
    from kafkalake.topic_catalog import load_topic_catalog

    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    environments, catalog = load_environments(environments_file()), load_topic_catalog(catalog_dir())
    stacks = build(App(context=context), environments, catalog, tmp_path_factory.mktemp("build"))
    return {env: dict(Template.from_stack(stack).to_json()) for env, stack in stacks.items()}


@pytest.fixture(scope="session")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """The CDK app and every environment's stack (``infra.stack.KafkalakeStack``), built once per worker from
    environments.yaml and the catalog, without cdk.json's context: what the template assertions
    (``tests/unit/test_infra_*.py``) read."""
    from aws_cdk import App

    from infra.app import build
    from tests.unit.cdk_templates import CATALOG, ENVIRONMENTS

    app = App()
    return app, build(app, ENVIRONMENTS, CATALOG, tmp_path_factory.mktemp("build"))
