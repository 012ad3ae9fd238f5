"""The CDK app: real template assertions per environment, cdk-nag with zero unacknowledged findings."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template
from cdk_nag import AwsSolutionsChecks

from infra.app import build
from infra.assets import maintainer_bundle
from infra.constructs.maintainer import MAINTAINER_GLUE_ACTIONS
from infra.constructs.personal import PersonalData
from infra.lifecycle import lake_lifecycle
from infra.repo import REPO_ROOT, catalog_dir, environments_file
from infra.stack import KafkalakeStack
from kafkalake.environments import load_environments
from kafkalake.topic_catalog import TopicCatalog, load_topic_catalog
from kafkalake.topic_spec import TableFormat

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
ENVIRONMENTS = load_environments(environments_file())
TAG = "AWS::LakeFormation::Tag"
CATALOG = load_topic_catalog(catalog_dir())


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> tuple[App, dict[str, KafkalakeStack]]:
    app = App()
    return app, build(app, ENVIRONMENTS, CATALOG, tmp_path_factory.mktemp("build"))


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


def role_statements(tpl: Template, role_fragment: str) -> list[dict[str, Any]]:
    policies = resources(tpl, "AWS::IAM::Policy").values()
    return [
        s
        for p in policies
        if any(role_fragment in r["Ref"] for r in p["Properties"]["Roles"])
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def resources_of(statement: dict[str, Any]) -> list[Any]:
    found = statement["Resource"]
    return found if isinstance(found, list) else [found]


def statement_actions(statements: list[dict[str, Any]]) -> set[str]:
    return {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}


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
def test_notifications_queue_dlq_and_filter(stacks: Any, env: str) -> None:
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    queue = tpl.find_resources("AWS::SQS::Queue", {"Properties": {"QueueName": settings.queue_name}})
    props = next(iter(queue.values()))["Properties"]
    assert props["VisibilityTimeout"] == 6 * settings.maintainer_timeout_seconds
    assert props["RedrivePolicy"]["maxReceiveCount"] == settings.max_receive_count
    assert "KmsMasterKeyId" in props
    assert props.get("MaximumMessageSize", 262144) >= 64 * 1024
    dlq = tpl.find_resources("AWS::SQS::Queue", {"Properties": {"QueueName": settings.dead_letter_queue_name}})
    assert len(dlq) == 1 and "KmsMasterKeyId" in next(iter(dlq.values()))["Properties"]
    tpl.has_resource_properties(
        "Custom::S3BucketNotifications",
        {
            "NotificationConfiguration": {
                "QueueConfigurations": [
                    Match.object_like(
                        {
                            "Events": ["s3:ObjectCreated:*"],
                            "Filter": {
                                "Key": {
                                    "FilterRules": [
                                        {"Name": "suffix", "Value": ".parquet"},
                                        {"Name": "prefix", "Value": "data/"},
                                    ]
                                }
                            },
                        }
                    )
                ]
            }
        },
    )
    policies = [
        p["Properties"]["PolicyDocument"]["Statement"] for p in resources(tpl, "AWS::SQS::QueuePolicy").values()
    ]
    statements = [s for group in policies for s in group]
    assert any(s.get("Sid") == "OnlyThisBucket" and s["Effect"] == "Deny" for s in statements)
    # (10) one condition operator per denial: in one statement they would all have to hold
    denials = {s["Sid"]: s["Condition"] for s in statements if s.get("Sid") in ("OnlyThisBucket", "OnlyThisAccount")}
    assert list(denials["OnlyThisBucket"]) == ["ArnNotEquals"]
    assert list(denials["OnlyThisAccount"]) == ["StringNotEquals"]
    assert any(
        s["Effect"] == "Deny" and s.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        for s in statements
    )


@pytest.mark.parametrize("env", ["staging", "production"])
def test_maintainer_lambda_schedule_and_least_privilege(stacks: Any, env: str) -> None:
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    tpl.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "FunctionName": f"kafkalake-{env}-maintainer",
            "Runtime": "python3.13",
            "Architectures": ["arm64"],
            "Handler": "lambdas.maintainer.handler.handler",
            "ReservedConcurrentExecutions": Match.absent(),  # (9) fails in accounts with the default quota
            "Timeout": settings.maintainer_timeout_seconds,
            "Layers": list(settings.maintainer_layers),
            "Environment": {
                "Variables": Match.object_like(
                    {"KAFKALAKE_BUCKET": settings.bucket, "KAFKALAKE_AWS_ENDPOINT_URL": Match.absent()}
                )
            },
        },
    )
    tpl.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(10 minutes)"})
    statements = role_statements(tpl, "MaintainerRole")
    actions = statement_actions(statements)
    assert actions == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "kms:Decrypt",
        *MAINTAINER_GLUE_ACTIONS,
        "glue:GetCrawler",
        "glue:StartCrawler",
        "s3:GetObject",
        "s3:PutObject",  # late-data markers and completeness-event claims only (below)
        "kms:GenerateDataKey",  # for those objects, with the lake's key
        "events:PutEvents",
        "lakeformation:AddLFTagsToResource",  # the tables it creates (Lake Formation scopes it to our tags)
        "sqs:SendMessage",  # its invocation dead-letter queue
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
    }
    assert not any(a.startswith("s3:Delete") for a in actions)
    [put] = [s for s in statements if s["Action"] == "s3:PutObject"]
    late, claims = (json.dumps(resource) for resource in put["Resource"])
    assert late.endswith('/state/*/late/*"]]}') and claims.endswith('/state/*/complete/*"]]}'), put["Resource"]
    glue = next(s for s in statements if "glue:BatchCreatePartition" in s["Action"])
    rendered = json.dumps(glue["Resource"])
    for database in {t.database for t in CATALOG.for_env(env)}:
        assert f":database/{database}" in rendered and f":table/{database}/*" in rendered
    wildcard = [s for s in statements if s["Resource"] == "*"]
    tagging = "lakeformation:AddLFTagsToResource"
    assert [s["Action"] for s in wildcard if s["Action"] == tagging] == [tagging]
    xray = [sorted(s["Action"]) for s in wildcard if s["Action"] != tagging]
    assert xray == [["xray:PutTelemetryRecords", "xray:PutTraceSegments"]]


@pytest.mark.parametrize("env", ["staging", "production"])
def test_no_wildcard_actions_anywhere(stacks: Any, env: str) -> None:
    for statement in all_statements(template(stacks, env)):
        actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        if statement.get("Effect") == "Deny":
            continue
        assert not [a for a in actions if a == "*" or a.endswith(":*")], statement


@pytest.mark.parametrize(("env", "crawlers"), [("staging", 2), ("production", 1)])  # staging's Iceberg topic: none
def test_glue_databases_and_one_crawler_per_crawler_mode_topic(stacks: Any, env: str, crawlers: int) -> None:
    tpl = template(stacks, env)
    tpl.resource_count_is("AWS::Glue::Crawler", crawlers)
    tpl.resource_count_is("AWS::Glue::Database", len({t.database for t in CATALOG.for_env(env)}))
    for crawler in resources(tpl, "AWS::Glue::Crawler").values():
        props = crawler["Properties"]
        assert props["RecrawlPolicy"] == {"RecrawlBehavior": "CRAWL_EVERYTHING"}
        configuration = json.loads(props["Configuration"])
        assert configuration["Grouping"]["TableGroupingPolicy"] == "CombineCompatibleSchemas"
        assert configuration["CrawlerOutput"]["Partitions"]["AddOrUpdateBehavior"] == "InheritFromTable"
        [target] = props["Targets"]["S3Targets"]
        assert target["Exclusions"] == ["_compacted/**"], "compaction output is never a table or partition"
        configuration_id = props["CrawlerSecurityConfiguration"]["Ref"]
        security = resources(tpl, "AWS::Glue::SecurityConfiguration")[configuration_id]["Properties"]
        assert security["Name"] == f"kafkalake-{env}"


@pytest.mark.parametrize("env", ["staging", "production"])
def test_emr_serverless_application_roles_and_schedule(stacks: Any, env: str) -> None:
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    tpl.has_resource_properties(
        "AWS::EMRServerless::Application",
        {
            "ReleaseLabel": "emr-7.7.0",
            "Type": "SPARK",
            "AutoStopConfiguration": {"Enabled": True, "IdleTimeoutMinutes": 15},
            "MaximumCapacity": {
                "Cpu": f"{settings.emr_max_vcpu} vCPU",
                "Memory": f"{settings.emr_max_memory_gb} GB",
                "Disk": f"{settings.emr_max_disk_gb} GB",
            },
            "NetworkConfiguration": {
                "SubnetIds": list(settings.subnet_ids),
                "SecurityGroupIds": list(settings.security_group_ids),
            },
        },
    )
    sizes = {  # driver vCPU, heap, overhead; executor vCPU, heap, overhead
        "archiver": ("2", "2g", "2g", "2", "2g", "2g"),
        "compactor": ("2", "3g", "1g", "4", "3g", "5g"),
    }
    for application, (driver_cores, driver_heap, driver_rest, cores, heap, rest) in sizes.items():
        tpl.has_resource_properties(
            "AWS::EMRServerless::Application",
            {
                "Name": f"kafkalake-{env}-{application}",
                "RuntimeConfiguration": [
                    {
                        "Classification": "spark-defaults",
                        "Properties": {
                            "spark.driver.cores": driver_cores,
                            "spark.driver.memory": driver_heap,
                            "spark.driver.memoryOverhead": driver_rest,
                            "spark.executor.cores": cores,
                            "spark.executor.memory": heap,
                            "spark.executor.memoryOverhead": rest,
                        },
                    }
                ],
            },
        )
    tpl.has_resource_properties(
        "AWS::Scheduler::Schedule",
        {
            "ScheduleExpression": f"rate({settings.archiver_schedule_minutes} minutes)",
            "Target": Match.object_like({"Arn": "arn:aws:scheduler:::aws-sdk:emrserverless:startJobRun"}),
        },
    )
    archiver = role_statements(tpl, "ArchiverJobRole")
    assert {
        "Action": "secretsmanager:GetSecretValue",
        "Effect": "Allow",
        "Resource": settings.kafka_secret_arn,
    } in archiver
    assert not [s for s in archiver if "s3:DeleteObject" in s["Action"]], "the archiver deletes nothing"
    archiver_puts = [r for s in archiver if s["Action"] == "s3:PutObject" for r in resources_of(s)]
    assert f"/erasure/{env}/requests/*" in [r["Fn::Join"][1][1] for r in archiver_puts], "tombstones' requests"
    archiver_glue = {a for s in archiver for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    iceberg = [t for t in CATALOG.for_env(env) if t.spec.table_format == TableFormat.ICEBERG]
    expected_glue = {"glue:GetDatabase", "glue:GetTable", "glue:CreateTable", "glue:UpdateTable"} if iceberg else set()
    assert {a for a in archiver_glue if a.startswith("glue:")} == expected_glue  # its Iceberg tables' commits only
    compactor = role_statements(tpl, "CompactorJobRole")
    puts = [s for s in compactor if "s3:PutObject" in s["Action"]]
    written = sorted(r["Fn::Join"][1][1] for s in puts for r in resources_of(s))
    iceberg_locations = [f"/{t.prefix.data_prefix()}*" for t in iceberg]
    assert written == sorted(["/data/*/_compacted/*", "/state/*", *iceberg_locations]), (
        "output under the tables' _compacted/, manifests, and an Iceberg table's rewrites under its own location"
    )
    glue = next(s for s in compactor if "glue:UpdatePartition" in s["Action"])
    assert sorted(glue["Action"]) == [
        "glue:GetPartition",
        "glue:GetPartitions",
        "glue:UpdatePartition",
    ], "partitions read and re-pointed; the table itself never read"
    assert not any("secretsmanager" in json.dumps(s) for s in compactor)
    erasure = role_statements(tpl, "ErasureJobRole")
    [versions] = [s for s in erasure if s["Action"] == "s3:DeleteObjectVersion"]
    purged = sorted(r["Fn::Join"][1][1] for r in versions["Resource"])
    assert purged == ["/compacted/*", "/data/*", f"/erasure/{env}/index/*", "/quarantine/*"], (
        "object versions are deleted under the data (legacy compaction root included), the quarantine and the "
        "environment's subject indexes only"
    )
    assert any(s["Action"] == "s3:ListBucketVersions" for s in erasure)
    legacy = [s for s in erasure if "/compacted/*" in json.dumps(s["Resource"])]
    assert sorted(a for s in legacy for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])) == [
        "s3:DeleteObject",
        "s3:DeleteObjectVersion",
        "s3:GetObject",
    ], "the legacy compaction root: read, deleted and purged by the erasure job, never written"
    [secret_id] = resources(tpl, "AWS::SecretsManager::Secret")  # generated: environments.yaml names none
    reads = {"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": {"Ref": secret_id}}
    assert reads in erasure, "the erasure job hashes requests' subjects with the pseudonym key"
    [restricted] = [s for s in erasure if "s3:DeleteObjectVersion" in s["Action"] and isinstance(s["Action"], list)]
    assert restricted["Resource"]["Fn::Join"][1][1] == "/restricted/quarantine/*", "restricted quarantine rows too"
    [restricted_key] = [k for i, k in resources(tpl, "AWS::KMS::Key").items() if "RestrictedKey" in i]
    assert any(
        s["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"] and "ErasureJobRole" in json.dumps(s["Principal"])
        for s in restricted_key["Properties"]["KeyPolicy"]["Statement"]
    ), "the erasure job rewrites restricted quarantine objects with the restricted key (its key policy says so)"
    erasure_objects = next(s for s in erasure if "s3:DeleteObject" in s["Action"] and "s3:PutObject" in s["Action"])
    assert f"/erasure/{env}/*" in [r["Fn::Join"][1][1] for r in erasure_objects["Resource"]]
    assert "/erasure/*" not in json.dumps(erasure), "its own environment's requests, receipts, lease and indexes"
    assert not [s for s in compactor if "s3:DeleteObjectVersion" in s["Action"]], "only erasure deletes versions"
    schedules = {r["Properties"]["Name"]: r["Properties"] for r in resources(tpl, "AWS::Scheduler::Schedule").values()}
    assert schedules[f"kafkalake-{env}-compactor"]["ScheduleExpression"] == "rate(1 hour)"
    assert schedules[f"kafkalake-{env}-erasure"]["ScheduleExpression"] == "rate(1 hour)"
    erase_input = json.dumps(schedules[f"kafkalake-{env}-erasure"]["Target"]["Input"])
    assert '\\"EntryPointArguments\\":[\\"erase\\",\\"--env\\",\\"' + env in erase_input
    compact_input = json.dumps(schedules[f"kafkalake-{env}-compactor"]["Target"]["Input"])
    for topic in CATALOG.for_env(env):
        assert f'\\"--table\\",\\"{topic.name}\\"' in compact_input
    archive_input = json.dumps(schedules[f"kafkalake-{env}-archiver"]["Target"]["Input"])
    for rendered in (compact_input, archive_input):
        assert '\\"--catalog\\",\\"catalog\\"' in rendered
        assert "--conf spark.archives=" in rendered and "--archives" not in rendered  # (2)
        assert re.search(r'\.zip"\}, "#catalog,', rendered) and re.search(r'\.tgz"\}, "#environment ', rendered)
        assert "spark.jars.packages" not in rendered and "--conf spark.jars=" in rendered  # (1)
        assert rendered.count('.jar"}') == 6, "one asset per jar the jobs ship: five connectors and the keyed hash"
        assert "spark.sql.session.timeZone=UTC" in rendered  # (3)
        assert "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python" in rendered
        assert "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python" in rendered
        assert settings.kafka_secret_arn  # credentials reach the jobs as the secret's ARN, never as values
        assert f"spark.emr-serverless.driverEnv.KAFKALAKE_KAFKA_SECRET_ARN={settings.kafka_secret_arn} " in rendered


@pytest.mark.parametrize("env", ["staging", "production"])
def test_monitoring(stacks: Any, env: str) -> None:
    tpl = template(stacks, env)
    # 14 + reconciler: repaired, errors, its DLQ; drift: 2; freshness; erasure: late requests, its job's failures;
    # records held for schema versions the catalog lacks
    tpl.resource_count_is("AWS::CloudWatch::Alarm", 23)
    tpl.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "GlueDataAgeSeconds",
            "Namespace": "kafkalake",
            "Dimensions": [{"Name": "service", "Value": "kafkalake-maintainer"}],
            "Statistic": "Maximum",
            "Period": 60 * ENVIRONMENTS[env].maintainer_schedule_minutes,
            "Threshold": 60 * ENVIRONMENTS[env].freshness_alarm_minutes,
        },
    )
    for drift in ("CatalogUncataloguedTopics", "CatalogMissingSchemaVersions"):
        tpl.has_resource_properties(
            "AWS::CloudWatch::Alarm",
            {
                "MetricName": drift,
                "Namespace": "kafkalake",
                "Dimensions": [{"Name": "Environment", "Value": env}],
                "Statistic": "Maximum",
                "Period": 60 * ENVIRONMENTS[env].archiver_schedule_minutes,
                "Threshold": 0,
                "ComparisonOperator": "GreaterThanThreshold",
            },
        )
    tpl.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "ErasureRequestsLate",
            "Namespace": "kafkalake",
            "Dimensions": [{"Name": "Environment", "Value": env}],
            "Statistic": "Maximum",
            "Period": 3600,
            "Threshold": 0,
        },
    )
    for archiver in ("ArchiverTopicsFailed", "ArchiverRecordsHeld"):
        tpl.has_resource_properties(
            "AWS::CloudWatch::Alarm",
            {
                "MetricName": archiver,
                "Namespace": "kafkalake",
                "Dimensions": [{"Name": "Environment", "Value": env}],
                "Threshold": 0,
                "ComparisonOperator": "GreaterThanThreshold",
            },
        )
    growth = next(
        a["Properties"]
        for a in resources(tpl, "AWS::CloudWatch::Alarm").values()
        if any(m.get("Expression") == "DIFF(lag)" for m in a["Properties"].get("Metrics", []))
    )
    assert growth["EvaluationPeriods"] == 3 and growth["Threshold"] == 0
    [lag] = [m for m in growth["Metrics"] if m["Id"] == "lag"]
    assert lag["MetricStat"]["Metric"]["MetricName"] == "ArchiverTotalLag"
    assert lag["MetricStat"]["Period"] == 60 * ENVIRONMENTS[env].archiver_schedule_minutes
    tpl.resource_count_is("AWS::CloudWatch::Dashboard", 1)
    tpl.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"MetricName": "ApproximateNumberOfMessagesVisible", "Threshold": 0}
    )
    tpl.has_resource_properties(
        "AWS::CloudWatch::Alarm", {"MetricName": "FailedJobs", "Namespace": "AWS/EMRServerless"}
    )


@pytest.mark.parametrize("env", ["staging", "production"])
def test_reconciler_runs_daily_lists_only_our_prefixes_and_alarms_when_it_repairs(stacks: Any, env: str) -> None:
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    tpl.has_resource_properties(
        "AWS::Lambda::Function",
        {
            "FunctionName": f"kafkalake-{env}-reconciler",
            "Handler": "lambdas.reconciler.handler.handler",
            "Timeout": settings.reconciler_timeout_seconds,
            "Environment": {"Variables": Match.object_like({"KAFKALAKE_BUCKET": settings.bucket})},
        },
    )
    functions = resources(tpl, "AWS::Lambda::Function")
    codes = {
        json.dumps(f["Properties"]["Code"], sort_keys=True)
        for f in functions.values()
        if "FunctionName" in f["Properties"] and "kafkalake-" in f["Properties"]["FunctionName"]
    }
    assert len(codes) == 1, "the maintainer and the reconciler share one bundle"
    rules = [r["Properties"] for r in resources(tpl, "AWS::Events::Rule").values()]
    assert any(r.get("ScheduleExpression") == settings.reconcile_schedule for r in rules)
    statements = role_statements(tpl, "ReconcilerRole")
    actions = statement_actions(statements)
    assert actions == {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "glue:GetTable",
        "glue:GetPartitions",
        "glue:BatchCreatePartition",
        "s3:ListBucket",
        "sqs:SendMessage",  # its invocation dead-letter queue
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
    }
    [listing] = [s for s in statements if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["data/*", "compacted/*"]}}
    tpl.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "ReconcilePartitionsRepaired",
            "Namespace": "kafkalake",
            "Dimensions": [{"Name": "service", "Value": "kafkalake-reconciler"}],
            "Statistic": "Sum",
            "Period": 86400,
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
        },
    )


@pytest.mark.parametrize("env", ["staging", "production"])
def test_cdk_nag_has_no_unacknowledged_findings(stacks: Any, env: str) -> None:
    app, built = stacks
    report = AwsSolutionsChecks(app).validate_scope(built[env])
    assert [v.rule_name for v in report.violations] == []
    assert report.success


def write_topic(root: Path, company: str, domain: str, name: str, inference: str) -> None:
    folder = root / company / domain / "staging"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(f"table_inference: {inference}\nretention_days: 30\n")
    (folder / f"{name}.v1.avsc").write_text(
        json.dumps({"type": "record", "name": "R", "fields": [{"name": "id", "type": "string"}]})
    )


def test_two_companies_five_topics(tmp_path: Path) -> None:
    for company, domain, name, inference in [
        ("alpha", "sales", "orders", "crawler"),
        ("alpha", "sales", "returns", "native"),
        ("alpha", "ops", "tickets", "crawler"),
        ("beta", "iot", "pings", "crawler"),
        ("beta", "iot", "alerts", "native"),
    ]:
        write_topic(tmp_path / "catalog", company, domain, name, inference)
    catalog: TopicCatalog = load_topic_catalog(tmp_path / "catalog")
    app = App()
    built = build(app, {"staging": ENVIRONMENTS["staging"]}, catalog, tmp_path / "build")
    tpl = Template.from_stack(built["staging"])
    tpl.resource_count_is("AWS::Glue::Crawler", 3)
    tpl.resource_count_is("AWS::Glue::Database", 2)
    names = {c["Properties"]["Name"] for c in resources(tpl, "AWS::Glue::Crawler").values()}
    assert names == {
        "kafkalake-alpha_staging-orders",
        "kafkalake-alpha_staging-tickets",
        "kafkalake-beta_staging-pings",
    }
    assert AwsSolutionsChecks(app).validate_scope(built["staging"]).violations == []


def granted(statements: list[dict[str, Any]], action: str) -> list[str]:
    """The resources ``action`` is granted on, rendered as text (CloudFormation functions included)."""
    return [
        json.dumps(r)
        for s in statements
        if action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        for r in resources_of(s)
    ]


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


def test_maintainer_asset_imports_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    """The bundle plus the layers' packages (Powertools, pydantic, pyarrow; boto3 is in the runtime) is enough."""
    bundle = maintainer_bundle(tmp_path / "build", CATALOG.for_env("staging"))
    assert (bundle / "kafkalake" / "layout.py").exists()
    assert json.loads((bundle / "lambdas" / "tables.json").read_text())[0]["env"] == "staging"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pins = {
        line.split("==")[0].split("[")[0].lower(): line.strip()
        for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line
    }
    wanted = [pins[n] for n in ("aws-lambda-powertools", "aws-xray-sdk", "pydantic", "pyarrow", "boto3", "botocore")]
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *wanted], check=True)
    probe = (
        "import sys, lambdas.maintainer.handler as h; "
        "heavy = [m for m in ('yaml', 'fastavro', 'kafkalake.topic_catalog', 'pyspark') if m in sys.modules]; "
        "print(h.handler.__name__, heavy)"
    )
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        cwd=bundle,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"], "AWS_REGION": "eu-west-1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "handler []"


