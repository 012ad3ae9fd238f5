"""Invoke the real handlers (decorators included) locally, against any endpoint.

AWS gives each function configuration execution environments of its own, each reading its environment once; one
local process plays several configurations in turn, so it builds each handler's runtime from the configuration it
means (``local_environment``) and keeps one warm runtime per configuration, caches included. The process's own
environment is never changed.

What the handlers print (Powertools' JSON log lines and the metrics' EMF documents: in AWS, the function's CloudWatch
Logs) goes to ``lambda_log()``, appended, never to the terminal between the lines a person reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.environments import EnvironmentConfig
from kafkalake.lambda_env import MaintainerEnvironment, ReconcilerEnvironment
from kafkalake.naming import TableInference
from kafkalake.topic_catalog import TopicCatalog, tables_document
from kafkalake_dev.local.s3_events import as_s3_sends
from kafkalake_dev.local.stack import state_dir
from lambdas.maintainer import handler
from lambdas.reconciler import handler as reconciler

SCHEDULED_EVENT = {"version": "0", "source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}


@dataclass
class LocalContext:
    function_name: str = "kafkalake-maintainer-local"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:kafkalake-maintainer-local"
    aws_request_id: str = ""
    timeout_ms: int = 300_000

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_ms


def tables_file(env: EnvironmentConfig, catalog: TopicCatalog, *, native: bool) -> str:
    """The catalog's tables document as the stack bundles it; ``native`` infers every table in the maintainer
    (the local AWS endpoint's crawlers never crawl)."""
    path = state_dir() / f"tables-{env.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = tables_document(catalog.for_env(env.name))
    if native:
        document = [{**item, "inference": TableInference.NATIVE.value} for item in document]
    path.write_text(json.dumps(document, indent=1))
    return str(path)


def local_environment(
    endpoints: Endpoints, env: EnvironmentConfig, catalog: TopicCatalog, *, native: bool
) -> MaintainerEnvironment:
    """The maintainer's configuration as the stack would set it, pointed at ``endpoints``."""
    queue_url = make_client(endpoints, "sqs").get_queue_url(QueueName=env.queue_name)["QueueUrl"]
    return MaintainerEnvironment.model_validate(
        {
            "KAFKALAKE_ENV": env.name,
            "KAFKALAKE_BUCKET": env.bucket,
            "KAFKALAKE_QUEUE_URL": queue_url,
            "KAFKALAKE_EVENT_BUS": env.event_bus_name,
            "AWS_REGION": endpoints.region,
            "KAFKALAKE_TABLES_FILE": tables_file(env, catalog, native=native),
            "KAFKALAKE_AWS_ENDPOINT_URL": endpoints.aws_endpoint_url,
            "KAFKALAKE_CACHE_TTL_SECONDS": env.cache_ttl_seconds,
            "KAFKALAKE_COMPLETENESS_DELAY_SECONDS": env.completeness_delay_seconds,
        }
    )


@cache
def warm_runtime(environment: MaintainerEnvironment) -> handler.Runtime:
    """The maintainer's runtime for one configuration, kept between its invocations as a warm execution
    environment keeps it; the S3 notifications it receives are completed to what S3 sends
    (``kafkalake_dev.local.s3_events``)."""
    clients = handler.clients_for(environment)
    return handler.Runtime.build(environment, dataclasses.replace(clients, sqs=as_s3_sends(clients.sqs)))


def lambda_log() -> Path:
    """Where the local invocations' structured logs and metrics go (the stack's ``logs/lambdas.log``)."""
    return state_dir() / "logs" / "lambdas.log"


@contextlib.contextmanager
def into_lambda_log() -> Iterator[Path]:
    """The handlers' output (their Powertools loggers' lines, and whatever they print: the EMF documents) appended
    to ``lambda_log()`` while the block runs."""
    path = lambda_log()
    path.parent.mkdir(parents=True, exist_ok=True)
    loggers: list[Any] = [handler.logger.registered_handler, reconciler.logger.registered_handler]
    with path.open("a") as out, contextlib.redirect_stdout(out):
        # the streams swapped, not through setStream, which flushes the one it replaces: the stdout a handler was
        # made with may be closed by now (a test runner's capture of an earlier test)
        before = [h.stream for h in loggers]
        for logged in loggers:
            logged.stream = out
        try:
            yield path
        finally:
            for logged, stream in zip(loggers, before, strict=True):
                logged.flush()
                logged.stream = stream


def _scheduled_invocation(entry: Callable[[dict[str, Any], Any], dict[str, Any]]) -> dict[str, Any]:
    with into_lambda_log():
        return entry(SCHEDULED_EVENT, LocalContext(aws_request_id=str(uuid.uuid4())))


def invoke_reconciler_locally(endpoints: Endpoints, env: EnvironmentConfig, catalog: TopicCatalog) -> dict[str, Any]:
    """Run the reconciler's handler once, as its daily schedule does."""
    environment = ReconcilerEnvironment.model_validate(
        {
            "KAFKALAKE_BUCKET": env.bucket,
            "AWS_REGION": endpoints.region,
            "KAFKALAKE_TABLES_FILE": tables_file(env, catalog, native=False),
            "KAFKALAKE_AWS_ENDPOINT_URL": endpoints.aws_endpoint_url,
        }
    )
    runtime = reconciler.Runtime.build(environment)
    return _scheduled_invocation(reconciler.entry_point(lambda: runtime))


def invoke_locally(
    endpoints: Endpoints, env: EnvironmentConfig, catalog: TopicCatalog, *, native: bool = False
) -> dict[str, Any]:
    """Run the maintainer's handler once, as its schedule does, with the function's configuration."""
    runtime = warm_runtime(local_environment(endpoints, env, catalog, native=native))
    return _scheduled_invocation(handler.entry_point(lambda: runtime))
