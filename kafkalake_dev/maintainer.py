"""Invoke the real handlers (decorators included) locally, as `sam local invoke` would, against any endpoint."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from kafkalake.aws import make_client
from kafkalake.catalog import Catalog, tables_document
from kafkalake.environments import EnvironmentSettings
from kafkalake.metrics import NAMESPACE
from kafkalake.naming import TableInference
from kafkalake.settings import Endpoints, LambdaEnvironment, MaintainerEnvironment, ReconcilerEnvironment
from kafkalake_dev.stack import state_dir
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


def tables_file(env: EnvironmentSettings, catalog: Catalog, *, native: bool) -> str:
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
    endpoints: Endpoints, env: EnvironmentSettings, catalog: Catalog, *, native: bool
) -> MaintainerEnvironment:
    """The maintainer's configuration as the stack would set it, pointed at ``endpoints``."""
    queue_url = make_client(endpoints, "sqs").get_queue_url(QueueName=env.queue_name)["QueueUrl"]
    return MaintainerEnvironment.model_validate(
        {
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


def _invoke(
    entry: Callable[[dict[str, Any], Any], dict[str, Any]],
    environment: LambdaEnvironment,
    environ: MutableMapping[str, str],
    before: Callable[[MutableMapping[str, str]], None] = lambda _: None,
) -> dict[str, Any]:
    """Run ``entry`` once on a scheduled event with ``environment`` in ``environ``, then restore ``environ``."""
    updates = {**environment.to_env(), "AWS_REGION": environment.region, "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE}
    previous = {name: environ.get(name) for name in updates}
    environ.update(updates)
    try:  # the function's configuration, for this invocation only
        before(environ)
        return entry(SCHEDULED_EVENT, LocalContext(aws_request_id=str(uuid.uuid4())))
    finally:
        for name, value in previous.items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value


def invoke_reconciler_locally(
    endpoints: Endpoints, env: EnvironmentSettings, catalog: Catalog, environ: MutableMapping[str, str]
) -> dict[str, Any]:
    """Run the reconciler's handler once, as its daily schedule does."""
    environment = ReconcilerEnvironment.model_validate(
        {
            "KAFKALAKE_BUCKET": env.bucket,
            "AWS_REGION": endpoints.region,
            "KAFKALAKE_TABLES_FILE": tables_file(env, catalog, native=False),
            "KAFKALAKE_AWS_ENDPOINT_URL": endpoints.aws_endpoint_url,
        }
    )
    return _invoke(reconciler.handler, environment, environ)


def invoke_locally(
    endpoints: Endpoints,
    env: EnvironmentSettings,
    catalog: Catalog,
    environ: MutableMapping[str, str],
    *,
    native: bool = False,
) -> dict[str, Any]:
    """Run the maintainer's handler once with the function's configuration in ``environ``."""
    environment = local_environment(endpoints, env, catalog, native=native)
    return _invoke(handler.handler, environment, environ, handler.cold_start_if_reconfigured)
