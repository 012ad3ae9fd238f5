"""The policies a synthesized template deploys, in the terms of a deployed environment (``requests.Deployment``):
each principal's role and identity policies, the buckets' policies, the KMS keys' policies and the secrets'
resource policies, with every CloudFormation intrinsic resolved, so the IAM evaluator (``iam.py``) compares
recorded requests with exactly what ``cdk deploy`` would create.

Resolution rules (an intrinsic or resource type not covered here raises ``UnresolvedIntrinsic``: a policy we
cannot read must not be read as "allows nothing"):
- pseudo parameters: ``AWS::AccountId``, ``AWS::Region``, ``AWS::Partition``, ``AWS::URLSuffix`` from the
  deployment;
- the keys the template creates get the ``key_arn`` names (``KEYS``), its secrets the ``secret_arn`` names
  (``SECRETS``), and environments.yaml's Kafka secret ARN, written in the template as is, ``secret_arn("kafka")``;
- resources CloudFormation names at deploy time (roles, unnamed buckets, applications) are named by their logical
  id: ``arn:aws:iam::<account>:role/<logical id>`` stands for ``kafkalake-staging-JobsArchiverJobRole-<random>``.
- Managed policy ARNs on a principal's role raise too: their documents are not in the template (none of our
  principals has one; the bucket-notifications handler's AWS-managed Lambda policy is not a principal here).

Principals: the pipeline's five roles (``ROLES``), the Lake Formation location role (``location``) and each consumer
of environments.yaml (``consumer:<name>``, its ARN as configured, with no identity policy: the stack gives consumers
none, Lake Formation grants them tables).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from kafkalake.environments import EnvironmentConfig
from kafkalake_dev.checks.permissions.requests import Deployment, KeyName, SecretName, key_arn, secret_arn

Document = dict[str, Any]

ROLES: Final[dict[str, str]] = {
    "JobsArchiverJobRole": "archiver",
    "JobsCompactorJobRole": "compactor",
    "JobsErasureJobRole": "erasure",
    "MaintainerRole": "maintainer",
    "ReconcilerRole": "reconciler",
    "AccessLocationRole": "location",
}
"""Role construct paths (the logical id without CDK's 8-character hash) → principal name."""
KEYS: Final[dict[str, KeyName]] = {
    "LakeKey": "lake",
    "PersonalDataRestrictedKey": "restricted",
    "NotificationsQueueKey": "queue",
}
"""KMS key construct paths → the ``key_arn`` names the requests use."""
SECRETS: Final[dict[str, SecretName]] = {"PersonalDataPseudonymKey": "pseudonym"}
"""Secret construct paths → the ``secret_arn`` names (the Kafka secret is environments.yaml's, not the template's)."""
CONSUMER_PREFIX: Final = "consumer:"
_LOGICAL_ID = re.compile(r"^(?P<path>.+)[0-9A-F]{8}$")
_SUB_VARIABLE = re.compile(r"\$\{([^}!]+)\}")


class UnresolvedIntrinsic(ValueError):
    """An intrinsic function or referenced resource type the resolver does not know how to put in deployed terms."""


@dataclass(frozen=True)
class Role:
    """One principal: its role's ARN and the identity policies attached to it, by policy name."""

    name: str
    arn: str
    identity: dict[str, Document] = field(default_factory=dict)

    def session_arn(self) -> str:
        """The assumed-role session ARN the principal signs as (``aws:PrincipalArn`` is ``arn``)."""
        account, role_name = self.arn.split(":")[4], self.arn.rsplit("/", 1)[1]
        return f"arn:aws:sts::{account}:assumed-role/{role_name}/{self.name.replace(':', '-')}"


@dataclass(frozen=True)
class Policies:
    """What one synthesized environment deploys: principals and resource policies by resource ARN (buckets, keys,
    secrets)."""

    deployment: Deployment
    roles: dict[str, Role]
    resource_policies: dict[str, Document]

    def resource_policy(self, resource: str) -> tuple[str, Document] | None:
        """The resource policy AWS consults for ``resource`` (an object's bucket, a key, a secret) and its ARN."""
        owner = resource.split("/", 1)[0] if resource.startswith("arn:aws:s3:::") else resource
        document = self.resource_policies.get(owner)
        return None if document is None else (owner, document)

    def with_role(self, role: Role) -> Policies:
        return replace(self, roles={**self.roles, role.name: role})

    def with_resource_policy(self, arn: str, document: Document) -> Policies:
        return replace(self, resource_policies={**self.resource_policies, arn: document})


def template_path(env: str, cdk_out: Path) -> Path:
    """Where ``make synth`` writes an environment's template."""
    return cdk_out / f"kafkalake-{env}.template.json"


def load_template(env: str, cdk_out: Path) -> Document:
    template: Document = json.loads(template_path(env, cdk_out).read_text())
    return template


def deployment_of(settings: EnvironmentConfig, account: str, region: str | None = None) -> Deployment:
    """The deployed terms of an environments.yaml entry in ``account``."""
    return Deployment(env=settings.name, bucket=settings.bucket, account=account, region=region or settings.region)


def resolve_policies(template: Document, settings: EnvironmentConfig, deployment: Deployment) -> Policies:
    """Every principal's role and identity policies and every resource policy of ``template``, resolved."""
    resolver = _Resolver(template["Resources"], settings, deployment)
    roles = {name: resolver.role(logical, name) for logical, name in resolver.principal_roles().items()}
    for consumer in settings.consumers:
        name = CONSUMER_PREFIX + consumer.name
        roles[name] = Role(name=name, arn=consumer.role_arn)
    return Policies(deployment=deployment, roles=roles, resource_policies=resolver.resource_policies())


class _Resolver:
    def __init__(self, resources: dict[str, Document], settings: EnvironmentConfig, deployment: Deployment) -> None:
        self.resources, self.settings, self.deployment = resources, settings, deployment

    def construct_path(self, logical: str) -> str:
        match = _LOGICAL_ID.match(logical)
        return match["path"] if match else logical

    def of_type(self, kind: str) -> dict[str, Document]:
        return {logical: r for logical, r in self.resources.items() if r["Type"] == kind}

    def principal_roles(self) -> dict[str, str]:
        found = {
            logical: ROLES[self.construct_path(logical)]
            for logical in self.of_type("AWS::IAM::Role")
            if self.construct_path(logical) in ROLES
        }
        missing = set(ROLES.values()) - set(found.values())
        if missing:
            raise UnresolvedIntrinsic(f"the template has no role for {sorted(missing)}")
        return found

    def role(self, logical: str, name: str) -> Role:
        props = self.resources[logical]["Properties"]
        if props.get("ManagedPolicyArns"):
            raise UnresolvedIntrinsic(
                f"{logical} ({name}) has managed policies, whose documents are not in the template"
            )
        identity = {
            f"{logical}/{p['PolicyName']}": self.resolve(p["PolicyDocument"]) for p in props.get("Policies", [])
        }
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for policy_id, policy in self.of_type(kind).items():
                if {"Ref": logical} in policy["Properties"].get("Roles", []):
                    identity[policy_id] = self.resolve(policy["Properties"]["PolicyDocument"])
        return Role(name=name, arn=self.attribute(logical, "Arn"), identity=identity)

    def resource_policies(self) -> dict[str, Document]:
        policies: dict[str, Document] = {}
        for policy in self.of_type("AWS::S3::BucketPolicy").values():
            bucket = self.resolve(policy["Properties"]["Bucket"])
            policies[f"arn:{self.deployment.partition}:s3:::{bucket}"] = self.resolve(
                policy["Properties"]["PolicyDocument"]
            )
        for logical, key in self.of_type("AWS::KMS::Key").items():
            document = key.get("Properties", {}).get("KeyPolicy") or self.default_key_policy()
            policies[self.attribute(logical, "Arn")] = self.resolve(document)
        for policy in self.of_type("AWS::SecretsManager::ResourcePolicy").values():
            policies[self.resolve(policy["Properties"]["SecretId"])] = self.resolve(
                policy["Properties"]["ResourcePolicy"]
            )
        return policies

    def default_key_policy(self) -> Document:
        """What KMS gives a key created without a policy: the account's IAM policies decide."""
        root = f"arn:{self.deployment.partition}:iam::{self.deployment.account}:root"
        statement = {"Sid": "Enable IAM User Permissions", "Effect": "Allow", "Principal": {"AWS": root}}
        return {"Version": "2012-10-17", "Statement": [{**statement, "Action": "kms:*", "Resource": "*"}]}

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, str):
            return self.literal(value)
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (function, argument), *_ = value.items()
            intrinsic = self.intrinsics().get(function)
            if intrinsic is not None:
                return intrinsic(argument)
            if function.startswith("Fn::") or function == "Condition":
                raise UnresolvedIntrinsic(f"cannot resolve {function}: {json.dumps(argument)[:200]}")
        return {k: self.resolve(v) for k, v in value.items()}

    def intrinsics(self) -> Mapping[str, Callable[[Any], Any]]:
        return {
            "Ref": self.ref,
            "Fn::GetAtt": lambda a: self.attribute(*(a.split(".", 1) if isinstance(a, str) else a)),
            "Fn::Join": lambda a: str(self.resolve(a[0])).join(str(self.resolve(v)) for v in self.resolve(a[1])),
            "Fn::Sub": self.sub,
            "Fn::Select": lambda a: self.resolve(a[1])[int(self.resolve(a[0]))],
            "Fn::Split": lambda a: str(self.resolve(a[1])).split(str(self.resolve(a[0]))),
        }

    def literal(self, value: str) -> str:
        """A string written in the template as is: environments.yaml's Kafka secret becomes its deployed name."""
        return secret_arn("kafka", self.deployment) if value == self.settings.kafka_secret_arn else value

    def sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument

        def variable(match: re.Match[str]) -> str:
            name = match[1]
            if name in variables:
                return str(self.resolve(variables[name]))
            return str(self.ref(name) if "." not in name else self.attribute(*name.split(".", 1)))

        return _SUB_VARIABLE.sub(variable, text).replace("${!", "${")

    def ref(self, name: str) -> str:
        where = self.deployment
        pseudo = {
            "AWS::AccountId": where.account,
            "AWS::Region": where.region,
            "AWS::Partition": where.partition,
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name in pseudo:
            return pseudo[name]
        kind = self.resource(name)["Type"]
        if kind == "AWS::KMS::Key":
            return self.key_name(name)
        if kind == "AWS::SecretsManager::Secret":
            if self.construct_path(name) not in SECRETS:
                raise UnresolvedIntrinsic(f"no deployed name for the secret {name}")
            return secret_arn(SECRETS[self.construct_path(name)], where)
        named = {"AWS::IAM::Role": "RoleName", "AWS::S3::Bucket": "BucketName", "AWS::Glue::Database": None}
        if kind not in named:
            raise UnresolvedIntrinsic(f"cannot resolve Ref to {name} ({kind})")
        return self.name(name, named[kind])

    def attribute(self, logical: str, attribute: str) -> str:
        where, kind = self.deployment, self.resource(logical)["Type"]
        arn = f"arn:{where.partition}"
        arns: dict[tuple[str, str], Callable[[], str]] = {
            ("AWS::IAM::Role", "Arn"): lambda: f"{arn}:iam::{where.account}:role/{self.name(logical, 'RoleName')}",
            ("AWS::S3::Bucket", "Arn"): lambda: f"{arn}:s3:::{self.name(logical, 'BucketName')}",
            ("AWS::KMS::Key", "Arn"): lambda: key_arn(self.key_name(logical), where),
            ("AWS::SQS::Queue", "Arn"): lambda: (
                f"{arn}:sqs:{where.region}:{where.account}:" + self.name(logical, "QueueName")
            ),
            ("AWS::Logs::LogGroup", "Arn"): lambda: (
                f"{arn}:logs:{where.region}:{where.account}:log-group:" + self.name(logical, "LogGroupName") + ":*"
            ),
            ("AWS::Events::EventBus", "Arn"): lambda: (
                f"{arn}:events:{where.region}:{where.account}:event-bus/" + self.name(logical, "Name")
            ),
            ("AWS::EMRServerless::Application", "Arn"): lambda: (
                f"{arn}:emr-serverless:{where.region}:{where.account}:/applications/{logical}"
            ),
        }
        if (kind, attribute) not in arns:
            raise UnresolvedIntrinsic(f"cannot resolve Fn::GetAtt {logical}.{attribute} ({kind})")
        return arns[kind, attribute]()

    def resource(self, logical: str) -> Document:
        if logical not in self.resources:
            raise UnresolvedIntrinsic(f"the template has no resource {logical}")
        return self.resources[logical]

    def name(self, logical: str, name_property: str | None) -> str:
        """The resource's configured name, else its logical id (CloudFormation generates one at deploy time)."""
        configured = self.resource(logical).get("Properties", {}).get(name_property) if name_property else None
        if configured is None and self.resource(logical)["Type"] == "AWS::Glue::Database":
            configured = self.resource(logical)["Properties"]["DatabaseInput"]["Name"]
        return str(self.resolve(configured)) if configured is not None else logical

    def key_name(self, logical: str) -> KeyName:
        path = self.construct_path(logical)
        if path not in KEYS:
            raise UnresolvedIntrinsic(f"no key_arn name for the KMS key {logical}")
        return KEYS[path]
