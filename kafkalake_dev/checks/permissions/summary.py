"""What each pipeline role may do, rendered from the resolved template for the docs: docs/deploying.md holds the
full table (every statement of every role, and the key policies that name a role), the README a line per role of
what it may write and delete in the lake. Unit tests compare both with the synthesized staging template, so the
docs cannot drift from what ``cdk deploy`` creates; ``python -m kafkalake_dev.checks.permissions.summary`` prints
them from cdk.out after a change."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Final

from kafkalake.environments import load_environments
from kafkalake_dev.checks.permissions.requests import DEPLOYED, PRINCIPALS
from kafkalake_dev.checks.permissions.templates import Document, Policies, Role, load_template, resolve_policies

SUMMARISED: Final = (*PRINCIPALS, "location")
_SERVICE_ARN = re.compile(r"^arn:aws:(?P<service>[a-z0-9-]+):[a-z0-9-]*:\d*:(?P<rest>.+)$")


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def short(resource: str, policies: Policies) -> str:
    """A resource as the docs name it: lake objects by prefix, assets and keys by what they are."""
    lake = f"arn:aws:s3:::{policies.deployment.bucket}"
    if resource == lake:
        return "the lake bucket"
    if resource.startswith(lake + "/"):
        return f"`{resource.removeprefix(lake + '/')}`"
    if resource.startswith("arn:aws:s3:::cdk-"):
        return "its own asset objects"
    if resource.startswith("arn:aws:kms:"):
        return f"the {resource.rsplit('/', 1)[-1]} key"
    match = _SERVICE_ARN.match(resource)
    return f"{match['service']} `{match['rest']}`" if match else f"`{resource}`"


def in_lake(resource: str, policies: Policies) -> bool:
    return resource.startswith(f"arn:aws:s3:::{policies.deployment.bucket}/")


def condition(statement: Document) -> str:
    found = statement.get("Condition")
    if not found:
        return ""
    parts = [f"{key} {', '.join(map(str, listed(v)))}" for test in found.values() for key, v in test.items()]
    return " (if " + "; ".join(parts) + ")"


def role_rows(policies: Policies, role: Role) -> list[str]:
    """One row per statement of the role's identity policies, then per key-policy statement naming the role."""
    rows = []
    for document in role.identity.values():
        for statement in listed(document["Statement"]):
            resources = sorted(dict.fromkeys(short(r, policies) for r in listed(statement["Resource"])))
            actions = ", ".join(sorted(listed(statement["Action"])))
            rows.append(f"| {role.name} | {actions}{condition(statement)} | {', '.join(resources)} |")
    for arn, document in sorted(policies.resource_policies.items()):
        for statement in listed(document["Statement"]):
            if statement["Effect"] == "Allow" and role.arn in listed(statement.get("Principal", {}).get("AWS", [])):
                actions = ", ".join(sorted(listed(statement["Action"])))
                rows.append(f"| {role.name} | {actions}{condition(statement)} | {short(arn, policies)} (key policy) |")
    return rows


def permissions_table(policies: Policies) -> str:
    """docs/deploying.md's table: every statement that grants a pipeline role something."""
    header = ["| role | may | on |", "| --- | --- | --- |"]
    return "\n".join(header + [row for name in SUMMARISED for row in role_rows(policies, policies.roles[name])])


def lake_writes(policies: Policies) -> str:
    """The README's table: per role, where in the lake it may write and where it may delete."""
    lines = []
    for name in SUMMARISED:
        writes: dict[str, list[str]] = {"s3:PutObject": [], "s3:DeleteObject": [], "s3:DeleteObjectVersion": []}
        for document in policies.roles[name].identity.values():
            for statement in listed(document["Statement"]):
                objects = [short(r, policies) for r in listed(statement["Resource"]) if in_lake(r, policies)]
                for action in set(listed(statement["Action"])) & set(writes):
                    writes[action] += objects
        put, delete, versions = (", ".join(sorted(set(writes[a]))) or "-" for a in writes)
        lines.append(f"| {name} | {put} | {delete} | {versions} |")
    return "\n".join(["| role | writes | deletes | deletes object versions |", "| --- | --- | --- | --- |", *lines])


def main(root: Path) -> None:
    """Print both from the staging template in ``root``/cdk.out (``make synth``), to paste into the docs."""
    settings = load_environments(root / "environments.yaml")[DEPLOYED.env]
    policies = resolve_policies(load_template(DEPLOYED.env, root / "cdk.out"), settings, DEPLOYED)
    print(f"docs/deploying.md:\n{permissions_table(policies)}\n\nREADME.md:\n{lake_writes(policies)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())
