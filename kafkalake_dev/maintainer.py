"""Invoke the real handler (decorators included) locally, as `sam local invoke` would, against any endpoint."""

from __future__ import annotations

import json
import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from kafkalake.aws import make_client
from kafkalake.catalog import Catalog, tables_document
from kafkalake.environments import EnvironmentSettings
from kafkalake.metrics import NAMESPACE
from kafkalake.naming import TableInference
from kafkalake.settings import Endpoints, MaintainerEnvironment
from kafkalake_dev.stack import state_dir
from lambdas.maintainer import handler

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


def local_environment(
    endpoints: Endpoints, env: EnvironmentSettings, catalog: Catalog, *, native: bool
) -> MaintainerEnvironment:
    """The function's configuration as the stack would set it, pointed at ``endpoints``; ``native`` infers every
    table itself (the local AWS endpoint's crawlers never crawl)."""
    tables_file = state_dir() / f"tables-{env.name}.json"
    tables_file.parent.mkdir(parents=True, exist_ok=True)
    document = tables_document(catalog.for_env(env.name))
    if native:
        document = [{**item, "inference": TableInference.NATIVE.value} for item in document]
    tables_file.write_text(json.dumps(document, indent=1))
    queue_url = make_client(endpoints, "sqs").get_queue_url(QueueName=env.queue_name)["QueueUrl"]
    return MaintainerEnvironment.model_validate(
        {
            "KAFKALAKE_BUCKET": env.bucket,
            "KAFKALAKE_QUEUE_URL": queue_url,
            "KAFKALAKE_EVENT_BUS": env.event_bus_name,
            "AWS_REGION": endpoints.region,
            "KAFKALAKE_TABLES_FILE": str(tables_file),
            "KAFKALAKE_AWS_ENDPOINT_URL": endpoints.aws_endpoint_url,
            "KAFKALAKE_CACHE_TTL_SECONDS": env.cache_ttl_seconds,
            "KAFKALAKE_COMPLETENESS_DELAY_SECONDS": env.completeness_delay_seconds,
        }
    )


def invoke_locally(
    endpoints: Endpoints,
    env: EnvironmentSettings,
    catalog: Catalog,
    environ: MutableMapping[str, str],
    *,
    native: bool = False,
) -> dict[str, Any]:
    """Run the handler once with the function's configuration in ``environ``, then restore ``environ``."""
    environment = local_environment(endpoints, env, catalog, native=native)
    updates = {**environment.to_env(), "AWS_REGION": environment.region, "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE}
    previous = {name: environ.get(name) for name in updates}
    environ.update(updates)
    try:  # the function's configuration, for this invocation only
        handler.cold_start_if_reconfigured(environ)
        context = LocalContext(aws_request_id=str(uuid.uuid4()))
        result: dict[str, Any] = handler.handler(SCHEDULED_EVENT, context)
    finally:
        for name, value in previous.items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value
    return result
