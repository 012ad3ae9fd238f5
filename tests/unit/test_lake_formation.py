"""Lake Formation, modelled (``kafkalake_dev.checks.permissions.lake_formation``) and applied to the synthesized
templates: each pipeline role's Glue calls are allowed by its grants and fail without any one of them, findings 2
and 4 of #34, the consumers' access equals what ``kafkalake access`` prints, and personal columns stay hidden."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from infra.repo import catalog_dir, environments_file
from kafkalake.environments import load_environments
from kafkalake.permissions import AccessModel, TableTags, access_model
from kafkalake.topic_catalog import load_topic_catalog
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.checks.lake_access import NO_ACCESS, NONE, matrix_lines
from kafkalake_dev.checks.permissions.lake_formation import (
    ROLES,
    RULES,
    consumer_access,
    evaluate_lake_formation,
    lake_formation_of,
)
from kafkalake_dev.checks.permissions.requests import Deployment, GlueCall, Principal

ENVIRONMENTS = load_environments(environments_file())
CATALOG = load_topic_catalog(catalog_dir())
PRINCIPAL_PERMISSIONS = "AWS::LakeFormation::PrincipalPermissions"


@pytest.fixture(scope="module")
def templates(synthesized_templates: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return synthesized_templates


def model(env: str) -> AccessModel:
    return access_model(ENVIRONMENTS[env], CATALOG.for_env(env))


def where(env: str) -> Deployment:
    return Deployment(env=env, bucket=ENVIRONMENTS[env].bucket)


def location(env: str, table: TableTags, below: str = "") -> str:
    """Under the registered data prefix, as the pipeline's locations are (``kafkalake.layout``)."""
    return f"s3://{ENVIRONMENTS[env].bucket}/data/{table.database}/{table.table}{below}"


def pipeline_calls(env: str) -> list[GlueCall]:
    """Each role's Glue calls (read from its code) on every catalog table, none of which the caller created: the
    crawlers and the maintainer create them at run time, so only grants can allow them."""
    calls = []
    for table in model(env).tables:
        db, name, at = table.database, table.table, location(env, table)
        swapped = location(env, table, "/_compacted/day=2026-11-25/run-1")  # a rewrite's run directory
        calls += [
            # lambdas/maintainer (dal.py): tables it creates or meets, their partitions, their LF-tags, crawlers
            GlueCall("maintainer", "CreateTable", db, f"{name}_new", at),
            GlueCall("maintainer", "GetTable", db, name),
            GlueCall("maintainer", "UpdateTable", db, name),
            GlueCall("maintainer", "GetPartitions", db, name),
            GlueCall("maintainer", "BatchGetPartition", db, name),
            GlueCall("maintainer", "BatchCreatePartition", db, name, f"{at}/day=2026-11-25"),
            GlueCall("maintainer", "BatchUpdatePartition", db, name, f"{at}/day=2026-11-25"),
            GlueCall("maintainer", "AddLFTagsToResource", db, name),
            GlueCall("maintainer", "StartCrawler", db, name, at),
            # lambdas/reconciler (dal.py)
            GlueCall("reconciler", "GetTable", db, name),
            GlueCall("reconciler", "GetPartitions", db, name),
            GlueCall("reconciler", "BatchCreatePartition", db, name, f"{at}/day=2026-11-25"),
            # spark_jobs/compaction (selection.py, swap.py) and spark_jobs/erasure (job.py: the same Rewriter)
            *(
                GlueCall(role, operation, db, name, swapped if operation == "UpdatePartition" else None)
                for role in ("compactor", "erasure")
                for operation in ("GetPartitions", "GetPartition", "UpdatePartition")
            ),
        ]
        if name in iceberg_tables(env):  # spark_jobs/archiver/table_commit.py; the rewriters' Iceberg commits
            calls += [GlueCall("archiver", op, db, name, at if op == "CreateTable" else None) for op in ICEBERG_COMMITS]
            calls += [GlueCall(role, op, db, name) for role in ("compactor", "erasure") for op in ICEBERG_COMMITS[2:]]
    return calls


ICEBERG_COMMITS = ("GetTable", "CreateTable", "GetTable", "UpdateTable")
"""The archiver looks for its table, makes it, then commits to it; the rewriters read and commit (the last two)."""


def iceberg_tables(env: str) -> set[str]:
    return {t.table for t in CATALOG.for_env(env) if t.spec.table_format == TableFormat.ICEBERG}


