"""The reconciler's table isolation and the shape of its summary, against in-process AWS."""

from __future__ import annotations

from datetime import date
from typing import Any

import boto3
from botocore.exceptions import ClientError
from moto import mock_aws

from kafkalake.glue import table_input
from kafkalake.layout import Partition, TablePrefix
from kafkalake.naming import TableInference
from kafkalake.s3_location import s3_uri
from kafkalake.topic_spec import TableFormat
from lambdas.reconciler.dal import GluePartitions, LakeFolders
from lambdas.reconciler.handler import summary
from lambdas.reconciler.logic import reconcile_tables
from lambdas.tables import LakeTable, tables_from_document

HOUR = Partition(1, date(2026, 11, 20), 7)


class DeniedFor:
    """A Glue client that answers AccessDenied for one table and passes everything else through."""

    def __init__(self, glue: Any, table: str) -> None:
        self._glue, self._table = glue, table

    def get_paginator(self, name: str) -> Any:
        paginator = self._glue.get_paginator(name)
        table = self._table

        class Denying:
            def paginate(self, **kwargs: Any) -> Any:
                if kwargs.get("TableName") == table:
                    raise ClientError(
                        {"Error": {"Code": "AccessDeniedException", "Message": "denied"}}, "GetPartitions"
                    )
                return paginator.paginate(**kwargs)

        return Denying()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._glue, name)


@mock_aws
def test_one_failing_table_is_reported_and_the_others_are_reconciled() -> None:
    s3 = boto3.client("s3", region_name="eu-west-1")
    glue = boto3.client("glue", region_name="eu-west-1")
    s3.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    glue.create_database(DatabaseInput={"Name": "acme"})
    targets = []
    for name in ("denied", "good"):
        prefix = TablePrefix("staging", "acme", "payments", name).data_prefix()
        s3.put_object(Bucket="lake", Key=f"{prefix}{HOUR.path()}{name}+0+0-9.parquet", Body=b"x")
        output = TablePrefix("staging", "acme", "payments", name).compaction_output_prefix(HOUR.previous(), "0a")
        s3.put_object(Bucket="lake", Key=f"{output}part-00000.parquet", Body=b"x")  # compaction output: no partition
        columns = [{"Name": "id", "Type": "string"}]
        glue.create_table(DatabaseName="acme", TableInput=table_input(name, s3_uri("lake", prefix), columns, {}))
        targets.append(
            LakeTable(
                env="staging",
                company="acme",
                domain="payments",
                topic=name,
                database="acme",
                table=name,
                inference=TableInference.CRAWLER,
                crawler_name=f"kafkalake-acme-{name}",
            )
        )
    results = reconcile_tables(LakeFolders(s3, "lake"), GluePartitions(DeniedFor(glue, "denied")), targets)
    done = summary(results)
    assert done["failed"] == {
        "acme.denied": "ClientError: An error occurred (AccessDeniedException) when calling "
        "the GetPartitions operation: denied"
    }
    assert done["repaired"] == {"acme.good": ["1/2026-11-20/07"]} and done["partitions_repaired"] == 1
    assert glue.get_partitions(DatabaseName="acme", TableName="good")["Partitions"][0]["Values"] == HOUR.values()


def test_targets_come_from_the_bundled_tables_document() -> None:
    document = [
        {
            "env": "staging",
            "company": "acme",
            "domain": "payments",
            "topic": "card-authorized",
            "database": "acme_staging",
            "table": "card_authorized",
            "inference": "native",
            "crawler_name": "c",
        }
    ]
    assert [(t.database, t.table, t.prefix.data_prefix()) for t in tables_from_document(document)] == [
        ("acme_staging", "card_authorized", "data/staging/acme/payments/card-authorized/")
    ]


@mock_aws
def test_an_iceberg_table_is_skipped_and_never_given_glue_partitions() -> None:
    """Its archiver objects lie in the Hive layout under its location, but its snapshots say which are live: adding
    them as Glue partitions would show a Hive reader files the table replaced or never committed."""
    s3 = boto3.client("s3", region_name="eu-west-1")
    glue = boto3.client("glue", region_name="eu-west-1")
    s3.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    glue.create_database(DatabaseInput={"Name": "acme"})
    prefix = TablePrefix("staging", "acme", "payments", "ledger").data_prefix()
    s3.put_object(Bucket="lake", Key=f"{prefix}{HOUR.path()}ledger+0+0-9.parquet", Body=b"x")
    columns = [{"Name": "id", "Type": "string"}]
    glue.create_table(DatabaseName="acme", TableInput=table_input("ledger", s3_uri("lake", prefix), columns, {}))
    table = LakeTable(
        env="staging",
        company="acme",
        domain="payments",
        topic="ledger",
        database="acme",
        table="ledger",
        inference=TableInference.NATIVE,
        crawler_name="kafkalake-acme-ledger",
        table_format=TableFormat.ICEBERG,
    )
    [result] = reconcile_tables(LakeFolders(s3, "lake"), GluePartitions(glue), [table])
    assert result.skipped is not None and result.skipped.startswith("an Iceberg table") and not result.added
    assert glue.get_partitions(DatabaseName="acme", TableName="ledger")["Partitions"] == []
