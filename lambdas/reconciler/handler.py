"""The reconciler Lambda: a Powertools decorator stack over ``logic.reconcile_tables`` (run on the schedule
``reconcile_schedule`` in environments.yaml sets).

Publishes ``ReconcilePartitionsRepaired`` (non-zero means S3 events were lost; an alarm watches it),
``ReconcileEmptyLocations`` and ``ReconcileTablesFailed``, logs each repair and each empty location, and fails the
invocation at the end when any table failed (after every other table was reconciled).

As in the maintainer, the function's environment is read once into a ``Runtime``; ``entry_point`` puts the
decorator stack over a runtime, and local tooling invokes it over one built from the environment it means.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from kafkalake.aws import make_client
from kafkalake.lambda_env import ReconcilerEnvironment
from kafkalake.metrics import NAMESPACE, RECONCILER_SERVICE, ReconcileMetric
from lambdas.reconciler.dal import GluePartitions, LakeFolders
from lambdas.reconciler.logic import TableReconciliation, reconcile_tables
from lambdas.tables import LakeTable, read_tables

logger = Logger(service=RECONCILER_SERVICE)
tracer = Tracer(service=RECONCILER_SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=RECONCILER_SERVICE)


class TablesFailed(RuntimeError):
    """Some tables could not be reconciled; the others were."""


@dataclass(frozen=True)
class Runtime:
    tables: list[LakeTable]
    lake: LakeFolders
    glue: GluePartitions

    @classmethod
    def build(cls, environment: ReconcilerEnvironment) -> Runtime:
        """The bundled catalog's tables and the data access, for ``environment``."""
        lake = LakeFolders(make_client(environment, "s3"), environment.bucket)
        return cls(read_tables(environment.tables_file), lake, GluePartitions(make_client(environment, "glue")))


@cache
def warm_runtime() -> Runtime:
    """Built from the function's environment at the first invocation, then kept."""
    return Runtime.build(ReconcilerEnvironment.from_environ(os.environ))


def summary(results: list[TableReconciliation]) -> dict[str, Any]:
    return {
        "tables": len(results),
        "partitions_repaired": sum(len(r.added) for r in results),
        "empty_locations": sum(len(r.empty_locations) for r in results),
        "failed": {r.table: r.failed for r in results if r.failed},
        "repaired": {r.table: ["/".join(v) for v in r.added] for r in results if r.added},
        "empty": {r.table: ["/".join(v) for v in r.empty_locations] for r in results if r.empty_locations},
    }


def entry_point(runtime: Callable[[], Runtime]) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The decorator stack over one reconciliation with the runtime ``runtime`` gives."""

    @metrics.log_metrics
    @tracer.capture_lambda_handler
    @logger.inject_lambda_context(log_event=False)
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        current = runtime()
        return publish(summary(reconcile_tables(current.lake, current.glue, current.tables)))

    return handler


def publish(done: dict[str, Any]) -> dict[str, Any]:
    """Metrics and logs of a summary; ``TablesFailed`` when any table failed."""
    metrics.add_metric(
        name=ReconcileMetric.PARTITIONS_REPAIRED, unit=MetricUnit.Count, value=done["partitions_repaired"]
    )
    metrics.add_metric(name=ReconcileMetric.EMPTY_LOCATIONS, unit=MetricUnit.Count, value=done["empty_locations"])
    metrics.add_metric(name=ReconcileMetric.TABLES_FAILED, unit=MetricUnit.Count, value=len(done["failed"]))
    for table, partitions in done["repaired"].items():
        logger.warning(
            "partitions on S3 were missing in Glue (their events were lost): added",
            extra={"table": table, "partitions": partitions},
        )
    for table, partitions in done["empty"].items():
        logger.warning(
            "Glue partitions whose location holds no object", extra={"table": table, "partitions": partitions}
        )
    logger.info("reconciliation finished", extra=done)
    if done["failed"]:
        raise TablesFailed(f"{len(done['failed'])} of {done['tables']} tables failed: {done['failed']}")
    return done


handler = entry_point(warm_runtime)
"""The function's handler (``lambdas.reconciler.handler.handler``)."""
