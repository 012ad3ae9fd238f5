"""The IAM side of the permission check on the synthesized templates: the resolver, the evaluator, the denials
(each beside the same predicate flipping when the denial is lifted in a copy of the policies), findings 1 and 3,
and the necessity self-test on a committed sample of requests.

The denials are evaluated in the consumers' own account (environments.yaml's), where a resource policy or an
identity policy alone can grant: the case a denial has to hold in.

Past 400 lines: the resolver's, the evaluator's and the denials' tests read the same synthesized templates and the
copies of their policies each denial edits; the denials and the findings are checked against one evaluator here."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from infra.repo import REPO_ROOT, catalog_dir, environments_file
from kafkalake.environments import load_environments
from kafkalake.layout import erasure_receipt_key, erasure_request_key
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.checks.permissions.iam import StatementRef, decide, evaluate_iam
from kafkalake_dev.checks.permissions.necessity import check_necessity, unused_in, without
from kafkalake_dev.checks.permissions.requests import (
    DEPLOYED,
    PRINCIPALS,
    Deployment,
    IamRequest,
    key_arn,
    read_jsonl,
    secret_arn,
)
from kafkalake_dev.checks.permissions.summary import lake_writes, permissions_table
from kafkalake_dev.checks.permissions.templates import (
    CONSUMER_PREFIX,
    ROLES,
    Policies,
    Role,
    UnresolvedIntrinsic,
    deployment_of,
    resolve_policies,
)

ENVIRONMENTS = load_environments(environments_file())
CATALOG = load_topic_catalog(catalog_dir())
SAMPLE = Path(__file__).parent / "data" / "permission_requests.jsonl"
ENVS = ("staging", "production")
PIPELINE_WRITERS = ("archiver", "compactor", "erasure", "maintainer", "reconciler", "location")
EVERYTHING = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:*", "kms:*"], "Resource": "*"}]}
"""A consumer's own IAM policy at its worst: the stack must deny it anyway."""


@pytest.fixture(scope="module")
def templates(synthesized_templates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return synthesized_templates


def consumers_account(env: str) -> str:
    return ENVIRONMENTS[env].consumers[0].role_arn.split(":")[4]


def where(env: str) -> Deployment:
    return deployment_of(ENVIRONMENTS[env], consumers_account(env))


@pytest.fixture(scope="module")
def policies(templates: dict[str, dict[str, Any]]) -> dict[str, Policies]:
    return {env: resolve_policies(templates[env], ENVIRONMENTS[env], where(env)) for env in ENVS}


def lake(env: str, key: str = "") -> str:
    return f"arn:aws:s3:::{ENVIRONMENTS[env].bucket}" + (f"/{key}" if key else "")


def outcome(policies: Policies, request: IamRequest) -> str:
    return decide([request], policies)[0].outcome


def outcomes(policies: Policies, requests: list[IamRequest]) -> list[str]:
    decisions = {d.request.key(): d.outcome for d in decide(requests, policies)}
    return [decisions[r.key()] for r in requests]


def with_identity(policies: Policies, principal: str, document: dict[str, Any]) -> Policies:
    role = policies.roles[principal]
    return policies.with_role(Role(role.name, role.arn, {**role.identity, "Added": document}))


def allow(action: str, resource: str) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": action, "Resource": resource}]}


def topic_keys(env: str) -> Iterator[tuple[str, str]]:
    """Per catalog topic: a raw partition object and a compaction output object."""
    for topic in CATALOG.for_env(env):
        yield (
            f"{topic.prefix.data_prefix()}date=2026-11-01/0-0-9.parquet",
            f"{topic.prefix.compacted_prefix()}date=2026-11-01/c-1.parquet",
        )


def test_every_intrinsic_is_resolved_into_deployed_terms(policies: dict[str, Policies]) -> None:
    text = json.dumps(
        {env: [p.resource_policies, {n: r.identity for n, r in p.roles.items()}] for env, p in policies.items()}
    )
    assert "Fn::" not in text and '"Ref"' not in text and "${" not in text
    staging = policies["staging"]
    assert set(PRINCIPALS) | {"location"} <= set(staging.roles)
    assert {CONSUMER_PREFIX + c.name for c in ENVIRONMENTS["staging"].consumers} <= set(staging.roles)
    assert {key_arn(k, where("staging")) for k in ("lake", "restricted", "queue")} <= set(staging.resource_policies)
    archiver = json.dumps(staging.roles["archiver"].identity)
    assert secret_arn("kafka", where("staging")) in archiver and secret_arn("pseudonym", where("staging")) in archiver


def test_an_intrinsic_it_cannot_resolve_fails_loudly(templates: dict[str, dict[str, Any]]) -> None:
    template = copy.deepcopy(templates["staging"])
    policy = next(r for lid, r in template["Resources"].items() if lid.startswith("JobsArchiverJobRoleDefaultPolicy"))
    policy["Properties"]["PolicyDocument"]["Statement"][0]["Resource"] = {"Fn::If": ["X", "a", "b"]}
    with pytest.raises(UnresolvedIntrinsic, match="Fn::If"):
        resolve_policies(template, ENVIRONMENTS["staging"], DEPLOYED)


def tiny_template(archiver_extra: dict[str, Any], statement: dict[str, Any]) -> dict[str, Any]:
    """The least a template needs to resolve: the principals' roles, one policy on the archiver's."""
    roles = {f"{path}0123ABCD": {"Type": "AWS::IAM::Role", "Properties": {}} for path in ROLES}
    roles["JobsArchiverJobRole0123ABCD"]["Properties"] = archiver_extra
    policy = {
        "Type": "AWS::IAM::Policy",
        "Properties": {
            "PolicyName": "p",
            "Roles": [{"Ref": "JobsArchiverJobRole0123ABCD"}],
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [statement]},
        },
    }
    return {"Resources": {**roles, "ArchiverPolicy": policy, "LakeKey0123ABCD": {"Type": "AWS::KMS::Key"}}}


