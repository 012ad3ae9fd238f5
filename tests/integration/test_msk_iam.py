"""The archiver on Amazon MSK with IAM access control, on the local broker's IAM listener (``KAFKA_IAM_PORT``: it
takes only tokens signed as MSK's signers sign them and checks them against the local credentials). The archiver's
job-run specification runs as EMR runs it (spark-submit, the archiver role's credentials, so the broker's principal
is ``User:archiver``): a heavy plan through Spark's Kafka source (aws-msk-iam-auth) and a light pass through the
task reader (librdkafka with the signer's tokens) archive exactly; a topic the role may not read fails alone, saying
which action to grant; the broker's authorizer log holds the requests the permission check maps to IAM actions. In
this process, a wrong secret key fails at once with what to check. On the twin listener whose tokens count as expired
15 s after signing (``KAFKA_IAM_BRIEF_PORT``), the job told 10 s (``KAFKALAKE_KAFKA_TOKEN_SECONDS``) reads a topic
for longer than two token lifetimes (the role's reads throttled by a Kafka quota) and archives it exactly."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined] # public there, re-exported without __all__
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from pyspark.sql import SparkSession

from infra.repo import catalog_dir, environments_file
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.environments import load_environments
from kafkalake.job_runs import archiver_run
from kafkalake.kafka_access import MSK_IAM, kafka_access
from kafkalake.registry import RegistryClient
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev.local.endpoints import (
    IAM_BRIEF_TOKEN_SECONDS,
    IAM_BRIEF_TOLD_SECONDS,
    KAFKA_IAM_BRIEF_PORT,
    KAFKA_IAM_PORT,
)
from kafkalake_dev.local.runner import LocalAssets, run_job
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.stack import SERVICES, authorizer_log, kafka_libs, local_tls
from kafkalake_dev.local.workload import produce_topic
from spark_jobs.archiver.offsets import OffsetClients, Offsets
from tests.integration.archive_helpers import (
    START,
    audit_problems,
    committed_and_end,
    good_records,
    kafka_acls,
    read_back,
)

pytestmark = [pytest.mark.stack, pytest.mark.spark]
BUCKET = "kafkalake-msk-iam-tests"
HEAVY, LIGHT = 60_000, 300
"""Records of the heavy topic (a plan alone: ``LIGHT_PLAN_RECORDS`` is 50,000) and of each light one."""
ARCHIVER = "User:archiver"
READ_BYTES_A_SECOND = 150_000
"""The role's read quota in the token-lifetime test: the heavy topic then takes several token lifetimes to read."""


def through_msk_iam(endpoints: Endpoints) -> Endpoints:
    """``endpoints`` reaching the broker's IAM listener with ``kafka_auth: msk_iam``; the secret holds the brokers' CA
    only (the stack's own), as the secret of an MSK IAM environment may."""
    secrets = make_client(endpoints, "secretsmanager")
    value = json.dumps({"ca_pem": local_tls().ca_pem()})
    arn = secrets.create_secret(Name=f"kafkalake/test/iam-{uuid.uuid4().hex[:8]}", SecretString=value)["ARN"]
    return dataclasses.replace(
        endpoints, kafka_bootstrap=f"127.0.0.1:{KAFKA_IAM_PORT}", kafka_secret_arn=arn, kafka_auth=MSK_IAM
    )


def copy_of_card_authorized(root: Path, env: str, names: list[str]) -> list[Topic]:
    """An environment ``env`` of its own under ``root`` with a copy of card-authorized per name, each under its own
    Kafka topic ``test.card-authorized.<hex>`` (the permission check maps it to the deployed card-authorized)."""
    source = load_topic_catalog(catalog_dir()).get("card-authorized", "staging").source
    folder = root / "acme" / "payments" / env
    folder.mkdir(parents=True)
    for name in names:
        text = source.read_text()
        (folder / f"{name}.yaml").write_text(f"kafka_topic: test.card-authorized.{uuid.uuid4().hex[:10]}\n{text}")
        for schema in sorted(source.parent.glob(f"{source.stem}.v*.avsc")):
            (folder / schema.name.replace(source.stem, name)).write_text(schema.read_text())
    catalog = load_topic_catalog(root)
    return [catalog.get(name, env) for name in names]


