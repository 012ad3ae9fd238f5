"""The lake's storage and keys in the synthesized templates: the bucket (private, encrypted, TLS only,
its lifecycle, the same rules on the local bucket), the restricted quarantine's key, the pseudonym key and secret."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template

from infra.constructs.personal import PersonalData
from infra.lifecycle import lake_lifecycle
from tests.unit.cdk_templates import (
    CATALOG,
    ENVIRONMENTS,
    all_statements,
    resources,
    resources_of,
    role_statements,
    template,
)


@pytest.mark.parametrize("env", ["staging", "production"])
def test_lake_bucket_is_private_encrypted_tls_only_with_lifecycle(stacks: Any, env: str) -> None:
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    lake = tpl.find_resources("AWS::S3::Bucket", {"Properties": {"BucketName": settings.bucket}})
    assert len(lake) == 1
    props = next(iter(lake.values()))["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert "KMSMasterKeyID" in sse["ServerSideEncryptionByDefault"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert "LoggingConfiguration" in props
    rules = {r["Id"]: r for r in props["LifecycleConfiguration"]["Rules"]}
    assert rules["abort-incomplete-uploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert rules["expire-quarantine"]["Prefix"] == "quarantine/"
    noncurrent = rules["expire-noncurrent-versions"]["NoncurrentVersionExpiration"]
    assert noncurrent == {"NoncurrentDays": settings.noncurrent_version_days}
    roots = ("", "data", "quarantine", "compacted", "restricted")
    assert all(r.get("Prefix", "").split("/")[0] in roots for r in rules.values())
    assert rules["tier-data"]["Transitions"][0]["StorageClass"] == "INTELLIGENT_TIERING"
    retained = [t for t in CATALOG.for_env(env) if t.spec.retention_days is not None]
    assert retained
    assert not any(r.startswith("retain-") and r.endswith("refund_issued") for r in rules)  # no retention set
    for topic in retained:
        rule = rules[f"retain-data-{topic.database}-{topic.table}"]
        assert (rule["Prefix"], rule["ExpirationInDays"]) == (topic.prefix.data_prefix(), topic.spec.retention_days)
    tpl.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )
    for key in resources(tpl, "AWS::KMS::Key").values():
        assert key["Properties"]["EnableKeyRotation"] is True


@pytest.mark.parametrize("env", ["staging", "production"])
def test_restricted_quarantine_has_its_own_key_short_retention_and_only_archiver_and_erasure_use_it(
    stacks: Any, env: str
) -> None:
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    [(key_id, key)] = [(i, r) for i, r in resources(tpl, "AWS::KMS::Key").items() if "RestrictedKey" in i]
    assert key["Properties"]["EnableKeyRotation"] is True
    tpl.has_resource_properties(
        "AWS::KMS::Alias", {"AliasName": f"alias/kafkalake-{env}-restricted", "TargetKeyId": Match.any_value()}
    )
    tpl.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketName": settings.bucket,
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [
                        {
                            "Id": "expire-restricted-quarantine",
                            "Prefix": "restricted/quarantine/",
                            "ExpirationInDays": settings.restricted_quarantine_retention_days,
                            "Status": "Enabled",
                        }
                    ]
                )
            },
        },
    )
    policies = resources(tpl, "AWS::S3::BucketPolicy").values()
    statements = [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]
    [deny] = [s for s in statements if s.get("Sid") == "RestrictedObjectsOnlyWithTheRestrictedKey"]
    assert deny["Effect"] == "Deny" and deny["Action"] == "s3:PutObject"
    assert deny["Condition"] == {
        "StringNotEquals": {"s3:x-amz-server-side-encryption-aws-kms-key-id": {"Fn::GetAtt": [key_id, "Arn"]}}
    }
    archiver = role_statements(tpl, "ArchiverJobRole")
    key_users = {s["Sid"]: s for s in key["Properties"]["KeyPolicy"]["Statement"]}
    assert key_users["ArchiverWritesThroughS3"]["Action"] == "kms:GenerateDataKey"
    assert "ArchiverJobRole" in json.dumps(key_users["ArchiverWritesThroughS3"]["Principal"])
    writes = [r for s in archiver if s["Action"] == "s3:PutObject" for r in resources_of(s)]
    assert "/restricted/quarantine/*" in [r["Fn::Join"][1][1] for r in writes]
    assert not [s for s in all_statements(tpl) if key_id in json.dumps(s.get("Resource"))], (
        "no identity policy names the key: its key policy alone decides (tests/unit/test_permissions_iam.py)"
    )
    schedules = {r["Properties"]["Name"]: r["Properties"] for r in resources(tpl, "AWS::Scheduler::Schedule").values()}
    archive_input = json.dumps(schedules[f"kafkalake-{env}-archiver"]["Target"]["Input"])
    assert "KAFKALAKE_RESTRICTED_KEY_ARN=" in archive_input and key_id in archive_input


@pytest.mark.parametrize("env", ["staging", "production"])
def test_the_pseudonym_key_is_generated_in_the_documented_shape_and_only_archiver_and_erasure_read_it(
    stacks: Any, env: str
) -> None:
    tpl = template(stacks, env)
    [(secret_id, secret)] = resources(tpl, "AWS::SecretsManager::Secret").items()
    generated = secret["Properties"]["GenerateSecretString"]
    assert json.loads(generated["SecretStringTemplate"]) == {"key_id": f"{env}-1"}
    assert generated["GenerateStringKey"] == "key" and generated["PasswordLength"] == 44
    assert generated["ExcludePunctuation"] is True and generated["IncludeSpace"] is False
    [lake_key] = secret["Properties"]["KmsKeyId"]["Fn::GetAtt"][:1]
    assert lake_key.startswith("LakeKey")
    reads = {"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": {"Ref": secret_id}}
    assert reads in role_statements(tpl, "ArchiverJobRole") and reads in role_statements(tpl, "ErasureJobRole")
    assert [s for s in all_statements(tpl) if json.dumps({"Ref": secret_id}) in json.dumps(s)] == [reads, reads]
    schedules = {r["Properties"]["Name"]: r["Properties"] for r in resources(tpl, "AWS::Scheduler::Schedule").values()}
    archive_input = json.dumps(schedules[f"kafkalake-{env}-archiver"]["Target"]["Input"])
    assert "KAFKALAKE_PSEUDONYM_SECRET_ARN=" in archive_input and secret_id in archive_input


def test_a_pseudonym_secret_named_in_environments_yaml_is_read_not_created() -> None:
    stack = Stack(App(), "Personal")
    key = kms.Key(stack, "LakeKey")
    bucket = s3.Bucket(stack, "Lake", encryption_key=key)
    arn = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:kafkalake/staging/pseudonym-AbCdEf"
    settings = ENVIRONMENTS["staging"].model_copy(update={"pseudonym_secret_arn": arn})
    personal = PersonalData(stack, "PersonalData", settings=settings, bucket=bucket, lake_key=key)
    role = iam.Role(stack, "ArchiverJobRole", assumed_by=iam.ServicePrincipal("emr-serverless.amazonaws.com"))
    personal.grant_archiver(role)
    tpl = Template.from_stack(stack)
    tpl.resource_count_is("AWS::SecretsManager::Secret", 0)
    assert {"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": arn} in role_statements(
        tpl, "ArchiverJobRole"
    )
    assert personal.endpoints(settings.endpoints()).pseudonym_secret_arn == arn


def s3_api_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """A CloudFormation lifecycle rule (``AWS::S3::Bucket`` ``LifecycleConfiguration.Rules[]``) as S3's
    ``PutBucketLifecycleConfiguration`` takes it: the translation CloudFormation makes on deploy."""
    translated: dict[str, Any] = {
        "ID": rule["Id"],
        "Status": rule["Status"],
        "Filter": {"Prefix": rule.get("Prefix", "")},
    }
    if "ExpirationInDays" in rule:
        translated["Expiration"] = {"Days": rule["ExpirationInDays"]}
    if "Transitions" in rule:
        translated["Transitions"] = [
            {"Days": t["TransitionInDays"], "StorageClass": t["StorageClass"]} for t in rule["Transitions"]
        ]
    for same in ("NoncurrentVersionExpiration", "AbortIncompleteMultipartUpload"):
        if same in rule:
            translated[same] = rule[same]
    known = {"Id", "Status", "Prefix", "ExpirationInDays", "Transitions", "NoncurrentVersionExpiration"}
    known.add("AbortIncompleteMultipartUpload")
    assert set(rule) <= known, f"a template rule property the comparison does not translate: {set(rule) - known}"
    return translated


@pytest.mark.parametrize("env", ["staging", "production"])
def test_the_local_bucket_gets_the_lifecycle_rules_of_the_template(stacks: Any, env: str) -> None:
    """The local stack's ``put_bucket_lifecycle_configuration`` (``kafkalake_dev.local.provision``) sends exactly
    the rules the template deploys, in S3's terms."""
    settings = ENVIRONMENTS[env]
    lake = template(stacks, env).find_resources("AWS::S3::Bucket", {"Properties": {"BucketName": settings.bucket}})
    [props] = [r["Properties"] for r in lake.values()]
    deployed = [s3_api_rule(r) for r in props["LifecycleConfiguration"]["Rules"]]
    assert len(deployed) > len(lake_lifecycle(settings, [])), "the template has the topics' retention rules"
    assert [r.s3_rule() for r in lake_lifecycle(settings, CATALOG.for_env(env))] == deployed
