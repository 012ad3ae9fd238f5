from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from kafkalake.endpoints import Endpoints
from kafkalake_dev.local import stack
from kafkalake_dev.local.endpoints import local_credentials, local_endpoints


@pytest.fixture(scope="session")
def local_stack() -> Iterator[Endpoints]:
    """The real local stack (Kafka, registry, moto server); started if needed, stopped if this session started it.
    moto's credentials are in the process environment for the session (boto3, Spark's JVM and workers)."""
    with stack.running(), local_credentials():
        yield local_endpoints()


@pytest.fixture(scope="session")
def spark(local_stack: Endpoints) -> Iterator[SparkSession]:
    """Local Spark with the connector jars and S3A on the local stack."""
    from kafkalake_dev.local.spark import local_session

    session = local_session(local_stack, "kafkalake-tests")
    yield session
    session.stop()