def denied_read_acl(kafka_topic: str) -> AclBinding:
    """Read of ``kafka_topic`` denied to the archiver's role (a Kafka ACL standing for a policy without ReadData)."""
    return AclBinding(
        ResourceType.TOPIC,
        kafka_topic,
        ResourcePatternType.LITERAL,
        ARCHIVER,
        "*",
        AclOperation.READ,
        AclPermissionType.DENY,
    )


def assert_archived_exactly(
    spark: SparkSession, endpoints: Endpoints, topic: Topic, result: dict[str, Any], produced: Counter[str]
) -> None:
    """``topic`` archived by the run whose line for it is ``result``: no error, each good record once, its offsets
    committed to the end, its audit clean."""
    assert result["error"] is None, result
    assert read_back(spark, endpoints, topic).count() == good_records(produced)
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends
    assert audit_problems(endpoints, topic) == []


def test_the_archiver_job_reads_msk_iam_as_its_role_and_a_topic_it_may_not_read_fails_alone(
    local_stack: Endpoints, spark: SparkSession, tmp_path: Path
) -> None:
    endpoints = with_bucket(local_stack, BUCKET)
    env = f"t{uuid.uuid4().hex[:10]}"
    heavy, light, denied = copy_of_card_authorized(tmp_path / "catalog", env, ["heavy", "light", "denied"])
    registry = RegistryClient(endpoints.schema_registry_url)
    produced = {
        t.kafka_topic: produce_topic(t, endpoints.kafka_bootstrap, registry, n, start=START, hours=5).counts
        for t, n in ((heavy, HEAVY), (light, LIGHT), (denied, LIGHT))
    }
    decisions_before = authorizer_log().stat().st_size if authorizer_log().exists() else 0
    settings = load_environments(environments_file())["staging"].model_copy(update={"name": env, "bucket": BUCKET})
    assets = LocalAssets.build(tmp_path / "assets", tmp_path / "catalog")

    with kafka_acls(endpoints) as grant:
        grant([denied_read_acl(denied.kafka_topic)])
        outcome = run_job(archiver_run(settings, assets.artifacts), through_msk_iam(endpoints), say=lambda _: None)

    results = {r["kafka_topic"]: r for r in outcome.lines if "kafka_topic" in r}
    assert outcome.returncode == 1, outcome.stderr[-3000:]  # the denied topic failed: the run says so at the end
    for topic in (heavy, light):
        assert_archived_exactly(spark, endpoints, topic, results[topic.kafka_topic], produced[topic.kafka_topic])
    refused = results[denied.kafka_topic]
    assert "kafka-cluster:ReadData" in (refused["error"] or ""), refused
    assert all(offset < 0 for offset in committed_and_end(endpoints, denied)[0].values())  # nothing committed
    printed = outcome.stdout + outcome.stderr
    assert "catalog drift not measured: with MSK IAM" in printed, [
        line for line in printed.splitlines() if "drift" in line or "note:" in line or "failed:" in line
    ]
    with authorizer_log().open() as log:
        log.seek(decisions_before)
        mine = [line for line in log if f"Principal = {ARCHIVER} is" in line]
    requests = {line.split("for request = ")[1].split()[0] for line in mine}
    assert {"Metadata", "ListOffsets", "Fetch", "OffsetFetch", "OffsetCommit"} <= requests, requests


