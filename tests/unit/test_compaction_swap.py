"""The compactor's swap (``spark_jobs.compaction.swap``) against in-process Glue: what it writes to the partition."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import boto3
import pytest
from moto import mock_aws

from infra.repo import catalog_dir
from kafkalake.glue import COMPLETE_PARAMETER
from kafkalake.topic_catalog import load_topic_catalog
from spark_jobs.compaction.manifest import Manifest, ManifestState
from spark_jobs.compaction.swap import RUN_PARAMETER, swap
from spark_jobs.compaction.work import Rewriter, Work

TOPIC = load_topic_catalog(catalog_dir()).get("customer-updated", "staging")
VALUES = ["1", "2026-11-20", "07"]
RAW = "s3://lake/raw/partition/"


@pytest.fixture
def glue() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("glue", region_name="eu-west-1")
        client.create_database(DatabaseInput={"Name": TOPIC.database})
        keys = [{"Name": name, "Type": "string"} for name in ("v", "dt", "hour")]
        client.create_table(
            DatabaseName=TOPIC.database,
            TableInput={"Name": TOPIC.table, "PartitionKeys": keys, "StorageDescriptor": {"Location": "s3://lake/t/"}},
        )
        client.create_partition(
            DatabaseName=TOPIC.database,
            TableName=TOPIC.table,
            PartitionInput={"Values": VALUES, "StorageDescriptor": {"Location": RAW}, "Parameters": {"a": "1"}},
        )
        yield client


def partition(glue: Any) -> dict[str, Any]:
    found: dict[str, Any] = glue.get_partition(
        DatabaseName=TOPIC.database, TableName=TOPIC.table, PartitionValues=VALUES
    )["Partition"]
    return found


def test_a_swap_keeps_what_the_partition_gained_since_the_run_selected_it(glue: Any) -> None:
    selected = partition(glue)  # as the run's selection read it
    changed = {**selected["Parameters"], COMPLETE_PARAMETER: "true"}  # e.g. the maintainer marks it meanwhile
    glue.update_partition(
        DatabaseName=TOPIC.database,
        TableName=TOPIC.table,
        PartitionValueList=VALUES,
        PartitionInput={"Values": VALUES, "StorageDescriptor": selected["StorageDescriptor"], "Parameters": changed},
    )
    manifest = Manifest(VALUES, "run1", {}, "runs/run1/", previous_location=RAW, state=ManifestState.VERIFIED)
    item = Work(TOPIC, manifest, "manifests/run1.json")
    advanced: list[ManifestState] = []
    rewriter = SimpleNamespace(
        glue=glue,
        bucket="lake",
        fence=lambda _: None,
        now=lambda: datetime(2026, 11, 20, 12, tzinfo=UTC),
        advance=lambda _, state: advanced.append(state),
    )

    swap(cast(Rewriter, rewriter), item)

    after = partition(glue)
    assert after["StorageDescriptor"]["Location"] == "s3://lake/runs/run1/"
    assert after["Parameters"] == {"a": "1", COMPLETE_PARAMETER: "true", RUN_PARAMETER: "run1"}
    assert advanced == [ManifestState.SWAPPED] and not item.refused
