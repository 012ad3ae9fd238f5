"""Who may do what, in the synthesized templates: no wildcard actions, cdk-nag with zero unacknowledged findings,
trust policies, Lake Formation tags and grants per consumer and per pipeline role, an Iceberg topic's own grants, and
no role that may compute or enable Glue column statistics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

from infra.app import build
from kafkalake.jobspec import SPARK_CONNECTORS
from kafkalake.topic_catalog import TopicCatalog, load_topic_catalog
from tests.unit.cdk_templates import (
    CATALOG,
    ENVIRONMENTS,
    TAG,
    all_statements,
    granted,
    lake_writer_grants,
    resources,
    role_statements,
    statement_actions,
    template,
    write_topic,
)


@pytest.mark.parametrize("env", ["staging", "production"])
def test_no_wildcard_actions_anywhere(stacks: Any, env: str) -> None:
    for statement in all_statements(template(stacks, env)):
        actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        if statement.get("Effect") == "Deny":
            continue
        assert not [a for a in actions if a == "*" or a.endswith(":*")], statement


@pytest.mark.parametrize("env", ["staging", "production"])
def test_cdk_nag_has_no_unacknowledged_findings(stacks: Any, env: str) -> None:
    app, built = stacks
    report = AwsSolutionsChecks(app).validate_scope(built[env])
    assert [v.rule_name for v in report.violations] == []
    assert report.success


def test_an_iceberg_topic_gets_its_archiver_table_grants_and_only_its_own(tmp_path: Path, stacks: Any) -> None:
    """The archiver makes and commits an Iceberg topic's table: Glue's table calls on that table only (its database
    and the catalog, which they name too), its Lake Formation grants; the rewriters commit rewrites under its
    location only. An environment without Iceberg topics gives the archiver no Glue grant at all."""
    write_topic(tmp_path / "catalog", "alpha", "sales", "orders", "native")
    write_topic(tmp_path / "catalog", "alpha", "sales", "returns", "native")
    iceberg = tmp_path / "catalog" / "alpha" / "sales" / "staging" / "returns.yaml"
    iceberg.write_text("table_format: iceberg\nretention_days: 30\n")
    catalog: TopicCatalog = load_topic_catalog(tmp_path / "catalog")
    app = App()
    built = build(app, {"staging": ENVIRONMENTS["staging"]}, catalog, tmp_path / "build")
    tpl = Template.from_stack(built["staging"])
    archiver = role_statements(tpl, "ArchiverJobRole")
    for action in ("glue:CreateTable", "glue:UpdateTable", "glue:GetTable"):
        tables = [r for r in granted(archiver, action) if ":table/" in r]
        assert tables and all(r.endswith(':table/alpha_staging/*"]]}') for r in tables), (action, tables)
    compactor = role_statements(tpl, "CompactorJobRole")
    assert (
        [r for r in granted(compactor, "s3:PutObject") if "data/staging/alpha/sales/" in r]
        == [r for r in granted(compactor, "s3:PutObject") if "data/staging/alpha/sales/returns/*" in r]
        != []
    )
    assert lake_writer_grants(tpl)["JobsArchiverJobRole"]["Database"] == (["CREATE_TABLE", "DESCRIBE"], [])
    assert "JobsArchiverJobRole" not in lake_writer_grants(template(stacks, "production"))
    assert AwsSolutionsChecks(app).validate_scope(built["staging"]).violations == []
    plain = role_statements(template(stacks, "production"), "ArchiverJobRole")
    assert not any(a.startswith("glue:") for a in statement_actions(plain))


@pytest.mark.parametrize("env", ["staging", "production"])
def test_trust_policies_name_the_source_account_and_job_roles_read_only_their_assets(stacks: Any, env: str) -> None:
    """(5) a job role reads its job's asset objects, not the assets bucket; (10) aws:SourceAccount on trust."""
    tpl = template(stacks, env)
    roles = resources(tpl, "AWS::IAM::Role")
    for logical_id, role in roles.items():
        for statement in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
            service = statement["Principal"].get("Service", "")
            if service in ("scheduler.amazonaws.com", "emr-serverless.amazonaws.com", "glue.amazonaws.com"):
                assert statement["Condition"]["StringEquals"]["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}, (
                    logical_id
                )
    for role in ("ArchiverJobRole", "CompactorJobRole", "ErasureJobRole"):
        statements = role_statements(tpl, role)
        reads = [s for s in statements if s["Action"] == "s3:GetObject"]
        rendered = json.dumps(reads)
        assert "cdk-hnb659fds-assets" in rendered
        assert not re.search(r"assets-[^\"]*/\*", rendered), "a job role may read the whole assets bucket"
        keys = re.findall(r'/([0-9a-f]{64}\.(?:zip|py|tgz|jar))"', rendered)
        assert len(keys) == 4 + len(SPARK_CONNECTORS) + 1, keys  # jobs zip, entry point, catalog, environment, the
        # connectors and the jobs' own JVM functions