def test_a_wrong_secret_key_fails_at_once_saying_what_to_check(
    local_stack: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "principal-archiver")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    access = kafka_access(through_msk_iam(local_stack), make_client(local_stack, "secretsmanager"))
    clients = OffsetClients(access)
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError) as failed:
            Offsets(clients, "any.topic").partitions()
    finally:
        clients.close()
    assert time.monotonic() - started < 20, "an authentication failure is told at once, not after a stall"
    message = str(failed.value)
    assert "with MSK IAM tokens the job's role signs for eu-west-1" in message
    assert "kafka-cluster:Connect on msk_cluster_arn" in message and "not-the-secret" not in message


@contextmanager
def consumer_byte_rate(endpoints: Endpoints, user: str, rate: int) -> Iterator[None]:
    """A Kafka quota on ``user``'s reads (bytes a second, all its clients together) while the block runs."""
    java = shutil.which("java")
    assert java is not None
    command = [java, "-cp", f"{kafka_libs()}/*", "kafka.admin.ConfigCommand"]
    command += ["--bootstrap-server", endpoints.kafka_bootstrap, "--alter", "--entity-type", "users"]
    command += ["--entity-name", user]
    subprocess.run([*command, "--add-config", f"consumer_byte_rate={rate}"], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run([*command, "--delete-config", "consumer_byte_rate"], check=True, capture_output=True)


def accepted_tokens(log: Path, since: int, principal: str) -> list[str]:
    """The signing times (``X-Amz-Date``) of the short-lived tokens the broker accepted for ``principal`` in ``log``
    past byte ``since``."""
    pattern = re.compile(rf"MSK IAM token accepted as {principal}, signed (\S+), valid {IAM_BRIEF_TOKEN_SECONDS} s")
    with log.open(errors="replace") as lines:
        lines.seek(since)
        return [found.group(1) for line in lines if (found := pattern.search(line))]


def test_the_archiver_job_reads_on_past_its_tokens_lifetime_and_archives_exactly(
    local_stack: Endpoints, spark: SparkSession, tmp_path: Path
) -> None:
    endpoints = with_bucket(local_stack, BUCKET)
    env = f"t{uuid.uuid4().hex[:10]}"
    heavy, light = copy_of_card_authorized(tmp_path / "catalog", env, ["heavy", "light"])
    registry = RegistryClient(endpoints.schema_registry_url)
    produced = {
        t.kafka_topic: produce_topic(t, endpoints.kafka_bootstrap, registry, n, start=START, hours=5).counts
        for t, n in ((heavy, HEAVY), (light, LIGHT))
    }
    brief = dataclasses.replace(
        through_msk_iam(endpoints),
        kafka_bootstrap=f"127.0.0.1:{KAFKA_IAM_BRIEF_PORT}",
        kafka_token_seconds=IAM_BRIEF_TOLD_SECONDS,
    )
    broker_log = next(s for s in SERVICES if s.name == "kafka").log_file
    log_before = broker_log.stat().st_size
    settings = load_environments(environments_file())["staging"].model_copy(update={"name": env, "bucket": BUCKET})
    assets = LocalAssets.build(tmp_path / "assets", tmp_path / "catalog")

    with consumer_byte_rate(endpoints, ARCHIVER.removeprefix("User:"), READ_BYTES_A_SECOND):
        outcome = run_job(archiver_run(settings, assets.artifacts), brief, say=lambda _: None)

    results = {r["kafka_topic"]: r for r in outcome.lines if "kafka_topic" in r}
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    for topic in (heavy, light):
        assert_archived_exactly(spark, endpoints, topic, results[topic.kafka_topic], produced[topic.kafka_topic])
    assert results[heavy.kafka_topic]["seconds"] > 2 * IAM_BRIEF_TOKEN_SECONDS, results[heavy.kafka_topic]
    signed = sorted({datetime.strptime(t, "%Y%m%dT%H%M%SZ") for t in accepted_tokens(broker_log, log_before, ARCHIVER)})
    assert len(signed) >= 3, signed  # signed again and again as the tokens aged
    assert (signed[-1] - signed[0]).total_seconds() > 2 * IAM_BRIEF_TOKEN_SECONDS, signed
