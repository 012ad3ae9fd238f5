"""Invoke the real handler (decorators included) locally, as `sam local invoke` would, against any endpoint."""

from __future__ import annotations

import json
import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from kafkalake.aws import make_client
from kafkalake.catalog import Catalog, tables_document
from kafkalake.config import Endpoints
from kafkalake.environments import EnvironmentSettings
from kafkalake.naming import TableInference
from kafkalake.stack import state_dir
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


def invoke_locally(
    endpoints: Endpoints,
    env: EnvironmentSettings,
    catalog: Catalog,
    environ: MutableMapping[str, str],
    *,
    native: bool = False,
) -> dict[str, Any]:
    """``native`` infers every table itself (the local AWS endpoint's crawlers never crawl)."""
    sqs = make_client(endpoints, "sqs")
    tables_file = state_dir() / f"tables-{env.name}.json"
    tables_file.parent.mkdir(parents=True, exist_ok=True)
    document = tables_document(catalog.for_env(env.name))
    if native:
        document = [{**item, "inference": TableInference.NATIVE.value} for item in document]
    tables_file.write_text(json.dumps(document, indent=1))
    updates = {
        "KAFKALAKE_BUCKET": env.bucket,
        "KAFKALAKE_QUEUE_URL": sqs.get_queue_url(QueueName=env.queue_name)["QueueUrl"],
        "KAFKALAKE_EVENT_BUS": env.event_bus_name,
        "KAFKALAKE_TABLES_FILE": str(tables_file),
        "KAFKALAKE_CACHE_TTL_SECONDS": str(env.cache_ttl_seconds),
        "KAFKALAKE_COMPLETENESS_DELAY_SECONDS": str(env.completeness_delay_seconds),
        "POWERTOOLS_METRICS_NAMESPACE": "kafkalake",
    }
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
