"""``python -m kafkalake_dev.checks.permissions`` on a sample of calls the stack tests recorded
(``data/recorded_calls.jsonl``: every principal, every kind of call) against the synthesized staging template: it
passes on today's template, names the role, the action and the key when the archiver's grant of its erasure requests
is removed (finding 1 of #34) and the Kafka action when its ReadData grant is (``KAFKA_DECISIONS``, MSK IAM), and fails
on nothing recorded, a principal that made no call, or a call it cannot map."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from infra.repo import catalog_dir, environments_file
from kafkalake.environments import load_environments
from kafkalake.permissions import access_model
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake_dev.checks.permissions.__main__ import main
from kafkalake_dev.checks.permissions.lake_formation import evaluate_lake_formation
from kafkalake_dev.checks.permissions.mapping import LocalNames, iam_and_lake_formation
from kafkalake_dev.checks.permissions.requests import GlueCall

SAMPLE = Path(__file__).parent / "data" / "recorded_calls.jsonl"
KAFKA_DECISIONS = Path(__file__).parent / "data" / "kafka_decisions.log"
"""The broker's authorizer decisions of the archiver's job on the IAM listener (tests/integration/test_msk_iam.py),
one line per kind of request: the Kafka calls the staging template's MSK grants are checked against. Given
explicitly, so that the check never reads the local stack's log of whatever ran last."""
ERASURE_REQUESTS = "erasure/staging/requests/*"


@pytest.fixture(scope="module")
def staging(synthesized_templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return synthesized_templates["staging"]


def check(template: dict[str, Any], calls: list[str], folder: Path) -> int:
    (folder / "cdk.out").mkdir(exist_ok=True)
    (folder / "cdk.out" / "kafkalake-staging.template.json").write_text(json.dumps(template))
    (folder / "calls.jsonl").write_text("".join(calls))
    cdk_out, kafka_log = str(folder / "cdk.out"), str(KAFKA_DECISIONS)
    return main([str(folder / "calls.jsonl"), "--cdk-out", cdk_out, "--kafka-log", kafka_log])


def sample() -> list[str]:
    return SAMPLE.read_text().splitlines(keepends=True)


def test_the_recorded_calls_are_allowed_by_the_template(
    staging: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check(staging, sample(), tmp_path) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "permission check: passed" in out
    needed = re.search(r"self-test: (\d+) statements each needed", out)
    assert needed and int(needed.group(1)) > 10  # removing any of them denies a recorded call


def without_erasure_requests(template: dict[str, Any]) -> dict[str, Any]:
    """The template as main had it before #34: the archiver may not write erasure requests."""
    changed = copy.deepcopy(template)
    removed = 0
    for resource in changed["Resources"].values():
        roles = json.dumps(resource.get("Properties", {}).get("Roles", []))
        if resource["Type"] != "AWS::IAM::Policy" or "ArchiverJobRole" not in roles:
            continue  # the erasure job's role may delete the requests' old versions: not what this test takes away
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            kept = [r for r in resources if ERASURE_REQUESTS not in json.dumps(r)]
            removed += len(resources) - len(kept)
            statement["Resource"] = kept or ["arn:aws:s3:::nothing/nothing"]
    assert removed == 1
    return changed


def test_without_the_archivers_erasure_grant_it_names_the_role_the_action_and_the_key(
    staging: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check(without_erasure_requests(staging), sample(), tmp_path) == 1
    denied = capsys.readouterr().err
    assert "archiver: s3:PutObject on arn:aws:s3:::kafkalake-staging-lake/erasure/staging/requests/" in denied
    assert "no statement of the archiver's identity policy allows it" in denied


def test_nothing_recorded_is_a_failure(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no recorded calls"):
        main([str(tmp_path / "absent.jsonl")])


def test_a_principal_without_calls_and_an_unmapped_call_fail(
    staging: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = [line for line in sample() if json.loads(line)["principal"] != "reconciler"]
    odd = {
        "principal": "archiver",
        "service": "dynamodb",
        "method": "POST",
        "path": "/",
        "query": "",
        "headers": {"x-amz-target": "DynamoDB_20120810.GetItem"},
        "body": "{}",
        "status": 200,
        "response": {},
    }
    assert check(staging, [*calls, json.dumps(odd) + "\n"], tmp_path) == 1
    err = capsys.readouterr().err
    assert "reconciler: no call recorded" in err
    assert "dynamodb POST" in err


PIPELINE_GRANTS = ("AccessMaintainer", "AccessReconciler", "AccessCompactor", "AccessErasure")


def test_removing_any_pipeline_lake_formation_grant_denies_a_recorded_call(staging: dict[str, Any]) -> None:
    """Each Lake Formation grant of a pipeline role is needed by a call the stack tests made (the crawlers' calls
    run inside Glue and are not recorded; the consumers' grants are the denial tests' subject)."""
    environment = load_environments(environments_file())["staging"]
    tables = access_model(environment, load_topic_catalog(catalog_dir()).for_env("staging")).tables
    names = LocalNames(queue_name=environment.queue_name, table_databases={t.table: t.database for t in tables})
    records = [json.loads(line) for line in sample()]
    calls = [c for c in iam_and_lake_formation(records, names) if isinstance(c, GlueCall)]
    assert evaluate_lake_formation(calls, staging, tables) == []
    grants = [g for g in staging["Resources"] if g.startswith(PIPELINE_GRANTS)]
    assert len(grants) >= 4 * 3
    unneeded = []
    for grant in grants:
        without = copy.deepcopy(staging)
        del without["Resources"][grant]
        if not evaluate_lake_formation(calls, without, tables):
            unneeded.append(grant)
    assert unneeded == []


def test_without_the_archivers_read_data_grant_its_kafka_reads_are_denied(
    staging: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changed = copy.deepcopy(staging)
    removed = 0
    for resource in changed["Resources"].values():
        if resource["Type"] == "AWS::IAM::Policy":
            for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                kept = [a for a in actions if a != "kafka-cluster:ReadData"]
                removed += len(actions) - len(kept)
                statement["Action"] = kept or ["kafka-cluster:Connect"]
    assert removed == 1
    assert check(changed, sample(), tmp_path) == 1
    denied = capsys.readouterr().err
    assert "archiver: kafka-cluster:ReadData on arn:aws:kafka:eu-west-1:" in denied  # from Fetch or OffsetCommit
    assert "READ Topic:test.card-authorized." in denied
