"""The Lambda entry point: the Powertools decorator stack over ``logic.drain`` (run on the schedule
``maintainer_schedule_minutes`` in environments.yaml sets).

The function's environment is read once, at the first invocation, into a ``Runtime`` (settings, clients,
caches) kept while the execution environment stays warm. ``entry_point`` puts the decorator stack over a runtime:
``handler`` is it over the one the function's environment gives; local tooling builds its own runtime from the
environment it means and invokes ``entry_point`` over that.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer, single_metric
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from kafkalake.aws import make_client
from kafkalake.lambda_env import MaintainerEnvironment
from kafkalake.metrics import GLUE_DATA_AGE, MAINTAINER_SERVICE, NAMESPACE, TABLE_DIMENSION, MaintainerCount
from lambdas.maintainer.dal import Clients, State
from lambdas.maintainer.logic import DrainConfig, drain
from lambdas.maintainer.report import Report
from lambdas.tables import read_tables

logger = Logger(service=MAINTAINER_SERVICE)
tracer = Tracer(service=MAINTAINER_SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=MAINTAINER_SERVICE)

Handler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]


@dataclass(frozen=True)
class Runtime:
    """What one execution environment keeps between invocations."""

    settings: DrainConfig
    clients: Clients
    state: State

    @classmethod
    def build(cls, environment: MaintainerEnvironment, clients: Clients) -> Runtime:
        """The drain's settings, with the tables of the bundled catalog, and empty caches."""
        settings = DrainConfig(
            queue_url=environment.queue_url,
            bucket=environment.bucket,
            event_bus=environment.event_bus,
            env=environment.env,
            tables=read_tables(environment.tables_file),
            max_messages=environment.max_messages,
            safety_margin_ms=environment.safety_margin_ms,
            cache_ttl_seconds=environment.cache_ttl_seconds,
            completeness_delay_seconds=environment.completeness_delay_seconds,
        )
        return cls(settings, clients, State(settings.cache_ttl_seconds))


def clients_for(environment: MaintainerEnvironment) -> Clients:
    services = ("sqs", "glue", "s3", "events", "lakeformation")
    return Clients(*(make_client(environment, service) for service in services))


@cache
def warm_runtime() -> Runtime:
    """Built from the function's environment at the first invocation, then kept (caches included)."""
    environment = MaintainerEnvironment.from_environ(os.environ)
    return Runtime.build(environment, clients_for(environment))


def publish_metrics(report: Report) -> None:
    for name, value in sorted(report.counts.items()):
        if value:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    metrics.add_metric(name=MaintainerCount.ERRORS, unit=MetricUnit.Count, value=len(report.errors))
    for table, age in sorted(report.data_age_seconds.items()):
        dimensions = {"service": MAINTAINER_SERVICE, TABLE_DIMENSION: table}
        with single_metric(GLUE_DATA_AGE, MetricUnit.Seconds, age, namespace=NAMESPACE, default_dimensions=dimensions):
            pass  # flushed as its own metric when the block ends
    if report.data_age_seconds:
        metrics.add_metric(name=GLUE_DATA_AGE, unit=MetricUnit.Seconds, value=max(report.data_age_seconds.values()))


def entry_point(runtime: Callable[[], Runtime]) -> Handler:
    """The decorator stack over one drain with the runtime ``runtime`` gives."""

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
        for reason in report.foreign_keys:  # a sample: every such key is counted, the first few are explained
            logger.info("ignored a key that is not this maintainer's", extra={"reason": reason})
        logger.info("drain finished", extra={"counts": dict(report.counts), "events": len(report.events)})
        return report.as_dict()

    return handler


handler = entry_point(warm_runtime)
"""The function's handler (``lambdas.maintainer.handler.handler``)."""
