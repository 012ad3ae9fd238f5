"""The maintainer's Lake Formation tagging: personal columns before the table, once per cache period, a refusal
that fails the table with the fix, and a table a crawler created tagged by the first drain that meets it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from kafkalake.lftags import TAG_VALUES
from kafkalake.naming import TableInference
from lambdas.maintainer.dal import LakeTags, State, TagsRefused
from lambdas.maintainer.logic import DrainConfig
from tests.unit.test_maintainer_overlap import BUCKET, TABLE, Lake, key

REGION, DATABASE, NAME = "eu-west-1", "acme_staging", "card_authorized"


@pytest.fixture
def lakeformation() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("lakeformation", region_name=REGION)
        sent: list[dict[str, Any]] = []
        client.meta.events.register(
            "provide-client-params.lakeformation.AddLFTagsToResource", lambda params, **_: sent.append(params)
        )
        client.sent = sent
        yield client


def create_tags(lakeformation: Any, *keys: str) -> None:
    for tag_key in keys:
        lakeformation.create_lf_tag(TagKey=tag_key, TagValues=list(TAG_VALUES[tag_key]))


def test_personal_columns_are_tagged_before_the_table_and_only_once_per_cache_period(lakeformation: Any) -> None:
    create_tags(lakeformation, "sensitivity", "pii")
    counts: Counter[str] = Counter()
    tags = LakeTags(lakeformation, State(600), counts)
    assert tags.tag(DATABASE, NAME, "confidential", ["customer", "card"])
    assert [list(p["Resource"]) for p in lakeformation.sent] == [["TableWithColumns"], ["Table"]]
    assert lakeformation.sent[0]["Resource"]["TableWithColumns"]["ColumnNames"] == ["card", "customer"]
    table = {"Table": {"DatabaseName": DATABASE, "Name": NAME}}
    on_table = lakeformation.get_resource_lf_tags(Resource=table)["LFTagsOnTable"]
    assert {t["TagKey"]: t["TagValues"] for t in on_table} == {"pii": ["false"], "sensitivity": ["confidential"]}

    assert not tags.tag(DATABASE, NAME, "confidential", ["card", "customer"])  # cached: nothing sent
    assert tags.tag(DATABASE, NAME, "confidential", ["card", "customer", "email"])  # a new personal column
    assert len(lakeformation.sent) == 4 and counts["tables_tagged"] == 2


def test_a_table_without_personal_columns_gets_its_table_tags_only(lakeformation: Any) -> None:
    create_tags(lakeformation, "sensitivity", "pii")
    LakeTags(lakeformation, State(600), Counter()).tag(DATABASE, NAME, "public", [])
    assert [list(p["Resource"]) for p in lakeformation.sent] == [["Table"]]


def test_a_refused_column_tag_leaves_the_table_untagged_and_says_how_to_fix_it(lakeformation: Any) -> None:
    create_tags(lakeformation, "sensitivity")  # no pii tag: Lake Formation refuses the columns' tag
    state = State(600)
    with pytest.raises(TagsRefused, match=r"the columns of acme_staging\.card_authorized .*ASSOCIATE"):
        LakeTags(lakeformation, state, Counter()).tag(DATABASE, NAME, "pii", ["email"])
    assert [list(p["Resource"]) for p in lakeformation.sent] == [["TableWithColumns"]]  # the table: never sent
    assert state.tagged.get((DATABASE, NAME)) is None  # tried again by the next sync


def test_a_table_its_crawler_created_is_tagged_by_the_first_drain_that_meets_it(lakeformation: Any) -> None:
    """Tagged columns are those the table has: ``email`` is personal but not in the table yet."""
    services = ("s3", "sqs", "glue", "events")
    s3, sqs, glue, events = (boto3.client(s, region_name=REGION) for s in services)
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    events.create_event_bus(Name="lake-events")
    create_tags(lakeformation, "sensitivity", "pii")
    crawled = TABLE.model_copy(
        update={"inference": TableInference.CRAWLER, "sensitivity": "pii", "personal_columns": ("amount", "email")}
    )
    glue.create_database(DatabaseInput={"Name": DATABASE})
    target = {"S3Targets": [{"Path": crawled.location(BUCKET)}]}
    glue.create_crawler(Name=crawled.crawler_name, Role="crawler", DatabaseName=DATABASE, Targets=target)
    columns = [{"Name": "id", "Type": "string"}, {"Name": "amount", "Type": "string"}]
    glue.create_table(DatabaseName=DATABASE, TableInput={"Name": NAME, "StorageDescriptor": {"Columns": columns}})
    queue_url = sqs.create_queue(QueueName="notifications")["QueueUrl"]
    settings = DrainConfig(queue_url, BUCKET, "lake-events", "staging", [crawled], wait_seconds=0)
    lake = Lake(s3, sqs, glue, events, lakeformation, settings)
    lake.put(key(1, 3))
    report = lake.drain(State(600))
    assert report.errors == [] and report.counts["tables_tagged"] == 1
    [columns_sent, table_sent] = lakeformation.sent
    assert columns_sent["Resource"]["TableWithColumns"]["ColumnNames"] == ["amount"]
    assert table_sent["LFTags"] == [
        {"TagKey": "pii", "TagValues": ["false"]},
        {"TagKey": "sensitivity", "TagValues": ["pii"]},
    ]
