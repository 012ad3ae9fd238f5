"""EMR Serverless job-run requests: pure builders shared by the CLI and (for the archiver) the CDK schedule."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kafkalake.environments import EnvironmentSettings
from kafkalake.stack import SPARK_VERSION

TERMINAL_STATES = ("SUCCESS", "FAILED", "CANCELLED")


def terminal(state: str) -> bool:
    return state in TERMINAL_STATES


CATALOG_DIR = "catalog"
"""Where ``--archives catalog.zip#catalog`` unpacks the topic catalog in the job's working directory."""
ENVIRONMENT_DIR = "environment"
"""Where ``--archives environment.tgz#environment`` unpacks the jobs' Python dependencies and launcher."""


@dataclass(frozen=True)
class JobArtifacts:
    """The s3:// URIs of what a job run needs (the CDK assets of the stack)."""

    entry_point: str
    """spark_jobs/entrypoint.py"""
    py_files: str
    """kafkalake_jobs.zip: the core package and the jobs"""
    catalog_archive: str
    """catalog.zip: the topic catalog"""
    environment_archive: str
    """environment.tgz: the jobs' Python dependencies and the launcher of EMR's Python 3.11"""


def spark_submit_parameters(settings: EnvironmentSettings, artifacts: JobArtifacts) -> str:
    """--py-files, the catalog and environment archives, the Python to run, the KAFKALAKE_* endpoints for
    driver and executors, the connectors."""
    python = f"./{ENVIRONMENT_DIR}/bin/python"
    env = {
        "KAFKALAKE_BUCKET": settings.bucket,
        "KAFKALAKE_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "KAFKALAKE_SCHEMA_REGISTRY_URL": settings.schema_registry_url,
        "KAFKALAKE_REGION": settings.region,
        "KAFKALAKE_AWS_ENDPOINT_URL": "",
        "KAFKALAKE_KAFKA_SECRET_ARN": settings.kafka_secret_arn or "",
    }
    driver_env = {**env, "PYSPARK_DRIVER_PYTHON": python, "PYSPARK_PYTHON": python}
    return " ".join(
        [
            f"--py-files {artifacts.py_files}",
            f"--archives {artifacts.catalog_archive}#{CATALOG_DIR},{artifacts.environment_archive}#{ENVIRONMENT_DIR}",
            *(f"--conf spark.emr-serverless.driverEnv.{k}={v}" for k, v in driver_env.items()),
            *(f"--conf spark.executorEnv.{k}={v}" for k, v in {**env, "PYSPARK_PYTHON": python}.items()),
            f"--conf spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.12:{SPARK_VERSION},"
            f"org.apache.spark:spark-avro_2.12:{SPARK_VERSION}",
        ]
    )


def compaction_job_request(
    settings: EnvironmentSettings,
    *,
    application_id: str,
    role_arn: str,
    artifacts: JobArtifacts,
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
                "entryPoint": artifacts.entry_point,
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
                "sparkSubmitParameters": spark_submit_parameters(settings, artifacts),
            }
        },
    }
