"""Command lines the tests hand to the ``kafkalake`` CLI."""

from __future__ import annotations


def compact_submit(application_id: str, role_arn: str) -> list[str]:
    """``compact submit`` of one table of staging with one connector jar (add more options after it)."""
    return [
        "compact",
        "submit",
        "--env",
        "staging",
        "--table",
        "sensor-readings",
        "--application-id",
        application_id,
        "--role-arn",
        role_arn,
        "--entry-point",
        "s3://assets/entrypoint.py",
        "--py-files",
        "s3://assets/jobs.zip",
        "--catalog-archive",
        "s3://assets/catalog.zip",
        "--environment-archive",
        "s3://assets/environment.tgz",
        "--jar",
        "s3://assets/kafka.jar",
    ]
