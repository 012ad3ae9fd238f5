"""Throw-away environments on the shared local stack: tests and benchmarks get their own bucket, queue,
databases and S3 prefixes, so they never touch what the demo (or another run) made there; ``count_calls`` counts
a client's API calls for the tests and benchmarks that bound them; ``customer_file`` and ``put_table`` write a
``customer-updated``-shaped table without Kafka (the erasure tests and benchmark)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import shutil
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from infra.repo import catalog_dir, environments_file
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.environments import EnvironmentConfig, load_environments
from kafkalake.glue import COMPLETE_PARAMETER, glue_columns, partition_input, table_input
from kafkalake.layout import DataKey, Partition
from kafkalake.s3_location import s3_uri
from kafkalake.topic_catalog import Topic
from kafkalake_dev.local.endpoints import LOCAL_ENV
from kafkalake_dev.local.provision import ensure_lake_bucket, ensure_restricted_key


def isolated_env(folder: Path, template: str = LOCAL_ENV) -> tuple[EnvironmentConfig, Path, Path]:
    """Copy the ``template`` environment's catalog and settings under a fresh name into ``folder``;
    return the settings, the catalog folder and the environments file."""
    name = f"t{uuid.uuid4().hex[:10]}"
    source_root = catalog_dir()
    catalog = folder / "catalog"
    for source in source_root.glob(f"*/*/{template}"):
        shutil.copytree(source, catalog / source.relative_to(source_root).parent / name)
    env, environments = environment_file(
        folder,
        name,
        template,
        bucket=f"kafkalake-{name}",
        queue_name=f"kafkalake-{name}-q",
        dead_letter_queue_name=f"kafkalake-{name}-dlq",
        event_bus_name=f"kafkalake-{name}",
    )
    return env, catalog, environments


def environment_file(
    folder: Path, name: str, template: str = LOCAL_ENV, **update: str
) -> tuple[EnvironmentConfig, Path]:
    """An ``environments.yaml`` in ``folder`` holding the ``template`` environment's settings as ``name``, with
    ``update`` applied (what ``KAFKALAKE_ENVIRONMENTS`` points a command at); the settings and the file."""
    env = load_environments(environments_file())[template].model_copy(update={"name": name, **update})
    environments = folder / "environments.yaml"
    environments.write_text(yaml.safe_dump({name: env.model_dump(mode="json", exclude={"name"})}))
    return env, environments


def with_bucket(endpoints: Endpoints, bucket: str) -> Endpoints:
    """The endpoints with ``bucket`` as the lake bucket, made on the local AWS endpoint as the stack's lake bucket
    is (``ensure_lake_bucket``: versioned), and the local restricted key as the archiver's."""
    ensure_lake_bucket(make_client(endpoints, "s3"), bucket, endpoints.region)
    restricted_key_arn = ensure_restricted_key(make_client(endpoints, "kms"))
    return dataclasses.replace(endpoints, bucket=bucket, restricted_key_arn=restricted_key_arn)


def register_complete_partitions(
    glue: Any, topic: Topic, bucket: str, schema: pa.Schema, partitions: Sequence[Partition]
) -> None:
    """Create the topic's database and table with ``schema`` and raw ``partitions`` the maintainer has marked
    complete, as the compactor finds them after an hour has closed."""
    location = s3_uri(bucket, topic.prefix.data_prefix())
    with contextlib.suppress(glue.exceptions.AlreadyExistsException):  # topics of one domain share a database
        glue.create_database(DatabaseInput={"Name": topic.database})
    table = table_input(topic.table, location, glue_columns(schema), {})
    glue.create_table(DatabaseName=topic.database, TableInput=table)
    for partition in partitions:
        glue.create_partition(
            DatabaseName=topic.database,
            TableName=topic.table,
            PartitionInput=partition_input(table, location + partition.path(), partition, {COMPLETE_PARAMETER: "true"}),
        )


def count_calls(client: Any, counter: Counter[str]) -> Any:
    """Count every API call the client makes into ``counter`` as ``service.Operation``.

    One count per call: botocore's retries of a call are not counted again."""
    service = client.meta.service_model.service_name

    def _count(model: Any, **_: Any) -> None:
        counter[f"{service}.{model.name}"] += 1

    client.meta.events.register(f"before-call.{service}.*", _count)
    return client


def customer_file(
    customers: Sequence[str], kafka_partition: int, first: int, partition: Partition, *, keyed: bool = False
) -> bytes:
    """An archiver-shaped Parquet file of ``customer-updated`` rows, one per customer id, at consecutive offsets from
    ``first``; ``email`` hashed as the archiver hashes it; with ``keyed``, each row's Kafka key (``_key``) is its
    customer id, as a table that stores the key holds it."""
    rows = len(customers)
    at = datetime.combine(partition.dt, datetime.min.time(), UTC) + timedelta(hours=partition.hour)
    key_column = {"_key": pa.array([c.encode() for c in customers], pa.binary())} if keyed else {}
    table = pa.table(
        {
            **key_column,
            "id": [f"u-{kafka_partition}-{first + i}" for i in range(rows)],
            "customer_id": list(customers),
            "email": [hashlib.sha256(c.encode()).hexdigest() for c in customers],
            "updated_at": [at.isoformat()] * rows,
            "_kafka_partition": pa.array([kafka_partition] * rows, pa.int32()),
            "_kafka_offset": pa.array(range(first, first + rows), pa.int64()),
            "_kafka_timestamp": pa.array([int(at.timestamp() * 1000)] * rows, pa.int64()),
        }
    )
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy")
    return out.getvalue()


def put_table(endpoints: Endpoints, topic: Topic, files: Mapping[Partition, Sequence[tuple[DataKey, bytes]]]) -> None:
    """The files under ``topic``'s prefix (their keys' partitions and offsets, the topic's prefix), its Glue table and
    complete partitions."""
    s3 = make_client(endpoints, "s3")
    for partition_files in files.values():
        for key, body in partition_files:
            s3.put_object(Bucket=endpoints.bucket, Key=dataclasses.replace(key, table=topic.prefix).key(), Body=body)
    schema = pq.read_schema(io.BytesIO(next(iter(files.values()))[0][1]))
    register_complete_partitions(make_client(endpoints, "glue"), topic, endpoints.bucket, schema, list(files))
