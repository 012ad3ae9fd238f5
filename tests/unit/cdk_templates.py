"""What the infrastructure tests share: the environments and catalog the stacks are built from, and readers of a
synthesized template (resources, IAM statements, grants). The stacks themselves are the ``stacks`` fixture
(``tests/unit/conftest.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from aws_cdk import App
from aws_cdk.assertions import Template

from infra.repo import catalog_dir, environments_file
from infra.stack import KafkalakeStack
from kafkalake.environments import load_environments
from kafkalake.topic_catalog import load_topic_catalog

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
ENVIRONMENTS = load_environments(environments_file())
TAG = "AWS::LakeFormation::Tag"
CATALOG = load_topic_catalog(catalog_dir())


def template(stacks: tuple[App, dict[str, KafkalakeStack]], env: str) -> Template:
    return Template.from_stack(stacks[1][env])


def resources(tpl: Template, kind: str) -> dict[str, Any]:
    return dict(tpl.find_resources(kind))


def all_statements(tpl: Template) -> list[dict[str, Any]]:
    statements = []
    for kind in ("AWS::IAM::Policy", "AWS::IAM::Role"):
        for resource in resources(tpl, kind).values():
            props = resource["Properties"]
            documents = [props.get("PolicyDocument")] + [p["PolicyDocument"] for p in props.get("Policies", [])]
            for document in filter(None, documents):
                statements += document["Statement"]
    return statements


def role_policies(tpl: Template, role_fragment: str) -> list[dict[str, Any]]:
    """The policy documents attached to the role: its inline default policy and the managed overflow policies CDK
    moves statements to when that grows past IAM's inline size."""
    policies = [*resources(tpl, "AWS::IAM::Policy").values(), *resources(tpl, "AWS::IAM::ManagedPolicy").values()]
    return [
        p["Properties"]["PolicyDocument"]
        for p in policies
        if any(role_fragment in r["Ref"] for r in p["Properties"].get("Roles", []))
    ]


def role_statements(tpl: Template, role_fragment: str) -> list[dict[str, Any]]:
    return [s for document in role_policies(tpl, role_fragment) for s in document["Statement"]]


def kafka_grants(statements: list[dict[str, Any]]) -> dict[tuple[str, ...], set[str]]:
    """The ``kafka-cluster:`` actions granted, as each set of actions and every resource granted it, however the
    statements are merged or split."""
    found: dict[tuple[str, ...], set[str]] = {}
    for statement in statements:
        actions = tuple(sorted(resources_of({"Resource": statement["Action"]})))
        if any(a.startswith("kafka-cluster:") for a in actions):
            found.setdefault(actions, set()).update(resources_of(statement))
    return found


def resources_of(statement: dict[str, Any]) -> list[Any]:
    found = statement["Resource"]
    return found if isinstance(found, list) else [found]


def statement_actions(statements: list[dict[str, Any]]) -> set[str]:
    return {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}


def write_topic(root: Path, company: str, domain: str, name: str, inference: str) -> None:
    folder = root / company / domain / "staging"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(f"table_inference: {inference}\nretention_days: 30\n")
    (folder / f"{name}.v1.avsc").write_text(
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "id", "type": "string"}]})
    )


def granted(statements: list[dict[str, Any]], action: str) -> list[str]:
    """The resources ``action`` is granted on, rendered as text (CloudFormation functions included)."""
    return [
        json.dumps(r)
        for s in statements
        if action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        for r in resources_of(s)
    ]


def lake_writer_grants(tpl: Template) -> dict[str, dict[str, tuple[list[str], list[str]]]]:
    """Role logical id (without its hash) → resource kind (Database, Table, DataLocation, LFTag) → (permissions,
    grantable), the same on every database and tag (asserted)."""
    found: dict[str, dict[str, tuple[list[str], list[str]]]] = {}
    for resource in resources(tpl, "AWS::LakeFormation::PrincipalPermissions").values():
        props = resource["Properties"]
        principal = props["Principal"]["DataLakePrincipalIdentifier"]
        if isinstance(principal, dict):
            role = principal["Fn::GetAtt"][0][:-8]
            [kind] = props["Resource"]
            granted = (props["Permissions"], props["PermissionsWithGrantOption"])
            assert found.setdefault(role, {}).setdefault(kind, granted) == granted
    return found