def without(template: dict[str, Any], *, principal: str, resource: str = "") -> dict[str, Any]:
    """The template without the Lake Formation grants to ``principal`` (a role's logical id prefix or an ARN) on
    resources of kind ``resource`` (``Database``, ``Table``, ``DataLocation``, ``LFTag``; every kind if empty)."""
    changed = copy.deepcopy(template)
    for logical_id, item in list(changed["Resources"].items()):
        if item["Type"] != PRINCIPAL_PERMISSIONS:
            continue
        props = item["Properties"]
        if principal in json.dumps(props["Principal"]) and (not resource or resource in props["Resource"]):
            del changed["Resources"][logical_id]
    return changed


def findings(template: dict[str, Any], calls: list[GlueCall], env: str = "staging") -> list[str]:
    return [str(f) for f in evaluate_lake_formation(calls, template, model(env).tables, where(env))]


@pytest.mark.parametrize("env", ["staging", "production"])
def test_every_pipeline_roles_glue_calls_are_allowed_by_the_template(templates: Any, env: str) -> None:
    calls = pipeline_calls(env)
    archiver = {"archiver"} if iceberg_tables(env) else set()
    assert {c.principal for c in calls} == {"maintainer", "reconciler", "compactor", "erasure", *archiver}
    assert findings(templates[env], calls, env) == []


@pytest.mark.parametrize("env", ["staging", "production"])
def test_removing_any_pipeline_roles_grant_makes_one_of_its_calls_fail(templates: Any, env: str) -> None:
    """Each Lake Formation grant to a role whose calls are modelled is needed. The crawlers' grant on tables is
    not sampled: their calls run inside Glue, unrecorded, and StartCrawler's rule asks only for what AWS's crawler
    guidance names (CREATE_TABLE on the database, the data location)."""
    template, calls = templates[env], pipeline_calls(env)
    grants = {k: r for k, r in template["Resources"].items() if r["Type"] == PRINCIPAL_PERMISSIONS}
    sampled = [k for k, r in grants.items() if "Fn::GetAtt" in json.dumps(r["Properties"]["Principal"])]
    sampled = [k for k in sampled if not (k.startswith("AccessCrawlers") and "Tables" in k)]
    assert len(sampled) >= 5 * len({t.database for t in model(env).tables})
    for logical_id in sampled:
        changed = copy.deepcopy(template)
        del changed["Resources"][logical_id]
        assert findings(changed, calls, env), f"{logical_id} removed, and no call fails"


def test_finding_2_erasure_calls_are_refused_without_its_grants_and_allowed_with_them(templates: Any) -> None:
    """Main before the fix: the erasure job's role had no Lake Formation grant (``infra/stack.py`` writers),
    while the databases give tables created at run time none (``CreateTableDefaultPermissions: []``)."""
    table = model("staging").tables[0]
    calls = [c for c in pipeline_calls("staging") if c.principal == "erasure" and c.table == table.table]
    as_on_main = without(templates["staging"], principal=ROLES["erasure"])
    refused = findings(as_on_main, calls)
    db_table = f"{table.database}.{table.table}"
    assert f"erasure: GetPartitions on {db_table} needs DESCRIBE on table {db_table}" in "\n".join(refused)
    assert any(f.startswith(f"erasure: UpdatePartition on {db_table} needs ALTER on table") for f in refused)
    assert findings(templates["staging"], calls) == []
    # with the databases' IAMAllowedPrincipals default, IAM alone would have decided: the finding needs the `[]`
    opened = copy.deepcopy(as_on_main)
    for resource in opened["Resources"].values():
        if resource["Type"] == "AWS::Glue::Database":
            resource["Properties"]["DatabaseInput"]["CreateTableDefaultPermissions"] = [
                {"Principal": {"DataLakePrincipalIdentifier": "IAM_ALLOWED_PRINCIPALS"}, "Permissions": ["ALL"]}
            ]
    assert not [f for f in findings(opened, calls) if "on table" in f]


@pytest.mark.parametrize("role", ["compactor", "erasure"])
def test_finding_4_repointing_a_partition_under_the_registered_prefix_needs_data_location_access(
    templates: Any, role: Principal
) -> None:
    """ALTER: 'If the property that is being altered is a registered Amazon S3 location, the principal must have
    data location permissions on the new location'; the run directories lie under the registered ``data/``."""
    table = model("staging").tables[0]
    swap = GlueCall(role, "UpdatePartition", table.database, table.table, location("staging", table, "/_compacted/x"))
    assert findings(templates["staging"], [swap]) == []
    logical = ROLES[role]
    [refused] = findings(without(templates["staging"], principal=logical, resource="DataLocation"), [swap])
    assert "needs DATA_LOCATION_ACCESS on arn:aws:s3:::kafkalake-staging-lake/data/" in refused
    assert "assumption" in refused and "registered Amazon S3 location" in refused
    outside = GlueCall(role, "UpdatePartition", table.database, table.table, "s3://kafkalake-staging-lake/compacted/x")
    assert findings(without(templates["staging"], principal=logical, resource="DataLocation"), [outside]) == []