def test_sam_env_file_names_the_maintainer_logical_id(stacks: Any) -> None:
    functions = template(stacks, "staging").find_resources(
        "AWS::Lambda::Function", {"Properties": {"FunctionName": "kafkalake-staging-maintainer"}}
    )
    overrides = json.loads((REPO_ROOT / "events" / "sam-env.json").read_text())
    assert list(overrides) == list(functions)
    assert json.loads((REPO_ROOT / "events" / "scheduled.json").read_text())["detail-type"] == "Scheduled Event"


def test_jobs_run_from_their_zip_with_the_catalog_and_environment_archives(tmp_path: Path) -> None:
    """What EMR Serverless does: catalog.zip unpacked as ./catalog, environment.tgz as ./environment, the jobs
    zip on the Python path, ./environment/bin/python as the interpreter (EMR's own Python 3.11, here Debian's,
    which has none of our dependencies), PySpark provided by the platform. Every module the jobs import from the two
    archives loads from the bytecode they carry: none is compiled from source (``infra.assets.compiled``)."""
    import tarfile
    import zipfile

    from infra.assets import EMR_PYTHON, job_environment, jobs_bundle

    bundle = jobs_bundle(tmp_path / "build")
    work = tmp_path / "work"
    with zipfile.ZipFile(bundle / "catalog.zip") as archive:
        archive.extractall(work / "catalog")
    with tarfile.open(job_environment(tmp_path / "env")) as archive:
        archive.extractall(work / "environment", filter="data")
    provided = tmp_path / "emr-provided"  # EMR puts its PySpark on the path; borrow ours
    provided.mkdir()
    for package in ("pyspark", "py4j"):
        (provided / package).symlink_to(Path(importlib.import_module(package).__file__ or "").parent)
    probe = """
import sys, importlib, zipimport
from importlib import _bootstrap_external
from pathlib import Path

compiled = []  # what is compiled from source, of the archives' modules: none, they carry their bytecode
from_source, zip_source = _bootstrap_external.SourceLoader.source_to_code, zipimport._compile_source
def source_to_code(loader, data, path, **options):
    compiled.append(str(path))
    return from_source(loader, data, path, **options)
def zipped_source(path, source):
    compiled.append(path)
    return zip_source(path, source)
_bootstrap_external.SourceLoader.source_to_code, zipimport._compile_source = source_to_code, zipped_source

import spark_jobs.archiver.job as a, spark_jobs.compaction.job as c
from kafkalake.topic_catalog import load_topic_catalog
assert a.parse_args(['--env', 'staging', '--topic', 'x', '--catalog', 'catalog']).catalog == Path('catalog')
deps = ['pyarrow', 'pandas', 'numpy', 'boto3', 'pydantic', 'yaml', 'fastavro', 'confluent_kafka', 'httpx']
outside = [d for d in deps if '/environment/site-packages/' not in importlib.import_module(d).__file__]
topics = load_topic_catalog(Path('catalog')).topics
ours = [p for p in compiled if '/environment/' in p or 'kafkalake_jobs.zip' in p]
print(sys.version_info[:2], a.__file__.split('/')[-4], len(topics), outside, len(ours), ours[:3])
"""
    assert Path(EMR_PYTHON).exists(), f"{EMR_PYTHON} (Debian package python3.11) stands in for EMR's Python 3.11"
    result = subprocess.run(
        [str(work / "environment" / "bin" / "python"), "-c", probe],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": f"{bundle / 'kafkalake_jobs.zip'}:{provided}"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(3, 11) kafkalake_jobs.zip 8 [] 0 []"


@pytest.mark.parametrize("env", ["staging", "production"])
def test_scheduler_targets_retry_safely_with_a_dead_letter_queue(stacks: Any, env: str) -> None:
    """(4) the client token is the scheduled time (the same for every retry of one run), retries and a DLQ, an
    execution timeout per job, one application per job (capacity and failures apart)."""
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    tpl.resource_count_is("AWS::EMRServerless::Application", 3)
    schedules = {r["Properties"]["Name"]: r["Properties"] for r in resources(tpl, "AWS::Scheduler::Schedule").values()}
    timeouts = {
        "archiver": settings.archiver_timeout_minutes,
        "compactor": settings.compactor_timeout_minutes,
        "erasure": settings.compactor_timeout_minutes,
    }
    for job, timeout in timeouts.items():
        target = schedules[f"kafkalake-{env}-{job}"]["Target"]
        rendered = json.dumps(target["Input"])
        verb = {"archiver": "archive", "compactor": "compact", "erasure": "erase"}[job]
        token = f"{verb}-<aws.scheduler.scheduled-time>"
        assert f'\\"ClientToken\\":\\"{token}\\"' in rendered
        assert "execution-id" not in rendered
        assert f'\\"ExecutionTimeoutMinutes\\":{timeout}' in rendered
        assert target["RetryPolicy"] == {
            "MaximumRetryAttempts": settings.scheduler_retry_attempts,
            "MaximumEventAgeInSeconds": settings.scheduler_max_event_age_seconds,
        }
        assert "Arn" in target["DeadLetterConfig"]
    applications = {r["Properties"]["Name"] for r in resources(tpl, "AWS::EMRServerless::Application").values()}
    assert applications == {f"kafkalake-{env}-archiver", f"kafkalake-{env}-compactor", f"kafkalake-{env}-erasure"}


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
        assert len(keys) == 10, keys  # jobs zip, entry point, catalog, environment, five connectors, the keyed hash


@pytest.mark.parametrize("env", ["staging", "production"])
def test_crawlers_depend_on_their_database_and_can_write_encrypted_logs(stacks: Any, env: str) -> None:
    """(7) references (so CloudFormation orders them), a key policy that admits CloudWatch Logs, logs:AssociateKmsKey
    and a role scoped to our databases instead of the managed AWSGlueServiceRole."""
    tpl = template(stacks, env)
    for crawler in resources(tpl, "AWS::Glue::Crawler").values():
        props = crawler["Properties"]
        assert set(props["DatabaseName"]) == {"Ref"} and set(props["CrawlerSecurityConfiguration"]) == {"Ref"}
    crawler_roles = [r for k, r in resources(tpl, "AWS::IAM::Role").items() if "CrawlerRole" in k]
    assert len(crawler_roles) == 1 and "ManagedPolicyArns" not in crawler_roles[0]["Properties"]
    statements = role_statements(tpl, "CrawlerRole")
    actions = statement_actions(statements)
    assert "logs:AssociateKmsKey" in actions and not any(a.endswith(":*") or a == "*" for a in actions)
    lake_key = next(k for k, r in resources(tpl, "AWS::KMS::Key").items() if k.startswith("LakeKey"))
    policy = resources(tpl, "AWS::KMS::Key")[lake_key]["Properties"]["KeyPolicy"]["Statement"]
    logs = next(s for s in policy if s.get("Sid") == "CloudWatchLogs")
    assert logs["Principal"]["Service"] == f"logs.{ENVIRONMENTS[env].region}.amazonaws.com"
    assert "kms:EncryptionContext:aws:logs:arn" in logs["Condition"]["ArnLike"]


@pytest.mark.parametrize("env", ["staging", "production"])
def test_alarms_can_notify_and_fire_only_when_something_is_wrong(stacks: Any, env: str) -> None:
    """(8) the alarm topic's key admits CloudWatch, subscriptions come from environments.yaml; (11) thresholds and
    the alarms the maintainer's own metrics and each job need."""
    tpl = template(stacks, env)
    settings = ENVIRONMENTS[env]
    keys = resources(tpl, "AWS::KMS::Key")
    queue_key = next(r for k, r in keys.items() if k.startswith("NotificationsQueueKey"))
    statements = queue_key["Properties"]["KeyPolicy"]["Statement"]
    alarms_statement = next(s for s in statements if s.get("Sid") == "CloudWatchAlarms")
    assert alarms_statement["Principal"]["Service"] == "cloudwatch.amazonaws.com"
    subscriptions = [r["Properties"] for r in resources(tpl, "AWS::SNS::Subscription").values()]
    assert settings.alarm_subscriptions
    assert sorted((s["Protocol"], s["Endpoint"]) for s in subscriptions) == sorted(
        (s.protocol, s.endpoint) for s in settings.alarm_subscriptions
    )
    alarms = {k: r["Properties"] for k, r in resources(tpl, "AWS::CloudWatch::Alarm").items()}
    oldest = next(a for a in alarms.values() if a.get("MetricName") == "ApproximateAgeOfOldestMessage")
    assert oldest["Threshold"] == settings.oldest_notification_alarm_seconds > settings.queue_visibility_timeout_seconds
    names = {a.get("MetricName") for a in alarms.values()}
    assert {"errors", "malformed", "TargetErrorCount", "InvocationDroppedCount"} <= names
    failed_jobs = [a for a in alarms.values() if a.get("MetricName") == "FailedJobs"]
    applications = {json.dumps(a["Dimensions"]) for a in failed_jobs}
    assert len(failed_jobs) == 3 and len(applications) == 3, "one job-failure alarm per application"


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