def test_sub_select_split_and_pseudo_parameters_resolve_into_deployed_terms() -> None:
    statement = {
        "Effect": "Allow",
        "Action": "kms:Decrypt",
        "Resource": [
            {"Fn::Sub": ["arn:${AWS::Partition}:kms:${AWS::Region}:${AWS::AccountId}:${What}", {"What": "alias/a"}]},
            {"Fn::Select": [1, {"Fn::Split": ["|", {"Fn::Sub": "a|${!Literal}|c"}]}]},
            {"Fn::GetAtt": "LakeKey0123ABCD.Arn"},
        ],
    }
    policies = resolve_policies(tiny_template({}, statement), ENVIRONMENTS["staging"], DEPLOYED)
    [document] = policies.roles["archiver"].identity.values()
    assert document["Statement"][0]["Resource"] == [
        f"arn:aws:kms:{DEPLOYED.region}:{DEPLOYED.account}:alias/a",
        "${Literal}",
        key_arn("lake"),
    ]
    assert policies.roles["archiver"].arn == f"arn:aws:iam::{DEPLOYED.account}:role/JobsArchiverJobRole0123ABCD"
    [root] = policies.resource_policies[key_arn("lake")]["Statement"]
    assert root["Principal"] == {"AWS": f"arn:aws:iam::{DEPLOYED.account}:root"}, (
        "a key without a policy: KMS's default"
    )


def test_a_managed_policy_on_a_principal_fails_loudly() -> None:
    """Its document is not in the template: reading it as "allows nothing" would hide what it grants."""
    extra = {"ManagedPolicyArns": ["arn:aws:iam::aws:policy/AdministratorAccess"]}
    with pytest.raises(UnresolvedIntrinsic, match="managed policies"):
        resolve_policies(tiny_template(extra, {}), ENVIRONMENTS["staging"], DEPLOYED)


def test_finding_1_the_archiver_may_store_erasure_requests_of_its_environment_only(
    policies: dict[str, Policies],
) -> None:
    staging = policies["staging"]
    request = IamRequest("archiver", "s3:PutObject", lake("staging", erasure_request_key("staging", "t-1")))
    assert evaluate_iam([request], staging) == []
    refused = [
        IamRequest("archiver", "s3:PutObject", lake("staging", erasure_request_key("production", "t-1"))),
        IamRequest("archiver", "s3:PutObject", lake("staging", erasure_receipt_key("staging", "t-1"))),
        IamRequest("archiver", "s3:GetObject", lake("staging", erasure_request_key("staging", "t-1"))),
    ]
    findings = evaluate_iam(refused, staging)
    assert [f.resource for f in findings] == [r.resource for r in refused]
    assert "no statement of the archiver's identity policy allows it" in findings[0].missing