def test_a_table_creator_holds_everything_on_it_and_nobody_else_does(templates: Any) -> None:
    """'Table creators: Have all permissions on tables that they create' (implicit permissions); the maintainer
    without its table grants may still tag what it created, the reconciler not."""
    table = model("staging").tables[0]
    bare = without(templates["staging"], principal=ROLES["maintainer"], resource="Table")
    created = GlueCall("maintainer", "CreateTable", table.database, "fresh", location("staging", table))
    tag = GlueCall("maintainer", "AddLFTagsToResource", table.database, "fresh")
    assert findings(bare, [created, tag]) == []
    refused = findings(bare, [tag])  # a table it did not create (a crawler's)
    assert any("with the grant option" in f for f in refused)
    assert findings(bare, [created, GlueCall("reconciler", "UpdatePartition", table.database, "fresh")]) == []
    assert findings(bare, [created, GlueCall("archiver", "UpdatePartition", table.database, "fresh")])


def test_every_rule_cites_the_aws_reference_and_says_where_it_assumes() -> None:
    for operation, rule in RULES.items():
        assert rule.source.startswith("https://docs.aws.amazon.com/"), operation
    partition_rules = [r for op, r in RULES.items() if "Partition" in op]
    assert partition_rules and all("partition" in r.assumption for r in partition_rules)
    assert RULES["CreateTable"].assumption == ""  # documented whole


def test_a_call_nobody_modelled_is_a_finding_not_an_allow(templates: Any) -> None:
    table = model("staging").tables[0]
    [finding] = findings(templates["staging"], [GlueCall("compactor", "DeleteTable", table.database, table.table)])
    assert "DeleteTable is not modelled" in finding


def printed_access(lines: list[str]) -> dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]]:
    """``kafkalake access``'s matrix read back: role ARN → table → (readable, hidden) columns."""
    printed: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {}
    role = ""
    for line in lines:
        if line and not line.startswith(" ") and line.endswith(")") and "(arn:" in line:
            role = line.split("(", 1)[1][:-1]
            printed[role] = {}
        elif role and line.startswith("  ") and "." in line.split()[0]:
            name, _sensitivity, cells = line.split(maxsplit=2)
            if cells == NO_ACCESS:
                printed[role][name] = ((), ())
            else:
                readable, hidden = cells.split(" | ")
                printed[role][name] = (tuple(readable.split(", ")), () if hidden == NONE else tuple(hidden.split(", ")))
    return printed


@pytest.mark.parametrize("env", ["staging", "production"])
def test_consumers_effective_access_equals_what_kafkalake_access_prints(templates: Any, env: str) -> None:
    """The evaluator reads the grants from the template and the tags from the template's database associations
    and the maintainer's table and column tags; ``kafkalake access`` computes from the consumer settings."""
    access = model(env)
    evaluated = consumer_access(templates[env], access.tables, where(env))
    assert len(evaluated) == len(ENVIRONMENTS[env].consumers) > 0
    assert evaluated == printed_access(matrix_lines(access))


def test_a_consumer_without_pii_access_cannot_select_personal_columns(templates: Any) -> None:
    access = model("staging")
    support = next(g.consumer for g in access.grants if g.consumer.name == "support")
    assert not support.pii
    personal = next(t for t in access.tables if t.personal_columns)
    lake = lake_formation_of(templates["staging"], access.tables, where("staging"))
    readable, hidden = lake.selectable(support.role_arn, personal)
    assert readable and set(personal.personal_columns) <= set(hidden)
    # lift the denial: the support role's TABLE grant without its `pii in (false)` key
    lifted = copy.deepcopy(templates["staging"])
    grants = [r["Properties"] for r in lifted["Resources"].values() if r["Type"] == PRINCIPAL_PERMISSIONS]
    [policy] = [
        g["Resource"]["LFTagPolicy"]
        for g in grants
        if g["Principal"]["DataLakePrincipalIdentifier"] == support.role_arn
        and g["Resource"].get("LFTagPolicy", {}).get("ResourceType") == "TABLE"
    ]
    policy["Expression"] = [e for e in policy["Expression"] if e["TagKey"] != "pii"]
    readable, hidden = lake_formation_of(lifted, access.tables, where("staging")).selectable(support.role_arn, personal)
    assert set(personal.personal_columns) <= set(readable) and hidden == ()
