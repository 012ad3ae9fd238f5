"""Personal data in the stack: the restricted quarantine's own KMS key (a bucket's default encryption cannot differ
per prefix, so the archiver writes those objects with SSE-KMS and this key, and the bucket refuses them with any
other), and the pseudonym key's secret (``kafkalake.personal``) when environments.yaml names none. The archiver
is given both through its job specification and may use them; no other role may."""

from __future__ import annotations

import dataclasses
import json

from aws_cdk import DefaultStackSynthesizer, Fn, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.constructs.iam import object_finding
from infra.nag import acknowledge
from kafkalake.endpoints import Endpoints
from kafkalake.environments import EnvironmentConfig
from kafkalake.layout import RESTRICTED_QUARANTINE_ROOT, RESTRICTED_ROOT

GENERATED_KEY_CHARACTERS = 44
"""Letters and digits are base64 characters: 44 of them (a multiple of 4, no padding) decode to 33 random bytes
(about 262 bits), above ``kafkalake.personal.MIN_KEY_BYTES``."""
KEY_ID_SUFFIX = "1"
"""The generated key's id is ``<environment>-1``; a rotation stores the next one (docs/personal-data.md, Rotating the
key)."""


KEY_ADMINISTRATION = (
    "kms:DescribeKey",
    "kms:GetKeyPolicy",
    "kms:PutKeyPolicy",
    "kms:GetKeyRotationStatus",
    "kms:EnableKeyRotation",
    "kms:DisableKeyRotation",
    "kms:EnableKey",
    "kms:DisableKey",
    "kms:UpdateKeyDescription",
    "kms:ListResourceTags",
    "kms:TagResource",
    "kms:UntagResource",
    "kms:CreateAlias",
    "kms:UpdateAlias",
    "kms:DeleteAlias",
    "kms:ListGrants",
    "kms:RevokeGrant",
    "kms:ScheduleKeyDeletion",
    "kms:CancelKeyDeletion",
)
"""What CloudFormation does to an ``AWS::KMS::Key`` and its alias, and nothing that uses the key: no
Encrypt/Decrypt/GenerateDataKey/ReEncrypt, and no CreateGrant (a grant hands out cryptographic use outside the key
policy)."""


def key_administration(stack: Stack) -> iam.PolicyStatement:
    """The restricted key's administrator: the role CloudFormation deploys the stack with (the CDK bootstrap's
    execution role). KMS refuses a key policy that would not let the caller of CreateKey/PutKeyPolicy change it
    again (the policy lockout safety check), and only deployments should change it: every change is a reviewed
    template. No account-root statement: that would hand the key's use to any IAM policy of the account."""
    synthesizer = stack.synthesizer
    if not isinstance(synthesizer, DefaultStackSynthesizer):
        raise TypeError("the restricted key's administrator is the CDK bootstrap's CloudFormation execution role")
    return iam.PolicyStatement(
        sid="DeploymentAdministersTheKey",
        principals=[iam.ArnPrincipal(Fn.sub(synthesizer.cloud_formation_execution_role_arn))],
        actions=list(KEY_ADMINISTRATION),
        resources=["*"],
    )


class PersonalData(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: EnvironmentConfig,
        bucket: s3.IBucket,
        lake_key: kms.IKey,
    ) -> None:
        super().__init__(scope, construct_id)
        self.bucket = bucket
        self.restricted_key = kms.Key(
            self,
            "RestrictedKey",
            enable_key_rotation=True,
            alias=f"alias/kafkalake-{settings.name}-restricted",
            description=f"kafkalake {settings.name}: raw quarantined records of topics with personal fields",
            policy=iam.PolicyDocument(statements=[key_administration(Stack.of(self))]),
        )
        bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="RestrictedObjectsOnlyWithTheRestrictedKey",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:PutObject"],
                resources=[bucket.arn_for_objects(f"{RESTRICTED_ROOT}/*")],
                conditions={
                    "StringNotEquals": {"s3:x-amz-server-side-encryption-aws-kms-key-id": self.restricted_key.key_arn}
                },
            )
        )
        self.secret_arn = settings.pseudonym_secret_arn or self._generated_secret(settings, lake_key)

    def _generated_secret(self, settings: EnvironmentConfig, lake_key: kms.IKey) -> str:
        secret = secretsmanager.Secret(
            self,
            "PseudonymKey",
            description=f"kafkalake {settings.name}: the HMAC key of pseudonyms (kafkalake.personal)",
            encryption_key=lake_key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template=json.dumps({"key_id": f"{settings.name}-{KEY_ID_SUFFIX}"}),
                generate_string_key="key",
                password_length=GENERATED_KEY_CHARACTERS,
                exclude_punctuation=True,
                include_space=False,
            ),
            removal_policy=RemovalPolicy.RETAIN,
        )
        acknowledge(
            secret,
            "Rotating the pseudonym key changes every pseudonym made after it: it is a documented procedure (a new "
            "key id beside the pseudonyms), never an automatic rotation that would silently break joins.",
            "AwsSolutions-SMG4",
        )
        return secret.secret_arn

    def endpoints(self, endpoints: Endpoints) -> Endpoints:
        """The archiver's endpoints with the pseudonym key's secret and the restricted key."""
        return dataclasses.replace(
            endpoints, pseudonym_secret_arn=self.secret_arn, restricted_key_arn=self.restricted_key.key_arn
        )

    def grant_eraser(self, role: iam.Role) -> None:
        """Rewrite restricted quarantine objects without an erased subject's rows (read, write with the restricted
        key, delete their other versions), and read the pseudonym key that hashes the requests' subjects."""
        objects = self.bucket.arn_for_objects(f"{RESTRICTED_QUARANTINE_ROOT}/*")
        actions = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"]
        role.add_to_policy(iam.PolicyStatement(actions=actions, resources=[objects]))
        self._admit(role, "ErasureReadsAndWritesThroughS3", ["kms:Decrypt", "kms:GenerateDataKey"])
        role.add_to_policy(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[self.secret_arn]))
        acknowledge(
            role,
            "The erasure job rewrites restricted quarantine objects named at run time (topic, date, offsets) and "
            "deletes their other versions.",
            object_finding(self.bucket, RESTRICTED_QUARANTINE_ROOT),
        )

    def _admit(self, role: iam.Role, sid: str, actions: list[str]) -> None:
        """Let ``role`` use the restricted key for ``actions``, only through S3 (SSE-KMS), by the key policy alone:
        the key trusts no IAM policy, so no identity statement is needed or sufficient."""
        stack = Stack.of(self)
        self.restricted_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid=sid,
                principals=[iam.ArnPrincipal(role.role_arn)],
                actions=actions,
                resources=["*"],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.{stack.url_suffix}"}},
            )
        )

    def grant_archiver(self, role: iam.Role) -> None:
        """Write restricted quarantine objects with the restricted key (never read them), read the pseudonym key."""
        writes = self.bucket.arn_for_objects(f"{RESTRICTED_QUARANTINE_ROOT}/*")
        role.add_to_policy(iam.PolicyStatement(actions=["s3:PutObject"], resources=[writes]))
        self._admit(role, "ArchiverWritesThroughS3", ["kms:GenerateDataKey"])
        role.add_to_policy(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[self.secret_arn]))
        acknowledge(
            role,
            "The archiver writes restricted quarantine objects it names at run time (topic, date, offsets).",
            object_finding(self.bucket, RESTRICTED_QUARANTINE_ROOT),
        )
