"""An environment's job runs: the archiver, compactor and erasure runs of one ``environments.yaml`` entry, as the
``JobRun`` specifications of ``kafkalake.jobspec`` (which the CDK stack schedules and the dev tooling runs)."""

from __future__ import annotations

from collections.abc import Sequence

from kafkalake.environments import EnvironmentConfig
from kafkalake.jobspec import CATALOG_DIR, Job, JobArtifacts, JobRun


def archiver_run(settings: EnvironmentConfig, artifacts: JobArtifacts, topics: Sequence[str] = ()) -> JobRun:
    """Archive ``topics`` (catalog names) of the environment; every catalog topic of it when none are named."""
    arguments = [
        "--env",
        settings.name,
        "--catalog",
        CATALOG_DIR,
        "--budget-minutes",
        str(settings.archiver_budget_minutes),
        "--topic-naming",
        settings.topic_naming,
        *(a for t in topics for a in ("--topic", t)),
    ]
    name = f"kafkalake-{settings.name}-archiver"
    timeout = settings.archiver_timeout_minutes
    return JobRun(name, Job.ARCHIVE, tuple(arguments), settings.endpoints(), artifacts, timeout)


def erasure_run(settings: EnvironmentConfig, artifacts: JobArtifacts, grace_minutes: int | None = None) -> JobRun:
    """Carry out the environment's pending erasure requests (``spark_jobs.erasure``); replaced objects are deleted
    ``grace_minutes`` after their swap (the job's default when None)."""
    arguments = ["--env", settings.name, "--catalog", CATALOG_DIR]
    if grace_minutes is not None:
        arguments += ["--grace-minutes", str(grace_minutes)]
    name = f"kafkalake-{settings.name}-erasure"
    timeout = settings.compactor_timeout_minutes
    return JobRun(name, Job.ERASE, tuple(arguments), settings.endpoints(), artifacts, timeout)


def compactor_run(
    settings: EnvironmentConfig,
    artifacts: JobArtifacts,
    tables: list[str],
    target_file_mb: int | None = None,
    min_input_files: int | None = None,
) -> JobRun:
    """Compact the closed partitions of ``tables`` (catalog names)."""
    arguments = ["--env", settings.name, "--catalog", CATALOG_DIR, *(a for t in tables for a in ("--table", t))]
    if target_file_mb is not None:
        arguments += ["--target-file-mb", str(target_file_mb)]
    if min_input_files is not None:
        arguments += ["--min-input-files", str(min_input_files)]
    name = f"kafkalake-{settings.name}-compactor"
    timeout = settings.compactor_timeout_minutes
    return JobRun(name, Job.COMPACT, tuple(arguments), settings.endpoints(), artifacts, timeout)
