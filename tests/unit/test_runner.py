"""The local runner renders the same job-run specification EMR Serverless runs, offline and in a non-UTC zone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from infra.repo import environments_file
from kafkalake.environments import load_environments
from kafkalake.job_runs import archiver_run
from kafkalake.jobspec import JobArtifacts
from kafkalake_dev.local.endpoints import local_endpoints
from kafkalake_dev.local.runner import MACHINE_TIME_ZONE, parse_submit_parameters, submit_command

STAGING = load_environments(environments_file())["staging"]


def test_submit_command_is_the_specification_plus_the_platform(tmp_path: Path) -> None:
    artifacts = JobArtifacts("/a/entrypoint.py", "/a/jobs.zip", "/a/catalog.zip", "/a/env.tgz", ("/a/k.jar",))
    run = archiver_run(STAGING, artifacts)
    options, conf = parse_submit_parameters(run.spark_submit_parameters())
    assert options == ["--py-files", "/a/jobs.zip"]
    assert conf["spark.archives"] == "/a/catalog.zip#catalog,/a/env.tgz#environment"
    local = dataclasses.replace(run, endpoints=local_endpoints(STAGING.bucket))
    command, driver_env, archives = submit_command(local, tmp_path / "ivy")
    assert archives == conf["spark.archives"]
    rendered = " ".join(command)
    assert command[-len(run.entry_point_arguments()) :] == run.entry_point_arguments()
    assert "spark.jars.packages" not in rendered
    assert f"spark.jars.ivy={tmp_path / 'ivy'}" in rendered and "-Dhttps.proxyPort=9" in rendered
    assert f"-Duser.timezone={MACHINE_TIME_ZONE}" in rendered and MACHINE_TIME_ZONE != "UTC"
    assert "spark.sql.session.timeZone=UTC" in rendered  # from the specification, as in AWS
    jars = next(arg for arg in command if arg.startswith("spark.jars=")).removeprefix("spark.jars=").split(",")
    assert jars[0] == "/a/k.jar" and all(Path(j).exists() for j in jars[1:])  # the platform's S3A, from the cache
    assert driver_env["PYSPARK_PYTHON"] == "./environment/bin/python"
    assert driver_env["KAFKALAKE_BUCKET"] == STAGING.bucket
    assert driver_env["KAFKALAKE_AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
