"""Endpoints and Lambda environments are validated once, name what is missing, and carry no defaults that point
anywhere; the job-run specification renders the same request for boto3 and for the Scheduler."""

from __future__ import annotations

import shlex

import pytest

from infra.repo import environments_file
from kafkalake.endpoints import ENV_VARS, Endpoints, EndpointsError
from kafkalake.environments import load_environments
from kafkalake.job_runs import archiver_run, compactor_run
from kafkalake.jobspec import JobArtifacts, pascal_case
from kafkalake.lambda_env import LambdaEnvironmentError, MaintainerEnvironment

STAGING = load_environments(environments_file())["staging"]
ARTIFACTS = JobArtifacts(
    "s3://a/entry.py", "s3://a/jobs.zip", "s3://a/catalog.zip", "s3://a/env.tgz", ("s3://a/k.jar", "s3://a/v.jar")
)


def test_missing_job_settings_are_named() -> None:
    with pytest.raises(EndpointsError) as missing:
        Endpoints.from_env({"KAFKALAKE_BUCKET": "lake", "KAFKALAKE_AWS_ENDPOINT_URL": "http://127.0.0.1:1"})
    for variable in ("KAFKALAKE_KAFKA_BOOTSTRAP", "KAFKALAKE_SCHEMA_REGISTRY_URL", "KAFKALAKE_REGION"):
        assert variable in str(missing.value)
    assert "KAFKALAKE_BUCKET" not in str(missing.value)


def test_job_settings_round_trip_and_aws_region_stands_in() -> None:
    endpoints = STAGING.endpoints()
    assert endpoints.aws_endpoint_url is None  # in AWS: the regional endpoints, never a local one
    assert Endpoints.from_env(endpoints.to_env()) == endpoints
    environ = {k: v for k, v in endpoints.to_env().items() if k != ENV_VARS["region"]}
    assert Endpoints.from_env({**environ, "AWS_REGION": "us-east-2"}).region == "us-east-2"


def test_maintainer_environment_names_what_is_missing_and_round_trips() -> None:
    with pytest.raises(
        LambdaEnvironmentError, match=r"KAFKALAKE_ENV: Field required.*KAFKALAKE_QUEUE_URL: Field required"
    ):
        MaintainerEnvironment.from_environ({"KAFKALAKE_BUCKET": "lake", "KAFKALAKE_EVENT_BUS": "bus"})
    with pytest.raises(LambdaEnvironmentError, match=r"KAFKALAKE_MAX_MESSAGES"):
        MaintainerEnvironment.from_environ(
            {
                "KAFKALAKE_ENV": "staging",
                "KAFKALAKE_BUCKET": "lake",
                "KAFKALAKE_QUEUE_URL": "q",
                "KAFKALAKE_EVENT_BUS": "bus",
                "AWS_REGION": "eu-west-1",
                "KAFKALAKE_MAX_MESSAGES": "0",
            }
        )
    environment = MaintainerEnvironment.from_environ(
        {
            "KAFKALAKE_ENV": "staging",
            "KAFKALAKE_BUCKET": "lake",
            "KAFKALAKE_QUEUE_URL": "q",
            "KAFKALAKE_EVENT_BUS": "bus",
            "AWS_REGION": "r",
        }
    )
    assert "KAFKALAKE_AWS_ENDPOINT_URL" not in environment.to_env()  # absent in AWS: the regional endpoints
    assert MaintainerEnvironment.from_environ({**environment.to_env(), "AWS_REGION": "r"}) == environment


def test_one_job_run_specification_for_boto3_and_the_scheduler() -> None:
    run = compactor_run(STAGING, ARTIFACTS, ["sensor-readings"], 256)
    request = run.start_job_run("app", "arn:role", "token-1")
    assert request["jobDriver"]["sparkSubmit"]["entryPointArguments"] == [
        "compact",
        "--env",
        "staging",
        "--catalog",
        "catalog",
        "--table",
        "sensor-readings",
        "--target-file-mb",
        "256",
    ]
    scheduled = run.scheduler_input("app", "arn:role")
    assert scheduled["ClientToken"] == "compact-<aws.scheduler.scheduled-time>"  # the same for every retry
    assert scheduled["JobDriver"]["SparkSubmit"] == pascal_case(request["jobDriver"]["sparkSubmit"])
    assert scheduled["JobDriver"]["SparkSubmit"]["EntryPointArguments"][0] == "compact"
    parameters = run.spark_submit_parameters()
    assert "extraJavaOptions" not in parameters  # the compactor's JVMs keep Java's defaults
    words = shlex.split(archiver_run(STAGING, ARTIFACTS).spark_submit_parameters())
    archiver = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "--conf")
    for side in ("driver", "executor"):  # C1 alone (JVM_OPTIONS), in every JVM of an archiver run
        assert archiver[f"spark.{side}.extraJavaOptions"] == "-XX:TieredStopAtLevel=1"
    for variable, value in STAGING.endpoints().to_env().items():
        assert f"spark.emr-serverless.driverEnv.{variable}={value}" in parameters
        assert f"spark.executorEnv.{variable}={value}" in parameters
    archive = archiver_run(STAGING, ARTIFACTS, ["a", "b"]).entry_point_arguments()
    budget = str(STAGING.archiver_budget_minutes)
    assert archive == [
        "archive",
        *("--env", "staging", "--catalog", "catalog", "--budget-minutes", budget),
        *("--topic-naming", STAGING.topic_naming, "--topic", "a", "--topic", "b"),
    ]
