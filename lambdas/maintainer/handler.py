"""The Lambda entry point: a Powertools decorator stack over ``logic.drain`` (run every 10 minutes)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from kafkalake.aws import make_client
from kafkalake.metrics import MAINTAINER_SERVICE, NAMESPACE, Count
from kafkalake.settings import MaintainerEnvironment
from lambdas.maintainer.dal import Clients, State
from lambdas.maintainer.logic import Report, Settings, drain, tables_from_document
from lambdas.tables import read_tables

logger = Logger(service=MAINTAINER_SERVICE)
tracer = Tracer(service=MAINTAINER_SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=MAINTAINER_SERVICE)


@dataclass
class Runtime:
    environment: MaintainerEnvironment
    settings: Settings
    clients: Clients
    state: State


_runtime: Runtime | None = None


def settings_from(environment: MaintainerEnvironment) -> Settings:
    """The drain's settings, with the tables of the bundled catalog."""
    return Settings(
        queue_url=environment.queue_url,
        bucket=environment.bucket,
        event_bus=environment.event_bus,
        tables=tables_from_document(read_tables(environment.tables_file), environment.bucket),
        max_messages=environment.max_messages,
        safety_margin_ms=environment.safety_margin_ms,
        cache_ttl_seconds=environment.cache_ttl_seconds,
        completeness_delay_seconds=environment.completeness_delay_seconds,
    )


def cold_start_if_reconfigured(environ: Mapping[str, str]) -> None:
    """AWS gives a changed configuration new execution environments; locally one process plays several
    configurations in turn, so a warm runtime built for another one is dropped."""
    global _runtime  # noqa: PLW0603 - the warm-invocation cache is the point
    if _runtime is not None and _runtime.environment != MaintainerEnvironment.from_environ(environ):
        _runtime = None


def runtime() -> Runtime:
    """Built on the first invocation and kept while the execution environment stays warm (caches included)."""
    global _runtime  # noqa: PLW0603 - the warm-invocation cache is the point
    if _runtime is None:
        environment = MaintainerEnvironment.from_environ(os.environ)
        settings = settings_from(environment)
        clients = Clients(*(make_client(environment, s) for s in ("sqs", "glue", "s3", "events")))
        _runtime = Runtime(environment, settings, clients, State(settings.cache_ttl_seconds))
    return _runtime


def publish_metrics(report: Report) -> None:
    for name, value in sorted(report.counts.items()):
        if value:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    metrics.add_metric(name=Count.ERRORS, unit=MetricUnit.Count, value=len(report.errors))


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    current = runtime()
    logger.append_keys(queue=current.settings.queue_url)
    report = drain(current.settings, current.clients, current.state, context.get_remaining_time_in_millis)
    publish_metrics(report)
    for error in report.errors:
        logger.warning(error)
    for reason in report.foreign_keys:  # a sample: every foreign key is counted, the first few are explained
        logger.info("ignored a key outside the data layout", extra={"reason": reason})
    logger.info("drain finished", extra={"counts": dict(report.counts), "events": len(report.events)})
    return report.as_dict()