def lf_tag_policy_grants(tpl: Template) -> dict[tuple[str, str], tuple[dict[str, list[str]], list[str]]]:
    """(principal, resource type) → (tag expression, permissions) of every grant by LF-tag expression."""
    found = {}
    for resource in resources(tpl, "AWS::LakeFormation::PrincipalPermissions").values():
        props = resource["Properties"]
        policy = props["Resource"].get("LFTagPolicy")
        if policy:
            expression = {e["TagKey"]: e["TagValues"] for e in policy["Expression"]}
            principal = props["Principal"]["DataLakePrincipalIdentifier"]
            found[(principal, policy["ResourceType"])] = (expression, props["Permissions"])
    return found


@pytest.mark.parametrize("env", ["staging", "production"])
def test_lake_formation_tags_every_database_and_grants_each_consumer_by_tag_expression(stacks: Any, env: str) -> None:
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    tags = {r["Properties"]["TagKey"]: r["Properties"]["TagValues"] for r in resources(tpl, TAG).values()}
    assert tags == {"sensitivity": ["public", "internal", "confidential", "pii"], "pii": ["false", "true"]}
    associations = {
        r["Properties"]["Resource"]["Database"]["Name"]: {
            t["TagKey"]: t["TagValues"] for t in r["Properties"]["LFTags"]
        }
        for r in resources(tpl, "AWS::LakeFormation::TagAssociation").values()
    }
    strictest = {
        "staging": {"acme": "confidential", "globex": "pii"},
        "production": {"acme": "confidential", "globex": "public"},
    }
    assert associations == {
        f"{company}_{env}": {"pii": ["true"], "sensitivity": [level]} for company, level in strictest[env].items()
    }
    databases = [r["Properties"]["DatabaseInput"] for r in resources(tpl, "AWS::Glue::Database").values()]
    assert {d["Name"] for d in databases} == set(associations)  # every database the stack creates is tagged
    assert all(d["CreateTableDefaultPermissions"] == [] for d in databases)  # Lake Formation decides on new tables
    every_level = {"sensitivity": ["public", "internal", "confidential", "pii"]}
    expected = {}
    for consumer in settings.consumers:
        levels = {"sensitivity": [level.value for level in consumer.sensitivity]}
        table_expression = levels if consumer.pii else {**levels, "pii": ["false"]}
        expected[(consumer.role_arn, "DATABASE")] = (every_level, ["DESCRIBE"])
        expected[(consumer.role_arn, "TABLE")] = (table_expression, ["SELECT", "DESCRIBE"])
    assert lf_tag_policy_grants(tpl) == expected
    analysts = next(c.role_arn for c in settings.consumers if c.name == "analysts")
    assert expected[(analysts, "TABLE")][0] == {"sensitivity": ["public", "internal"], "pii": ["false"]}


