"""`kafkalake compact submit` reaches a real account: the default credential chain, the environment's region, the
regional endpoint; never the local stack's endpoint or moto's test credentials. And `local_endpoints` changes
nothing."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import boto3.session
import pytest
import yaml
from botocore.stub import Stubber
from typer.testing import CliRunner

from infra.repo import environments_file
from kafkalake_dev.cli.app import app
from kafkalake_dev.local.endpoints import ACCESS_KEY, CREDENTIALS, local_credentials, local_endpoints
from tests.cli_args import compact_submit

REGION = "us-east-2"
"""Not the local stack's region: the client must take the environment's."""
CHAIN_KEY = ("AKIAKAFKALAKECHAIN01", "chain-secret-from-the-shared-credentials-file")
APPLICATION = "00fabcdefghij012"
RUN_ID = "00fabcdefghij999"
ROLE = "arn:aws:iam::123456789012:role/kafkalake-staging-compactor"
SUBMIT = [*compact_submit(APPLICATION, ROLE), "--wait"]


RUN_ARN = f"arn:aws:emr-serverless:{REGION}:123456789012:/applications/{APPLICATION}/jobruns/{RUN_ID}"


def job_run(state: str) -> dict[str, Any]:
    now = datetime(2026, 11, 22, tzinfo=UTC)
    return {
        "applicationId": APPLICATION,
        "jobRunId": RUN_ID,
        "arn": RUN_ARN,
        "createdBy": "arn:aws:iam::123456789012:user/operator",
        "createdAt": now,
        "updatedAt": now,
        "executionRole": ROLE,
        "state": state,
        "stateDetails": "done",
        "releaseLabel": "emr-7.7.0",
        "jobDriver": {"sparkSubmit": {"entryPoint": "s3://assets/entrypoint.py"}},
    }


@pytest.fixture
def clean_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS or kafkalake variables but a profile in a shared credentials file; an environments file whose
    staging environment lives in REGION; a fresh default boto3 session."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "KAFKALAKE_")):
            monkeypatch.delenv(name)
    credentials, config = tmp_path / "credentials", tmp_path / "config"
    credentials.write_text(f"[kafkalake-operator]\naws_access_key_id = {CHAIN_KEY[0]}\n")
    credentials.write_text(credentials.read_text() + f"aws_secret_access_key = {CHAIN_KEY[1]}\n")
    config.write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_PROFILE", "kafkalake-operator")
    environments = yaml.safe_load(environments_file().read_text())
    environments["staging"]["region"] = REGION
    (tmp_path / "environments.yaml").write_text(yaml.safe_dump(environments))
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(tmp_path / "environments.yaml"))
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)


def test_compact_submit_uses_the_credential_chain_and_the_environments_region(
    clean_chain: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[dict[str, Any]] = []
    build = boto3.session.Session.client

    def stubbed_client(session: boto3.session.Session, *args: Any, **kwargs: Any) -> Any:
        client = build(session, *args, **kwargs)
        stubber = Stubber(client)
        stubber.add_response("start_job_run", {"applicationId": APPLICATION, "jobRunId": RUN_ID, "arn": RUN_ARN})
        stubber.add_response("get_job_run", {"jobRun": job_run("SUCCESS")})
        stubber.activate()
        frozen = session.get_credentials().get_frozen_credentials()
        made.append({"args": args, "kwargs": kwargs, "client": client, "credentials": frozen, "stubber": stubber})
        made[-1]["environ"] = dict(os.environ)
        return client

    monkeypatch.setattr(boto3.session.Session, "client", stubbed_client)
    result = CliRunner().invoke(app, SUBMIT)

    assert result.exit_code == 0, result.output
    assert f"started job run {RUN_ID}" in result.output and "SUCCESS" in result.output
    [made_client] = made
    assert made_client["args"] == ("emr-serverless",)
    assert made_client["kwargs"].get("endpoint_url") is None
    assert not {"aws_access_key_id", "aws_secret_access_key"} & set(made_client["kwargs"])
    client = made_client["client"]
    assert client.meta.region_name == REGION
    assert client.meta.endpoint_url == f"https://emr-serverless.{REGION}.amazonaws.com"
    credentials = made_client["credentials"]
    assert (credentials.access_key, credentials.secret_key) == CHAIN_KEY
    assert ACCESS_KEY not in (credentials.access_key, credentials.secret_key)
    assert not set(CREDENTIALS) & set(made_client["environ"]), "moto's credentials reached the environment"
    made_client["stubber"].assert_no_pending_responses()


def test_local_endpoints_change_nothing_and_local_credentials_are_scoped(clean_chain: None) -> None:
    before = dict(os.environ)
    endpoints = local_endpoints("a-bucket")
    assert endpoints.bucket == "a-bucket" and endpoints.aws_endpoint_url
    assert dict(os.environ) == before
    with local_credentials():
        assert {name: os.environ[name] for name in CREDENTIALS} == CREDENTIALS
    assert dict(os.environ) == before


def test_an_invalid_environments_entry_is_told_field_by_field_without_a_traceback(
    clean_chain: None, tmp_path: Path
) -> None:
    environments = yaml.safe_load(environments_file().read_text())
    environments["staging"]["consumers"][0]["sensitivity"] = ["public", "secret"]
    environments["staging"]["archiver_budget_minutes"] = "soon"
    environments_file().write_text(yaml.safe_dump(environments))

    result = CliRunner().invoke(app, SUBMIT)

    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)  # a usage error, exit 2
    told = " ".join(result.output.replace("│", " ").split())  # as read, whatever the terminal's width wrapped
    assert "staging: consumers.0.sensitivity.1: Input should be" in told, result.output
    assert "staging: archiver_budget_minutes: Input should be a valid number" in told, result.output
