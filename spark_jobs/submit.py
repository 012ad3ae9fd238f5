"""EMR Serverless job-run requests: pure builders shared by the CLI and (for the archiver) the CDK schedule."""

from __future__ import annotations

import uuid
from typing import Any

from kafkalake.environments import EnvironmentSettings
from kafkalake.stack import SPARK_VERSION

TERMINAL_STATES = ("SUCCESS", "FAILED", "CANCELLED")


def terminal(state: str) -> bool:
    return state in TERMINAL_STATES


CATALOG_DIR = "catalog"
"""Where ``--archives catalog.zip#catalog`` unpacks the topic catalog in the job's working directory."""


def spark_submit_parameters(settings: EnvironmentSettings, py_files: str, catalog_archive: str) -> str:
    """--py-files, the catalog archive, the KAFKALAKE_* endpoints for driver and executors, the connectors."""
    env = {
        "KAFKALAKE_BUCKET": settings.bucket,
        "KAFKALAKE_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "KAFKALAKE_SCHEMA_REGISTRY_URL": settings.schema_registry_url,
        "KAFKALAKE_REGION": settings.region,
        "KAFKALAKE_AWS_ENDPOINT_URL": "",
    }
    return " ".join(
        [
            f"--py-files {py_files}",
            f"--archives {catalog_archive}#{CATALOG_DIR}",
            *(f"--conf spark.emr-serverless.driverEnv.{k}={v}" for k, v in env.items()),
            *(f"--conf spark.executorEnv.{k}={v}" for k, v in env.items()),
            f"--conf spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.12:{SPARK_VERSION},"
            f"org.apache.spark:spark-avro_2.12:{SPARK_VERSION}",
        ]
    )


def compaction_job_request(
    settings: EnvironmentSettings,
    *,
    application_id: str,
    role_arn: str,
    entry_point: str,
    py_files: str,
    catalog_archive: str,
    table: str,
    target_file_mb: int,
) -> dict[str, Any]:
    return {
        "applicationId": application_id,
        "executionRoleArn": role_arn,
        "clientToken": str(uuid.uuid4()),
        "name": f"kafkalake-{settings.name}-compact-{table}",
        "jobDriver": {
            "sparkSubmit": {
                "entryPoint": entry_point,
                "entryPointArguments": [
                    "compact",
                    "--env",
                    settings.name,
                    "--catalog",
                    CATALOG_DIR,
                    "--table",
                    table,
                    "--target-file-mb",
                    str(target_file_mb),
                ],
                "sparkSubmitParameters": spark_submit_parameters(settings, py_files, catalog_archive),
            }
        },
    }