@pytest.mark.parametrize("env", ["staging", "production"])
def test_lake_formation_governs_the_data_prefix_and_consumers_have_no_direct_access(stacks: Any, env: str) -> None:
    tpl = template(stacks, env)
    [location] = resources(tpl, "AWS::LakeFormation::Resource").values()
    props = location["Properties"]
    assert props["UseServiceLinkedRole"] is False
    assert json.dumps(props["ResourceArn"]).endswith('"/data"]]}')
    role_id = props["RoleArn"]["Fn::GetAtt"][0]
    role = resources(tpl, "AWS::IAM::Role")[role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "lakeformation.amazonaws.com"}
    consumers = [c.role_arn for c in ENVIRONMENTS[env].consumers]
    identity = json.dumps([resources(tpl, kind) for kind in ("AWS::IAM::Role", "AWS::IAM::Policy")])
    assert not any(arn in identity for arn in consumers)
    policies = [r["Properties"]["PolicyDocument"] for r in resources(tpl, "AWS::S3::BucketPolicy").values()]
    [deny] = [s for p in policies for s in p["Statement"] if s.get("Sid") == "ConsumersReadThroughLakeFormationOnly"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"ArnEquals": {"aws:PrincipalArn": consumers}}
    assert "s3:GetObject" in deny["Action"]
    permissions = [r["Properties"] for r in resources(tpl, "AWS::LakeFormation::PrincipalPermissions").values()]
    located = [p for p in permissions if "DataLocation" in p["Resource"]]
    writers = 6 if env == "staging" else 5  # staging's archiver makes its Iceberg topic's table (lake_writers)
    assert [p["Permissions"] for p in located] == [["DATA_LOCATION_ACCESS"]] * writers  # every writer
    assert all(p["Resource"]["DataLocation"]["ResourceArn"] == props["ResourceArn"] for p in located)
    associate = {
        p["Resource"]["LFTag"]["TagKey"]: p["Resource"]["LFTag"]["TagValues"]
        for p in permissions
        if "LFTag" in p["Resource"]
    }
    assert associate == {"sensitivity": ["public", "internal", "confidential", "pii"], "pii": ["false", "true"]}
    databases = {t.database for t in CATALOG.for_env(env)}
    on_tables = [p for p in permissions if "Table" in p["Resource"]]
    assert {p["Resource"]["Table"]["DatabaseName"] for p in on_tables} == databases
    assert all(p["Resource"]["Table"]["TableWildcard"] == {} for p in on_tables)
    archiver = 1 if env == "staging" else 0  # on the database of staging's Iceberg topic
    assert len(on_tables) == 5 * len(databases) + archiver  # crawlers, maintainer, reconciler, compactor, erasure


@pytest.mark.parametrize("env", ["staging", "production"])
def test_lake_formation_gives_each_pipeline_role_what_its_glue_calls_need(stacks: Any, env: str) -> None:
    """infra/stack.py ``_lake_writers``; tests/unit/test_lake_formation.py evaluates the calls against them."""
    rewriter: dict[str, tuple[list[str], list[str]]] = {
        "Database": (["DESCRIBE"], []),
        "Table": (["ALTER"], []),
        "DataLocation": (["DATA_LOCATION_ACCESS"], []),
    }
    tagger = ["ALTER", "DELETE", "DESCRIBE", "DROP", "INSERT", "SELECT"]
    assert lake_writer_grants(template(stacks, env)) == {
        "CatalogCrawlerRole": {
            "Database": (["CREATE_TABLE", "DESCRIBE"], []),
            "Table": (["ALTER", "DESCRIBE", "INSERT", "SELECT"], []),
            "DataLocation": (["DATA_LOCATION_ACCESS"], []),
        },
        "MaintainerRole": {
            "Database": (["CREATE_TABLE"], []),
            "Table": (tagger, tagger),
            "DataLocation": (["DATA_LOCATION_ACCESS"], []),
            "LFTag": (["ASSOCIATE"], []),
        },
        "ReconcilerRole": rewriter,
        "JobsCompactorJobRole": rewriter,
        "JobsErasureJobRole": rewriter,
        # staging has an Iceberg topic, whose table the archiver makes
        **(
            {
                "JobsArchiverJobRole": {  # DESCRIBE to look before it creates; a creator holds the rest
                    "Database": (["CREATE_TABLE", "DESCRIBE"], []),
                    "Table": (["DESCRIBE"], []),
                    "DataLocation": (["DATA_LOCATION_ACCESS"], []),
                }
            }
            if env == "staging"
            else {}
        ),
    }


COLUMN_STATISTICS = re.compile(r"^(\*|glue:\*|glue:\w*ColumnStatistics\w*|glue:UpdateCatalog)$")
"""Glue actions that compute, store or enable column statistics (``UpdateCatalog`` turns on the catalog's automatic
generation), and the wildcards that include them."""


@pytest.mark.parametrize("env", ["staging", "production"])
def test_no_role_may_compute_store_or_enable_glue_column_statistics(stacks: Any, env: str) -> None:
    """Glue's column statistics keep a string column's minimum and maximum: a personal column's value in clear (or a
    pseudonym) that no erasure finds. No role of the stack may make them, and no managed Glue policy (the service
    role's grants glue:*) is attached; so any job, crawler or Lambda calling them fails the permission check."""
    tpl = template(stacks, env)
    granted = statement_actions([s for s in all_statements(tpl) if s["Effect"] == "Allow"])
    assert "glue:UpdatePartition" in granted and not {a for a in granted if COLUMN_STATISTICS.match(a)}
    managed = [
        a for r in resources(tpl, "AWS::IAM::Role").values() for a in r["Properties"].get("ManagedPolicyArns", [])
    ]
    assert "Glue" not in json.dumps(managed)
