"""The pipeline's resources in the synthesized templates: S3 notifications to SQS with a dead-letter queue, the
maintainer and reconciler Lambdas and their schedules, Glue databases and crawlers, the EMR Serverless applications
and their scheduled job runs, one stack per environment from the catalog.

Past 400 lines by a few: one test per construct of the pipeline, and the EMR one checks each job role's grants (S3,
Glue, secrets, Kafka) beside the application and schedule they serve."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Match

from infra.constructs.maintainer import MAINTAINER_GLUE_ACTIONS
from kafkalake.jobspec import SPARK_CONNECTORS
from kafkalake.topic_spec import TableFormat
from tests.unit.cdk_templates import (
    CATALOG,
    ENVIRONMENTS,
    all_statements,
    kafka_grants,
    resources,
    resources_of,
    role_statements,
    statement_actions,
    template,
)


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


@pytest.mark.parametrize(("env", "crawlers"), [("staging", 4), ("production", 1)])  # staging's Iceberg topic: none
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


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


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
    kafka = kafka_grants(archiver)
    if settings.msk_cluster_arn is None:
        assert kafka == {} and not [s for s in all_statements(tpl) if "kafka-cluster:" in json.dumps(s["Action"])]
    else:  # exactly the catalog's topics and the archiver's groups, by their ARNs: no wildcard
        cluster = settings.msk_cluster_arn
        prefix = cluster.replace(":cluster/", ":{}/")
        topics = sorted(t.kafka_topic for t in CATALOG.for_env(env))
        groups = {f"{prefix.format('group')}/kafkalake-archiver.{t}" for t in topics}
        assert kafka == {
            ("kafka-cluster:Connect",): {cluster},
            ("kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"): {
                f"{prefix.format('topic')}/{t}" for t in topics
            },
            ("kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"): groups,
            ("kafka-cluster:DescribeGroup",): {f"{prefix.format('group')}/kafkalake-archiver.(shared)"},
        }
        assert not any("*" in r for found in kafka.values() for r in found)
        others = [s for s in all_statements(tpl) if s not in archiver and "kafka-cluster:" in json.dumps(s["Action"])]
        assert others == [], "only the archiver talks to Kafka"
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
    assert purged == [
        "/compacted/*",
        "/data/*",
        f"/erasure/{env}/index/*",
        f"/erasure/{env}/requests/*",
        "/quarantine/*",
    ], (
        "object versions are deleted under the data (legacy compaction root included), the quarantine and the "
        "environment's subject indexes and requests only"
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
        shipped = len(SPARK_CONNECTORS) + 1
        assert rendered.count('.jar"}') == shipped, "one asset per jar the jobs ship: the connectors and the jobs' own"
        assert "spark.sql.session.timeZone=UTC" in rendered  # (3)
        assert "spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python" in rendered
        assert "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python" in rendered
        assert settings.kafka_secret_arn  # credentials reach the jobs as the secret's ARN, never as values
        assert f"spark.emr-serverless.driverEnv.KAFKALAKE_KAFKA_SECRET_ARN={settings.kafka_secret_arn} " in rendered


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
