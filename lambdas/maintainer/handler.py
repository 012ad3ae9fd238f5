"""The Lambda entry point: a Powertools decorator stack over ``logic.drain`` (run every 10 minutes)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from kafkalake.aws import make_client
from kafkalake.config import Endpoints
from lambdas.maintainer.logic import Clients, Report, Settings, State, drain, tables_from_document

SERVICE = "kafkalake-maintainer"
logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace="kafkalake", service=SERVICE)


@dataclass
class Runtime:
    settings: Settings
    clients: Clients
    state: State


_runtime: Runtime | None = None


def settings_from_env(environ: Mapping[str, str]) -> Settings:
    bucket = environ["KAFKALAKE_BUCKET"]
    tables_file = Path(environ.get("KAFKALAKE_TABLES_FILE", Path(__file__).with_name("tables.json")))
    document = json.loads(tables_file.read_text()) if tables_file.exists() else []
    return Settings(
        queue_url=environ["KAFKALAKE_QUEUE_URL"],
        bucket=bucket,
        event_bus=environ["KAFKALAKE_EVENT_BUS"],
        tables=tables_from_document(document, bucket),
        max_messages=int(environ.get("KAFKALAKE_MAX_MESSAGES", "10000")),
        safety_margin_ms=int(environ.get("KAFKALAKE_SAFETY_MARGIN_MS", "30000")),
        cache_ttl_seconds=float(environ.get("KAFKALAKE_CACHE_TTL_SECONDS", "600")),
        completeness_delay_seconds=float(environ.get("KAFKALAKE_COMPLETENESS_DELAY_SECONDS", "900")),
    )


def cold_start_if_reconfigured(environ: Mapping[str, str]) -> None:
    """AWS gives a changed configuration new execution environments; locally one process plays several
    configurations in turn, so a warm runtime built for another one is dropped."""
    global _runtime  # noqa: PLW0603 - the warm-invocation cache is the point
    if _runtime is not None and _runtime.settings != settings_from_env(environ):
        _runtime = None


def runtime() -> Runtime:
    """Built on the first invocation and kept while the execution environment stays warm (caches included)."""
    global _runtime  # noqa: PLW0603 - the warm-invocation cache is the point
    if _runtime is None:
        settings = settings_from_env(os.environ)
        endpoints = Endpoints.from_env()
        clients = Clients(*(make_client(endpoints, s) for s in ("sqs", "glue", "s3", "events")))
        _runtime = Runtime(settings, clients, State(settings.cache_ttl_seconds))
    return _runtime


def publish_metrics(report: Report) -> None:
    for name, value in sorted(report.counts.items()):
        if value:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    metrics.add_metric(name="errors", unit=MetricUnit.Count, value=len(report.errors))


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
    logger.info("drain finished", extra={"counts": dict(report.counts), "events": len(report.events)})
    return report.as_dict()
