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


def client(endpoints: Endpoints, service: str):  # type: ignore[no-untyped-def]
    return boto3.client(service, **endpoints.boto3_kwargs())
