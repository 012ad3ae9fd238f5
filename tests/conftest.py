import dataclasses
from collections.abc import Iterator

import boto3
import pytest

from kafkalake import stack
from kafkalake.config import Endpoints


@pytest.fixture(scope="session")
def local_stack() -> Iterator[Endpoints]:
    """The real local stack (Kafka, registry, moto server); started if needed, stopped if this session started it."""
    with stack.running():
        yield Endpoints()


@pytest.fixture(scope="session")
def spark(local_stack: Endpoints):  # type: ignore[no-untyped-def]
    from kafkalake.spark import local_session

    session = local_session(local_stack, "kafkalake-tests")
    yield session
    session.stop()


def with_bucket(endpoints: Endpoints, bucket: str) -> Endpoints:
    """The endpoints with ``bucket`` as the lake bucket, created on the local AWS endpoint if missing."""
    s3 = client(endpoints, "s3")
    if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": endpoints.region})
    return dataclasses.replace(endpoints, bucket=bucket)


def client(endpoints: Endpoints, service: str):  # type: ignore[no-untyped-def]
    return boto3.client(service, **endpoints.boto3_kwargs())