def test_finding_1_on_the_template(templates: dict[str, dict[str, Any]]) -> None:
    Template.from_json(templates["staging"]).has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": Match.string_like_regexp("^JobsArchiverJobRole")}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        {
                            "Action": "s3:PutObject",
                            "Effect": "Allow",
                            "Resource": Match.array_with(
                                [
                                    {
                                        "Fn::Join": [
                                            "",
                                            [{"Fn::GetAtt": [Match.any_value(), "Arn"]}, "/erasure/staging/requests/*"],
                                        ]
                                    }
                                ]
                            ),
                        }
                    ]
                )
            },
        },
    )


@pytest.mark.parametrize("env", ENVS)
def test_finding_3_the_restricted_key_policy_names_its_two_users_and_trusts_no_iam_policy(
    templates: dict[str, dict[str, Any]], env: str
) -> None:
    keys = Template.from_json(templates[env]).find_resources("AWS::KMS::Key")
    restricted = next(k for lid, k in keys.items() if lid.startswith("PersonalDataRestrictedKey"))
    statements = restricted["Properties"]["KeyPolicy"]["Statement"]
    assert [s["Sid"] for s in statements] == [
        "DeploymentAdministersTheKey",
        "ArchiverWritesThroughS3",
        "ErasureReadsAndWritesThroughS3",
    ]
    admin, archiver, erasure = statements
    assert not any(
        a.startswith(("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:ReEncrypt", "kms:CreateGrant"))
        for a in admin["Action"]
    )
    assert "cdk-hnb659fds-cfn-exec-role" in admin["Principal"]["AWS"]["Fn::Sub"]
    assert archiver["Action"] == "kms:GenerateDataKey"
    assert archiver["Principal"]["AWS"]["Fn::GetAtt"][0].startswith("JobsArchiverJobRole")
    assert erasure["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert erasure["Principal"]["AWS"]["Fn::GetAtt"][0].startswith("JobsErasureJobRole")
    assert "root" not in json.dumps(statements)


def restricted_key_uses(env: str, principals: list[str]) -> list[IamRequest]:
    key = key_arn("restricted", where(env))
    return [IamRequest(p, a, key, via="s3") for p in principals for a in ("kms:Decrypt", "kms:GenerateDataKey")]


def root_trusting(policies: Policies, env: str) -> Policies:
    """The restricted key with the default key policy (the account's IAM policies decide): finding 3 unfixed."""
    root = {
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:aws:iam::{where(env).account}:root"},
        "Action": "kms:*",
        "Resource": "*",
    }
    key = key_arn("restricted", where(env))
    document = policies.resource_policies[key]
    return policies.with_resource_policy(key, {**document, "Statement": [*document["Statement"], root]})


@pytest.mark.parametrize("env", ENVS)
def test_only_the_archiver_and_the_erasure_job_can_use_the_restricted_key_whatever_iam_says(
    policies: dict[str, Policies], env: str
) -> None:
    everyone = [n for n in policies[env].roles if n not in ("archiver", "erasure")]
    broad = policies[env]
    for name in everyone:
        broad = with_identity(broad, name, EVERYTHING)
    assert set(outcomes(broad, restricted_key_uses(env, everyone))) == {"ImplicitlyDenied"}
    uses = restricted_key_uses(env, ["archiver", "erasure"])
    assert outcomes(broad, uses) == ["ImplicitlyDenied", "Allowed", "Allowed", "Allowed"]
    direct = IamRequest("erasure", "kms:Decrypt", key_arn("restricted", where(env)))
    assert outcome(broad, direct) == "ImplicitlyDenied", "only through S3"
    # lifted: with the default (root) key policy any IAM policy of the account decides
    assert set(outcomes(root_trusting(broad, env), restricted_key_uses(env, everyone))) == {"Allowed"}


def test_an_iam_decrypt_on_every_key_does_not_open_the_restricted_key(policies: dict[str, Policies]) -> None:
    staging = with_identity(policies["staging"], "compactor", allow("kms:Decrypt", "*"))
    request = IamRequest("compactor", "kms:Decrypt", key_arn("restricted", where("staging")), via="s3")
    [finding] = evaluate_iam([request], staging)
    assert finding.missing == "the restricted key's policy does not admit it"
    assert evaluate_iam([request], root_trusting(staging, "staging")) == []


def consumer_reads(env: str, consumer: str) -> list[IamRequest]:
    raw, compacted = next(topic_keys(env))
    return [
        IamRequest(consumer, "s3:GetObject", lake(env, raw)),
        IamRequest(consumer, "s3:GetObject", lake(env, compacted)),
        IamRequest(consumer, "s3:GetObjectVersion", lake(env, raw)),
        IamRequest(consumer, "s3:GetObject", lake(env, "restricted/quarantine/t/x.avro")),
        IamRequest(consumer, "s3:ListBucket", lake(env), {"s3:prefix": "data/"}),
    ]


@pytest.mark.parametrize("env", ENVS)
def test_consumers_cannot_read_the_lake_directly_even_with_every_s3_and_kms_permission(
    policies: dict[str, Policies], env: str
) -> None:
    for consumer in ENVIRONMENTS[env].consumers:
        name = CONSUMER_PREFIX + consumer.name
        broad = with_identity(policies[env], name, EVERYTHING)
        findings = evaluate_iam(consumer_reads(env, name), broad)
        assert len(findings) == len(consumer_reads(env, name))
        assert all("ConsumersReadThroughLakeFormationOnly" in f.missing for f in findings)
        restricted = IamRequest(name, "kms:Decrypt", key_arn("restricted", where(env)), via="s3")
        assert outcome(broad, restricted) == "ImplicitlyDenied"
        # lifted: without the bucket policy's deny, the consumer's own policy reads everything
        sid = statement_index(broad, lake(env), "ConsumersReadThroughLakeFormationOnly")
        lifted = without(broad, StatementRef(lake(env), sid, resource_policy=True))
        assert evaluate_iam(consumer_reads(env, name), lifted) == []


def statement_index(policies: Policies, resource: str, sid: str) -> int:
    statements = policies.resource_policies[resource]["Statement"]
    return next(i for i, s in enumerate(statements) if s.get("Sid") == sid)


@pytest.mark.parametrize("env", ENVS)
def test_the_archiver_cannot_delete(policies: dict[str, Policies], env: str) -> None:
    raw, _ = next(topic_keys(env))
    keys = [
        raw,
        "quarantine/t/x.avro",
        "state/leases/t.json",
        "restricted/quarantine/t/x.avro",
        erasure_request_key(env, "t-1"),
    ]
    deletes = [
        IamRequest("archiver", a, lake(env, k)) for k in keys for a in ("s3:DeleteObject", "s3:DeleteObjectVersion")
    ]
    assert set(outcomes(policies[env], deletes)) == {"ImplicitlyDenied"}
    lifted = with_identity(policies[env], "archiver", allow("s3:DeleteObject", lake(env, "data/*")))
    assert outcome(lifted, deletes[0]) == "Allowed"


@pytest.mark.parametrize("env", ENVS)
def test_the_compactor_writes_only_compaction_output_and_state(policies: dict[str, Policies], env: str) -> None:
    """And under an Iceberg table's location, where its rewrites and their metadata go (``docs/iceberg.md``)."""
    iceberg = {t.prefix.data_prefix() for t in CATALOG.for_env(env) if t.spec.table_format == TableFormat.ICEBERG}
    for raw, compacted in topic_keys(env):
        writes = [IamRequest("compactor", "s3:PutObject", lake(env, k)) for k in (raw, compacted, "state/m.json")]
        own = "Allowed" if any(raw.startswith(prefix) for prefix in iceberg) else "ImplicitlyDenied"
        assert outcomes(policies[env], writes) == [own, "Allowed", "Allowed"]
    assert env == "production" or iceberg, "staging's Iceberg topic is the one whose location the compactor writes"
    lifted = with_identity(policies[env], "compactor", allow("s3:PutObject", lake(env, "data/*")))
    assert outcome(lifted, IamRequest("compactor", "s3:PutObject", lake(env, raw))) == "Allowed"


@pytest.mark.parametrize(("env", "other"), [("staging", "production"), ("production", "staging")])
def test_no_role_writes_another_environment(policies: dict[str, Policies], env: str, other: str) -> None:
    """Both environments in one account (the worst case): neither bucket nor the other's erasure prefix."""
    same_account = policies[env]
    raw, compacted = next(topic_keys(other))
    targets = [
        raw,
        compacted,
        "state/x.json",
        "quarantine/t/x.avro",
        "restricted/quarantine/t/x.avro",
        erasure_request_key(other, "t-1"),
        erasure_receipt_key(other, "t-1"),
    ]
    writes = [
        IamRequest(p, a, resource)
        for p in PIPELINE_WRITERS
        for a in ("s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion")
        for resource in [*(lake(other, k) for k in targets), lake(env, erasure_request_key(other, "t-1"))]
    ]
    assert set(outcomes(same_account, writes)) == {"ImplicitlyDenied"}
    lifted = with_identity(same_account, "archiver", allow("s3:PutObject", "arn:aws:s3:::*/data/*"))
    assert outcome(lifted, IamRequest("archiver", "s3:PutObject", lake(other, raw))) == "Allowed"


def test_necessity_on_the_committed_sample(templates: dict[str, dict[str, Any]]) -> None:
    """Every statement that allowed a sample request is shown to be needed or shared, none insensitive; the sample
    is in the recording's terms (``DEPLOYED``)."""
    requests = [r for r in read_jsonl(SAMPLE) if isinstance(r, IamRequest)]
    staging = resolve_policies(templates["staging"], ENVIRONMENTS["staging"], DEPLOYED)
    assert evaluate_iam(requests, staging) == []
    necessity = check_necessity(requests, staging)
    assert necessity.insensitive == []
    needed = {ref.policy for ref in necessity.needed}
    assert {name for p in PRINCIPALS for name in staging.roles[p].identity} <= needed
    assert key_arn("restricted") in needed, "the restricted key's policy alone admits the archiver and erasure"
    for ref, request in necessity.needed.items():
        assert outcome(without(staging, ref), request) != "Allowed"
    assert necessity.unused, "the sample does not use every statement; they are reported, not failed"


GENERATED = re.compile(
    r"<!-- generated by python -m kafkalake_dev\.checks\.permissions\.summary.*?-->\n(.*?)\n<!-- end", re.S
)


@pytest.mark.parametrize(("doc", "render"), [("docs/deploying.md", permissions_table), ("README.md", lake_writes)])
def test_the_role_tables_of_the_docs_are_the_template(
    templates: dict[str, dict[str, Any]], doc: str, render: Callable[[Policies], str]
) -> None:
    """Regenerate with ``python -m kafkalake_dev.checks.permissions.summary`` after ``make synth``."""
    [written] = GENERATED.findall((REPO_ROOT / doc).read_text())
    staging = resolve_policies(templates["staging"], ENVIRONMENTS["staging"], DEPLOYED)
    assert written == render(staging)
    # a grant added to the template shows in the table: the test does not compare the table with itself
    assert render(with_identity(staging, "archiver", allow("s3:DeleteObject", lake("staging", "data/*")))) != written


def test_the_actions_and_resources_of_a_used_statement_that_no_request_named_are_reported() -> None:
    statement = {
        "Effect": "Allow",
        "Action": ["s3:GetObject", "s3:Put*", "glue:GetTable"],
        "Resource": ["arn:aws:s3:::lake/data/*", "arn:aws:s3:::lake/state/?/x", "arn:aws:s3:::lake/other/*"],
    }
    requests = [
        IamRequest("compactor", "s3:GetObject", "arn:aws:s3:::lake/data/a.parquet"),
        IamRequest("compactor", "S3:PutObject", "arn:aws:s3:::lake/state/1/x"),
    ]
    assert unused_in(statement, requests) == ["action glue:GetTable", "resource arn:aws:s3:::lake/other/*"]
    assert unused_in({**statement, "Action": "s3:*", "Resource": "*"}, requests) == []
